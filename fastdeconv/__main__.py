"""Command line: python -m fastdeconv {info, bench, convert}."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fastdeconv", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="print show_config()")
    bench = commands.add_parser("bench", help="time the benchmark suite on the CPU backend")
    bench.add_argument("--case", action="append", help="run only this case (repeatable)")
    bench.add_argument("--json", metavar="FILE", help="also write the numbers to FILE")
    bench.add_argument("--threads", type=int, default=0, help="threads (default: all)")
    bench.add_argument("--repeat", type=float, default=0.5, help="seconds of timing per cell (default 0.5)")
    bench.add_argument("--no-peers", action="store_true", help="skip torch and onnxruntime even if installed")
    convert = commands.add_parser("convert", help="convert an ONNX model's conv layers to MPS weight files")
    convert.add_argument("paths", nargs="+", metavar="[MODEL.onnx] OUTDIR")
    convert.add_argument("--force", action="store_true", help="replace an existing OUTDIR")
    args = parser.parse_args(argv)

    if args.command == "info":
        from . import show_config

        show_config()
        return 0
    if args.command == "bench":
        from .bench import run_bench

        return run_bench(cases=args.case, json_path=args.json, threads=args.threads, seconds=args.repeat,
                         peers=not args.no_peers)
    from .convert import main as convert_main

    return convert_main(args.paths, force=args.force)


if __name__ == "__main__":
    sys.exit(main())

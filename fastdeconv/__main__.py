"""Command line: ``fastdeconv {info, bench, convert, dask-demo}`` (the console script) or ``python -m fastdeconv``."""

from __future__ import annotations

import argparse
import math
import sys


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line (and exit status 2), not argparse's usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive(kind, what):
    """An argparse type: a number of `kind` > 0 (and finite), else a one-line usage error."""
    noun = "a whole number" if kind is int else "a finite number"
    hint = " (omit --threads for the default)" if what == "threads" else ""

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"{what} must be {noun} > 0, got {text!r}{hint}")
        return value
    return parse


class _DeprecatedAlias(argparse.Action):
    """Stores like the option it stands for, with a note on stderr."""

    def __init__(self, *args, instead, **kwargs):
        self.instead = instead
        super().__init__(*args, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: note: {option_string} is deprecated; use {self.instead}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _case_names(text):
    from .bench import CASES

    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in CASES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown case {(unknown or [text])[0]!r}; choose from {', '.join(CASES)}")
    return names


def build_parser(prog="fastdeconv"):
    from . import __version__
    from .bench import COLUMNS_HELP

    parser = _Parser(prog=prog, description="fastdeconv: grouped 2-D transposed convolution (NHWC) for numpy.")
    parser.add_argument("--version", action="version", version=f"fastdeconv {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{info,bench,convert,dask-demo}")
    commands.add_parser("info", help="print show_config(): build, OpenMP, SIMD paths, threads")
    bench = commands.add_parser(
        "bench", help="time the benchmark suite against torch and onnxruntime (when they run)",
        description="Time the benchmark suite (real-network shapes, float32) on the CPU backend, side by side "
                    "with torch and onnxruntime when they can be imported, and check every result against "
                    "the numpy reference.",
        epilog=COLUMNS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("--cases", type=_case_names, action="extend", dest="cases", metavar="NAME[,NAME...]",
                       help="run only these cases (--list names them); repeatable")
    bench.add_argument("--case", type=_case_names, action="extend", dest="cases", metavar="NAME",
                       help=argparse.SUPPRESS)   # the older spelling, still accepted
    bench.add_argument("--list", action="store_true", help="list the cases and exit")
    bench.add_argument("--threads", type=_positive(int, "threads"), default=None, metavar="N",
                       help="threads for fastdeconv, the peers and the sgemm peak (default: fastdeconv's "
                            "default, OMP_NUM_THREADS or all cores)")
    bench.add_argument("--seconds", type=_positive(float, "seconds"), default=0.5, metavar="S",
                       help="time spent timing each cell (implementation x case); the median call is reported "
                            "(default 0.5; at least 5 calls are made however small S is)")
    bench.add_argument("--repeat", type=_positive(float, "seconds"), dest="seconds", metavar="S",
                       action=_DeprecatedAlias, instead="--seconds",
                       help="deprecated alias of --seconds (it always meant seconds per cell, not a count)")
    bench.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                       help="stdout as an aligned plain-text table (default), a markdown table, or JSON")
    bench.add_argument("--json", metavar="FILE", help="also write the full results as JSON to FILE")
    bench.add_argument("--no-peers", action="store_true", help="skip torch and onnxruntime even if installed")
    convert = commands.add_parser("convert", help="convert an ONNX model's conv layers to MPS weight files")
    convert.add_argument("paths", nargs="+", metavar="[MODEL.onnx] OUTDIR")
    convert.add_argument("--force", action="store_true", help="replace an existing OUTDIR")
    # listed here; main() hands its arguments to fastdeconv.dask (the dask extra), which parses them
    commands.add_parser("dask-demo", help="upsample a zarr image with dask, out of core, and report the throughput "
                        "(needs the dask extra; dask-demo --help)")
    return parser


def main(argv=None, prog="fastdeconv") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["dask-demo"]:
        return _dask_demo(argv[1:], prog)
    args = build_parser(prog).parse_args(argv)

    if args.command == "info":
        from . import show_config

        show_config()
        return 0
    if args.command == "bench":
        from .bench import SUITE, run_bench

        if args.list:
            for case in SUITE:
                print(case.describe())
            return 0
        return run_bench(cases=args.cases, json_path=args.json, threads=args.threads, seconds=args.seconds,
                         peers=not args.no_peers, output_format=args.format)
    from .convert import main as convert_main

    return convert_main(args.paths, force=args.force)


def _dask_demo(argv, prog) -> int:
    try:
        from .dask import demo
    except ImportError as error:   # the message names the extra to install
        print(f"{prog} dask-demo: {error}", file=sys.stderr)
        return 1
    return demo(argv, prog=f"{prog} dask-demo")


if __name__ == "__main__":
    # Run as `python -m fastdeconv`; the console script `fastdeconv` calls main() with its own name.
    sys.exit(main(prog="python -m fastdeconv"))

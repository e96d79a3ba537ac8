"""Command line: ``fastdeconv {info, bench, convert, dask-demo, selftest}`` (the console script) or
``python -m fastdeconv``.

It parses the arguments and dispatches to the tools: :mod:`fastdeconv.bench` and
:mod:`fastdeconv.convert`, each imported only for its own command."""

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
        if what == "threads":
            from ._config import MAX_THREADS

            if value > MAX_THREADS:
                raise argparse.ArgumentTypeError(f"threads must be at most {MAX_THREADS} (fastdeconv's MAX_THREADS: "
                                                 f"256, or the CPU count where larger), got {text!r}{hint}")
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
    from .bench.suites import CASES, OWN_NAME_SUITES, suite_cases

    names = [name.strip() for name in text.split(",") if name.strip()]
    known = list(CASES) + [case.name for suite in OWN_NAME_SUITES for case in suite_cases(suite)]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown case {(unknown or [text])[0]!r}; choose from {', '.join(CASES)} "
                                         "or a field or narrow case (bench --suite field --list)")
    return names


def _plot_file(text):
    """An argparse type for --plot: matplotlib importable and the file writable, checked before any timing."""
    from .bench.plot import PlotUnavailable, check_output_path

    try:
        check_output_path(text)
    except PlotUnavailable as error:
        raise argparse.ArgumentTypeError(f"{error} (needed to draw {text!r})") from None
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _saved_run(text):
    """An argparse type for --from-json: a result file that `bench --json FILE` wrote, loaded."""
    from .bench.plot import load_result

    try:
        return text, load_result(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


#: Options that only a benchmark run uses: (dest, the option's name); --from-json runs nothing.
_RUN_OPTIONS = (("cases", "--cases"), ("list", "--list"), ("suite", "--suite"), ("candidates", "--candidates"),
                ("threads", "--threads"), ("seconds", "--seconds"), ("format", "--format"), ("json", "--json"),
                ("no_peers", "--no-peers"), ("contention", "--contention"))

_BENCH_EPILOG = """
plots (--plot, the plot extra: matplotlib):
  bench --plot ratios.png                          run, print the tables, then draw them
  bench --json run.json                            run and save the results ...
  bench --from-json run.json --plot ratios.png     ... and draw them later, without running anything
  The picture has a panel per table; each case is a row, each peer a marker at peer time / fastdeconv's
  plan time on a log axis, with a line at 1 (right of it fastdeconv is faster).

exit status: 0 done; 1 a result differs from the numpy reference; 2 a usage error (nothing was timed:
  this includes --plot without matplotlib or to a file that cannot be written, and an unreadable
  --from-json); 3 the run finished and its tables (and --json) were written, but the plot failed"""


def build_parser(prog="fastdeconv"):
    from ._version import __version__
    from .bench.suites import COLUMNS_HELP

    parser = _Parser(prog=prog, description="fastdeconv: grouped 2-D transposed convolution (NHWC) for numpy.")
    parser.add_argument("--version", action="version", version=f"fastdeconv {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{info,bench,convert,dask-demo,selftest}")
    commands.add_parser("info", help="print show_config(): build, thread pool, SIMD paths, threads")
    bench = commands.add_parser(
        "bench", help="time the benchmark suite against torch and onnxruntime (when they run)",
        description="Time the benchmark suite (real-network shapes, float32) on the CPU backend, side by side "
                    "with torch and onnxruntime when they can be imported, and check every result against "
                    "the numpy reference.",
        epilog=COLUMNS_HELP + "\n" + _BENCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("--cases", type=_case_names, action="extend", dest="cases", metavar="NAME[,NAME...]",
                       help="run only these cases (--list names them); repeatable")
    bench.add_argument("--case", type=_case_names, action="extend", dest="cases", metavar="NAME",
                       help=argparse.SUPPRESS)   # the older spelling, still accepted
    bench.add_argument("--list", action="store_true", help="list the cases and exit")
    bench.add_argument("--suite", choices=("all", "deconv", "conv", "narrow", "large", "field"), default="all",
                       help="the transposed-convolution suite, the convolution suite, both (default), "
                            "real networks' transposed layers of 8-63 outputs (narrow), their layers of "
                            "10-136 GFLOP (large), or the "
                            "field suite: 164 layers drawn, seeded, from the kinds real networks have "
                            "(fastdeconv.bench.field), with a summary of the ratios and the worst layers")
    bench.add_argument("--candidates", action="store_true",
                       help="also time every algorithm that can run each case, and say how often the automatic "
                            "choice is within 10 %% of the fastest (naming the layers where it is not)")
    bench.add_argument("--threads", type=_positive(int, "threads"), default=None, metavar="N",
                       help="threads for fastdeconv, the peers and the sgemm peak (default: fastdeconv's "
                            "default, OMP_NUM_THREADS or the CPUs it may use)")
    bench.add_argument("--seconds", type=_positive(float, "seconds"), default=0.5, metavar="S",
                       help="time spent timing each cell (implementation x case), in two rounds in which "
                            "the implementations take turns; the lesser of the rounds' median calls is reported "
                            "(default 0.5; at least 5 calls a round are made however small S is); a case "
                            "whose plan looks slower than a peer or than the function gets two more rounds")
    bench.add_argument("--repeat", type=_positive(float, "seconds"), dest="seconds", metavar="S",
                       action=_DeprecatedAlias, instead="--seconds",
                       help="deprecated alias of --seconds (it always meant seconds per cell, not a count)")
    bench.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                       help="stdout as an aligned plain-text table (default), a markdown table, or JSON")
    bench.add_argument("--json", metavar="FILE", help="also write the full results as JSON to FILE")
    bench.add_argument("--no-peers", action="store_true", help="skip torch and onnxruntime even if installed")
    bench.add_argument("--plot", type=_plot_file, metavar="FILE.png",
                       help="also draw the ratio to each peer per case into FILE.png (or .svg, .pdf: the "
                            "extension picks the format); needs matplotlib, the plot extra "
                            "(pip install -e \".[plot]\" in a clone, or pip install matplotlib), which is "
                            "checked, with the file, before anything is timed")
    bench.add_argument("--from-json", type=_saved_run, metavar="RUN.json",
                       help="with --plot: draw a run saved by --json instead of running one (the run options "
                            "are refused with it)")
    bench.add_argument("--plot-order", choices=("ratio", "suite"), default=None,
                       help="the order of the cases in the plot: by the ratio to the faster peer, "
                            "fastdeconv's worst at the top (default), or the suite's order")
    bench.add_argument("--plot-machine", metavar="TEXT",
                       help="the machine named in the plot's title (default: the CPU the run recorded; runs "
                            "saved before fastdeconv recorded it name none)")
    bench.add_argument("--contention", action="store_true",
                       help="instead: p50/p99 of default-threads vs 1-thread calls beside busy processes, a second "
                            "benchmark process and right after an onnxruntime call (markdown tables; --cases and "
                            "--seconds apply; a few minutes)")
    _add_convert(commands)
    # listed here; main() hands its arguments to fastdeconv.bench.dask_demo (the dask extra), which parses them
    commands.add_parser("dask-demo", help="upsample a zarr image with dask, out of core, and report the throughput "
                        "(needs the dask extra; dask-demo --help)")
    commands.add_parser(
        "selftest", help="check the Metal backends on this Mac's GPU and print a table for a bug report",
        description="Run fastdeconv.selftest's checks (non-square kernels, asymmetric strides, groups, "
                    "depthwise, odd channel counts, batches; float32 and float16) on backend mps and mps-cnn, "
                    "against the numpy reference, and print a markdown table to paste into a bug report.",
        epilog="exit status: 0 every check passed; 1 a check failed; 3 no Metal backend can run here (not macOS, "
               "no Metal device, or PyObjC missing: the reason is printed), so nothing was checked")
    return parser


_CONVERT_DESCRIPTION = """\
Convert the Conv / ConvTranspose layers of an ONNX model into weight files for Apple's MPS (MPSCNN,
MPSGraph) and fastdeconv, and verify them: each layer on a random input, then the whole network run
from the written files, against onnx's reference evaluator (and onnxruntime when installed). The
BatchNormalization and per-channel constant Add/Sub/Mul/Div nodes directly after a conv are folded into
it; the activation after them is recorded. A symbolic input height and width is verified at
--input-shape, or else at the first default size (64, 65, ...) that shape inference accepts.
Every other node (Add, Concat, pooling, ...) is skipped and listed with the reason. The files are
written into a temporary directory and moved to OUTDIR only if everything matches."""

_CONVERT_EPILOG = """\
written into OUTDIR (raw little-endian float32, C order, no header):
  NAME_weight.dat         conv: (C_out, kH, kW, C_in/groups); transposed: (C_in, kH, kW, C_out/groups)
  NAME_bias.dat           (C_out,), with the folded nodes in it
  NAME_mpscnn_weight.dat  transposed layers MPSCNNConvolutionTranspose can run: (C_out, kH, kW, C_in/groups),
                          rotated by 180 degrees
  manifest.json           per layer: ONNX node, input/output tensors, shapes, stride, padding, dilation,
                          groups, MPSCNN settings, folded nodes, activation, errors; the input shapes
                          used; the skipped nodes; the whole-network verification; a summary line

The whole-network check (--verify-model) runs by default when onnx.reference can run the model's other
ops and its inputs are float tensors (a symbolic batch dimension is fed as 1); otherwise a note says
why and the per-layer checks decide.

{exit_codes}
"""


def _add_convert(commands):
    from .convert.converter import DEFAULT_MODEL, DEFAULT_VERIFY_ELEMENTS, EXIT_CODES

    convert = commands.add_parser(
        "convert", help="convert an ONNX model's conv layers to MPS weight files, verified",
        usage="%(prog)s [-h] [--force] [--strict] [--verify-model | --no-verify-model] "
              "[--input-shape NAME:N,C,H,W ...] [--max-verify-elements N] [--traceback] [MODEL.onnx] OUTDIR",
        description=_CONVERT_DESCRIPTION, epilog=_CONVERT_EPILOG.format(exit_codes=EXIT_CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    # One list: argparse cannot express an optional positional before a required one.
    convert.add_argument("paths", nargs="+", metavar="[MODEL.onnx] OUTDIR",
                         help=f"the ONNX model (default: {DEFAULT_MODEL.name}, installed with the package: a "
                              "DCGAN-like decoder of 4 ConvTranspose layers, built by scripts/make_default_model.py) "
                              "and the output directory to create")
    convert.add_argument("--force", action="store_true", help="replace an existing OUTDIR")
    convert.add_argument("--strict", action="store_true",
                         help="fail (exit 2, nothing written) if any node would be skipped")
    convert.add_argument("--verify-model", action=argparse.BooleanOptionalAction, default=None,
                         help="verify the whole network from the written files (default: when onnx.reference "
                              "can run the model); --verify-model makes it required (exit 1 if it cannot run); "
                              "--no-verify-model skips it (onnx.reference is slow on large models)")
    convert.add_argument("--input-shape", action="append", default=[], metavar="NAME:N,C,H,W",
                         help="the size to convert and verify graph input NAME at, for its symbolic "
                              "dimensions (repeat for several inputs); without it a symbolic height and width "
                              "are fixed at the first square size from 64 up that shape inference accepts "
                              "(fastdeconv.convert.graph.DEFAULT_SIZES). The weights do not depend on it")
    convert.add_argument("--max-verify-elements", type=_positive(int, "--max-verify-elements"),
                         default=DEFAULT_VERIFY_ELEMENTS, metavar="N",
                         help=f"the most elements any tensor of the checks may have (default "
                              f"{DEFAULT_VERIFY_ELEMENTS:,}, 16 MiB of float32): a layer over it is verified on a "
                              "smaller input, and the whole network is not run")
    convert.add_argument("--traceback", action="store_true",
                         help="on an unexpected error (a bug), print the Python traceback instead of one line")


def main(argv=None, prog="fastdeconv") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["dask-demo"]:
        return _dask_demo(argv[1:], prog)
    parser = build_parser(prog)
    args = parser.parse_args(argv)

    if args.command == "info":
        from . import show_config

        show_config()
        return 0
    if args.command == "selftest":
        from .selftest import main as selftest_main

        return selftest_main(prog=f"{prog} selftest")
    if args.command == "bench":
        from .bench.suites import run_bench, suite_cases

        usage = _bench_usage(args, parser.parse_args(["bench"]))
        if usage:
            print(f"{prog} bench: error: {usage} (see {prog} bench --help)", file=sys.stderr)
            return 2
        plot = None
        if args.plot:
            from functools import partial

            from .bench.plot import main_plot

            plot = partial(main_plot, path=args.plot, order=args.plot_order or "ratio", machine=args.plot_machine)
        if args.from_json:
            try:
                plot(args.from_json[1])
            except Exception as error:  # noqa: BLE001 - one line, and the exit status that says the plot failed
                print(f"{prog} bench: could not draw the plot: {type(error).__name__}: {error}", file=sys.stderr)
                return 3
            return 0
        if args.list:
            for case in suite_cases(args.suite):
                print(case.describe())
            return 0
        if args.contention:
            from .bench.contention import run_contention

            return run_contention(cases=args.cases, seconds=args.seconds, ort=not args.no_peers)
        return run_bench(cases=args.cases, json_path=args.json, threads=args.threads, seconds=args.seconds,
                         peers=not args.no_peers, output_format=args.format, suite=args.suite,
                         candidates=args.candidates, plot=plot)
    from .convert.converter import main as convert_main

    return convert_main(args.paths, force=args.force, strict=args.strict, verify_model=args.verify_model,
                        input_shapes=args.input_shape, max_verify_elements=args.max_verify_elements,
                        traceback=args.traceback)


def _bench_usage(args, defaults):
    """The usage error in a combination of bench options (each valid alone), or "". ``defaults``: the
    arguments of a plain ``bench`` (an option that differs from them was given)."""
    if args.from_json:
        if not args.plot:
            return "--from-json draws a saved run: it needs --plot FILE.png"
        given = [name for dest, name in _RUN_OPTIONS if getattr(args, dest) != getattr(defaults, dest)]
        if given:
            return f"--from-json draws a saved run without running one: {given[0]} is an option of a run"
        return ""
    if args.plot:
        if args.list or args.contention:
            return f"--plot draws a benchmark run's tables: {'--list' if args.list else '--contention'} prints none"
        if args.no_peers:
            return "--plot draws the ratio to each peer: with --no-peers there is none"
        return ""
    for dest, name in (("plot_order", "--plot-order"), ("plot_machine", "--plot-machine")):
        if getattr(args, dest) is not None:
            return f"{name} is an option of --plot FILE.png"
    return ""


def _dask_demo(argv, prog) -> int:
    try:
        from .bench.dask_demo import demo
    except ImportError as error:   # the message names the extra to install
        print(f"{prog} dask-demo: {error}", file=sys.stderr)
        return 1
    return demo(argv, prog=f"{prog} dask-demo")


if __name__ == "__main__":
    # Run as `python -m fastdeconv`; the console script `fastdeconv` calls main() with its own name.
    sys.exit(main(prog="python -m fastdeconv"))

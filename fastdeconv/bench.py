"""The benchmark suite (real-network shapes) and ``python -m fastdeconv bench``.

Every case is a float32 transposed convolution. FLOPs = 2·N·H·W·C_in·kH·kW·C_out/groups.
Peers (torch's conv_transpose2d in channels_last, which runs oneDNN, and
onnxruntime's ConvTranspose) are timed in the same process when installed, each
in its natural layout, with layout conversion done once outside the timing.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Case:
    name: str
    input_shape: tuple  # (N, H, W, C_in)
    out_channels: int
    kernel: int
    stride: int
    padding: int
    output_padding: int = 0
    dilation: int = 1
    groups: int = 1

    @property
    def weight_shape(self):
        return (self.input_shape[3], self.kernel, self.kernel, self.out_channels // self.groups)

    @property
    def kwargs(self):
        return dict(stride=self.stride, padding=self.padding, output_padding=self.output_padding,
                    dilation=self.dilation, groups=self.groups)

    @property
    def flops(self):
        n, h, w, cin = self.input_shape
        return 2 * n * h * w * cin * self.kernel ** 2 * self.out_channels // self.groups

    def arrays(self, dtype=np.float32, seed=0):
        """x, weight, bias with a fixed seed."""
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(self.input_shape).astype(dtype)
        w = (rng.standard_normal(self.weight_shape) / np.sqrt(self.weight_shape[0] // self.groups * self.kernel ** 2))
        b = rng.standard_normal(self.out_channels)
        return x, w.astype(dtype), b.astype(dtype)


SUITE = [
    Case("dcgan1", (8, 4, 4, 512), 256, 4, 2, 1),
    Case("dcgan2", (8, 8, 8, 256), 128, 4, 2, 1),
    Case("dcgan3", (8, 16, 16, 128), 64, 4, 2, 1),
    Case("dcgan4", (8, 32, 32, 64), 3, 4, 2, 1),
    Case("unet1", (1, 64, 64, 256), 128, 2, 2, 0),
    Case("unet2", (1, 128, 128, 128), 64, 2, 2, 0),
    Case("fcn_bilinear", (1, 128, 128, 21), 21, 4, 2, 1, groups=21),
    Case("fcn8s_final", (1, 64, 64, 21), 21, 16, 8, 4, groups=21),
    Case("stride1", (1, 56, 56, 64), 64, 3, 1, 1),
    Case("grouped", (4, 32, 32, 128), 128, 4, 2, 1, groups=4),
    Case("dilated", (1, 32, 32, 64), 64, 3, 2, 2, output_padding=1, dilation=2),
    Case("big", (1, 256, 256, 32), 16, 4, 2, 1),
    Case("seed_group", (1, 5, 5, 4), 8, 3, 1, 0, groups=4),
]
CASES = {case.name: case for case in SUITE}


def median_seconds(fn, seconds=0.5, warmup=3, min_calls=5, max_calls=2000):
    """Median wall time of fn() over about `seconds` of calls, after warm-up."""
    for _ in range(warmup):
        fn()
    times = []
    deadline = time.perf_counter() + seconds
    while len(times) < min_calls or (time.perf_counter() < deadline and len(times) < max_calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _torch_runner(case, x, w, b, threads):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    xt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    wt = torch.from_numpy(np.ascontiguousarray(w.transpose(0, 3, 1, 2))).contiguous(memory_format=torch.channels_last)
    bt = torch.from_numpy(b)
    fn = torch.nn.functional.conv_transpose2d

    def run():
        with torch.no_grad():
            return fn(xt, wt, bt, **case.kwargs)

    return run, lambda: run().permute(0, 2, 3, 1).numpy()


def _ort_runner(case, x, w, b, threads):
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    n, h, wd, cin = case.input_shape
    ho, wo = _output_hw(case)
    k, s, p = case.kernel, case.stride, case.padding
    node = helper.make_node(
        "ConvTranspose", ["x", "w", "b"], ["y"], strides=[s, s], pads=[p, p, p, p], dilations=[case.dilation] * 2,
        group=case.groups, output_padding=[case.output_padding] * 2, kernel_shape=[k, k])
    graph = helper.make_graph(
        [node], "deconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, cin, h, wd])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, case.out_channels, ho, wo])],
        initializer=[numpy_helper.from_array(np.ascontiguousarray(w.transpose(0, 3, 1, 2)), "w"),
                     numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    xn = np.ascontiguousarray(x.transpose(0, 3, 1, 2))

    def run():
        return session.run(None, {"x": xn})[0]

    del onnx
    return run, lambda: run().transpose(0, 2, 3, 1)


def _output_hw(case):
    from ._params import conv_transpose2d_output_shape

    return conv_transpose2d_output_shape(case.input_shape[1:3], (case.kernel, case.kernel), case.stride,
                                         case.padding, case.output_padding, case.dilation)


def sgemm_peak(threads, seconds=0.5):
    """GFLOP/s of numpy's float32 matmul on 2048x2048 squares at `threads` BLAS threads (the
    machine's practical peak, measured in the same run), or None if the threads can't be set."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    a = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    with threadpool_limits(limits=threads, user_api="blas"):
        t = median_seconds(lambda: a @ a, seconds, warmup=2, min_calls=3)
    return 2 * 2048 ** 3 / t / 1e9


def _case_bytes(case):
    """Bytes an ideal implementation moves: input + output + weights (float32)."""
    ho, wo = _output_hw(case)
    n = case.input_shape[0]
    w_shape = case.weight_shape
    return 4 * (int(np.prod(case.input_shape)) + n * ho * wo * case.out_channels + int(np.prod(w_shape)))


def _relative_error(y, ref):
    return float(np.max(np.abs(y.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def measure_case(case, threads, seconds=0.5, peers=True):
    """Times (s) and errors for one case: ours (function and plan) and the installed peers."""
    import fastdeconv

    x, w, b = case.arrays()
    ref = fastdeconv.reference.conv_transpose2d(x.astype(np.float64), w.astype(np.float64),
                                                b.astype(np.float64), **case.kwargs)
    row = {"case": case.name, "gflop": case.flops / 1e9, "mbytes": _case_bytes(case) / 1e6}
    out = fastdeconv.conv_transpose2d(x, w, b, **case.kwargs)
    row["max_rel_err"] = _relative_error(out, ref)
    row["fastdeconv_s"] = median_seconds(lambda: fastdeconv.conv_transpose2d(x, w, b, **case.kwargs), seconds)
    plan_class = getattr(fastdeconv, "ConvTranspose2d", None)
    if plan_class is not None:
        plan = plan_class(w, b, **case.kwargs)
        row["plan_max_rel_err"] = _relative_error(plan(x), ref)
        row["plan_s"] = median_seconds(lambda: plan(x, out=out), seconds)
        row["algorithm"] = plan.algorithm
    if peers:
        for name, make in (("torch_cl", _torch_runner), ("ort", _ort_runner)):
            runner = make(case, x, w, b, threads)
            if runner is None:
                continue
            run, result = runner
            row[f"{name}_max_rel_err"] = _relative_error(result(), ref)
            row[f"{name}_s"] = median_seconds(run, seconds)
    return row


def format_table(rows, threads, peak=None):
    """A markdown table: ms per implementation, our GFLOP/s (and % of the sgemm peak), GB/s
    (input + output + weights), and our speed ratio against each peer (> 1: we are faster)."""
    ours = "plan_s" if any("plan_s" in r for r in rows) else "fastdeconv_s"
    columns = [c for c in ("fastdeconv_s", "plan_s", "torch_cl_s", "ort_s") if any(c in r for r in rows)]
    names = {"fastdeconv_s": "function ms", "plan_s": "plan ms", "torch_cl_s": "torch CL ms", "ort_s": "ORT ms"}
    peers = [c for c in ("torch_cl_s", "ort_s") if c in columns]
    header = ["case", "algorithm"] + [names[c] for c in columns] + ["GFLOP/s", "% peak", "GB/s"]
    header += [f"× {names[c][:-3]}" for c in peers] + ["max rel err"]
    peak_text = f"{peak:.0f} GFLOP/s" if peak else "not measured (pip install threadpoolctl)"
    lines = [f"threads: {threads}; sgemm peak (numpy float32 matmul 2048², same run): {peak_text}",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    ratios = []
    for r in rows:
        gflops = r["gflop"] / r[ours]
        cells = [r["case"], r.get("algorithm", "")]
        cells += [f"{r[c] * 1e3:.3f}" if c in r else "-" for c in columns]
        cells += [f"{gflops:.0f}", f"{100 * gflops / peak:.0f}" if peak else "-", f"{r['mbytes'] / 1e3 / r[ours]:.1f}"]
        present = [r[c] for c in peers if c in r]
        cells += [f"{r[c] / r[ours]:.2f}" if c in r else "-" for c in peers]
        if present:
            ratios.append(min(present) / r[ours])
        cells.append(f"{max(r['max_rel_err'], r.get('plan_max_rel_err', 0)):.1e}")
        lines.append("| " + " | ".join(cells) + " |")
    if ratios:
        geomean = float(np.exp(np.mean(np.log(ratios))))
        lines.append(f"geometric mean of our speedup over the faster peer per case: {geomean:.2f}×")
    return "\n".join(lines)


def run_bench(cases=None, json_path=None, threads=0, seconds=0.5, peers=True) -> int:
    import fastdeconv

    if threads:
        fastdeconv.set_num_threads(threads)
    threads = fastdeconv.get_num_threads()
    selected = SUITE if not cases else []
    for name in cases or []:
        if name not in CASES:
            print(f"unknown case {name!r}; choose from {', '.join(CASES)}", file=sys.stderr)
            return 2
        selected.append(CASES[name])
    peak = sgemm_peak(threads, seconds)
    try:   # numpy's BLAS threads (used by the reference) must not spin on the cores being timed
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
    except ImportError:
        pass
    rows = []
    for i, case in enumerate(selected, 1):
        print(f"\r[{i}/{len(selected)}] {case.name:<14}", end="", file=sys.stderr, flush=True)
        rows.append(measure_case(case, threads, seconds, peers))
    print("\r" + " " * 40 + "\r", end="", file=sys.stderr)
    print(format_table(rows, threads, peak))
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"threads": threads, "sgemm_peak_gflops": peak, "cases": [asdict(c) for c in selected],
                       "rows": rows}, f, indent=1)
    worst = max(max(r["max_rel_err"], r.get("plan_max_rel_err", 0)) for r in rows)
    if worst > 1e-4:
        print(f"ERROR: a result differs from the reference by {worst:.2e} (relative)", file=sys.stderr)
        return 1
    return 0

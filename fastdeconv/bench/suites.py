"""The benchmark suites (real-network shapes) and ``fastdeconv bench`` / ``python -m fastdeconv bench``.

Every case is float32. SUITE holds transposed convolutions, FLOPs = 2·N·H·W·C_in·kH·kW·C_out/groups;
CONV_SUITE holds convolutions (op "conv"), FLOPs = 2·N·H_out·W_out·C_out·kH·kW·C_in/groups.
Peers (torch's conv_transpose2d in channels_last, which runs oneDNN, and
onnxruntime's ConvTranspose) are timed in the same process when they can be
imported and run, each in its natural layout, with layout conversion done once
outside the timing. A peer that is missing or fails is skipped with one line on
stderr saying why; the benchmark itself never fails because of a peer.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from .cases import Case, _hw, _output_hw

#: What each column of the table means (``--help`` prints this; the README has the same list).
COLUMNS_HELP = """\
columns (times are medians of repeated calls, float32, in one process):
  case           the suite case (--list shows its shapes and parameters)
  algorithm      the CPU algorithm fastdeconv chose for the layer
  function ms    one fastdeconv.conv_transpose2d(x, w, b, ...) (conv cases: conv2d) call on the same
                 arrays each time: validates the arguments, fingerprints the weights and reuses the
                 packed copy it cached on the first call
  plan ms        one call of a fastdeconv.ConvTranspose2d (conv cases: Conv2d) layer built once,
                 layer(x, out=buffer): what a network that reuses its layers pays
  fn/plan        function ms / plan ms
  torch ms       torch.nn.functional.conv_transpose2d (conv2d) on channels_last tensors (oneDNN), no_grad
  ORT ms         onnxruntime InferenceSession.run of a one-node ConvTranspose (Conv) model (NCHW)
  GFLOP/s        the case's FLOPs / plan ms
  % peak         GFLOP/s as a percentage of numpy's float32 matmul (sgemm) speed measured in the same
                 run at the same thread count; "-" when threadpoolctl is missing (numpy's BLAS threads
                 cannot be set); a "!" marks a value over 100 %
  GB/s           bytes of input + output + weights / plan ms (what an ideal implementation moves)
  × torch, × ORT the peer's time / plan ms: > 1 means fastdeconv is faster
  max rel err    max |fastdeconv - reference| / max |reference| over the function and the plan,
                 against the float64 numpy reference; above 1e-4 the command exits with status 1
A peer that is not installed or fails is skipped with one line on stderr, and its columns are left
out (or "-" for the cases it could not run); the line under the table says which peers ran."""

#: Repeated sgemm peak measurements that differ by more than this (relative) mark the peak as noisy.
PEAK_SPREAD_TOLERANCE = 0.15
#: ConvTranspose has been unchanged since opset 11; opset 13 loads in every onnxruntime of the last years.
ORT_OPSET = 13


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

#: Convolutions of the networks whose decoders SUITE holds (their encoders and discriminators).
CONV_SUITE = [
    Case("unet_enc1", (1, 256, 256, 3), 64, 4, 2, 1, op="conv"),       # pix2pix U-Net encoder, k4 s2 p1
    Case("unet_enc2", (1, 128, 128, 64), 128, 4, 2, 1, op="conv"),
    Case("unet_enc3", (1, 64, 64, 128), 256, 4, 2, 1, op="conv"),
    Case("unet_enc5", (1, 16, 16, 512), 512, 4, 2, 1, op="conv"),
    Case("unet_tiny", (1, 2, 2, 512), 512, 4, 2, 1, op="conv"),        # its innermost: a 2x2 input
    Case("dcgan_d2", (8, 32, 32, 64), 128, 4, 2, 1, op="conv"),        # DCGAN discriminator
    Case("dcgan_d4", (8, 8, 8, 256), 512, 4, 2, 1, op="conv"),
    Case("resnet3x3", (1, 56, 56, 64), 64, 3, 1, 1, op="conv"),        # 3x3 s1 at 56²x64
    Case("pointwise", (1, 56, 56, 128), 128, 1, 1, 0, op="conv"),      # MobileNet 1x1
    Case("depthwise3x3", (1, 112, 112, 64), 64, 3, 1, 1, groups=64, op="conv"),   # MobileNet depthwise
]
#: Transposed convolutions of real networks with 8-63 outputs (segmentation decoders and their class
#: layers, keypoint heads, speech and music decoders), where the phase GEMMs' N = C_out fills part of a
#: SIMD vector: the layers behind the "col2im" rule (asv_benches/NOTES.md, 2026-12-06). Not in "all".
NARROW_SUITE = [
    Case("linknet_dec1", (1, 128, 128, 16), 16, 3, 2, 1, output_padding=1),    # LinkNet decoder, m/4 = 16
    Case("linknet_dec2", (1, 64, 64, 32), 32, 3, 2, 1, output_padding=1),
    Case("linknet_cls", (1, 256, 256, 32), 12, 2, 2, 0),                        # its k2 s2 class layer
    Case("enet_b5", (1, 96, 160, 16), 16, 3, 2, 1, output_padding=1),          # ENet bottleneck 5.0
    Case("enet_final", (1, 192, 320, 16), 19, 3, 2, 1, output_padding=1),      # ENet's full convolution
    Case("erfnet_up2", (1, 128, 256, 64), 16, 3, 2, 1, output_padding=1),      # ERFNet upsampler 64 -> 16
    Case("erfnet_out", (1, 192, 320, 16), 20, 2, 2, 0),                         # ERFNet output, 20 classes
    Case("keypoint_rcnn", (50, 14, 14, 512), 17, 4, 2, 1),                      # Keypoint R-CNN score layer
    Case("dccrn_dec4", (1, 64, 100, 64), 32, (5, 2), (2, 1), (2, 0), output_padding=(1, 0)),   # DCCRN
    Case("dccrn_dec5", (1, 128, 100, 32), 16, (5, 2), (2, 1), (2, 0), output_padding=(1, 0)),
    Case("crn_dec4", (1, 100, 31, 64), 16, (1, 3), (1, 2), 0),                  # CRN, frequency axis
    Case("demucs_last", (1, 1, 11000, 48), 8, (1, 8), (1, 4), 0),               # Demucs: 4 sources x 2
    Case("encodec_up4", (1, 1, 4800, 64), 32, (1, 4), (1, 2), (0, 1)),          # EnCodec's last upsampler
    Case("tasnet_dec", (1, 1, 4000, 64), 12, (1, 16), (1, 8), (0, 4)),
    Case("fcn_upscore2", (1, 16, 16, 21), 21, 4, 2, 0),                         # FCN, 21 classes, ungrouped
    Case("fcn_upscore_pool4", (1, 34, 34, 21), 21, 4, 2, 0),
    Case("fcn_upscore8", (1, 70, 70, 21), 21, 16, 8, 0),
    Case("nnunet_last", (2, 128, 128, 64), 32, 2, 2, 0),                        # nnU-Net's last k2 s2
    Case("nnunet_last48", (1, 96, 96, 96), 48, 2, 2, 0),
    Case("gan_48", (4, 32, 32, 96), 48, 4, 2, 1),
    Case("higherhrnet_deconv", (1, 128, 128, 49), 32, 4, 2, 1),                # HigherHRNet, 32 + 17 in
]
#: Layers of real networks over 2 GFLOP, where the field suite stops (10-136 GFLOP, 0.6-72 MiB of weights):
#: the segmentation heads and bottlenecks whose weights every GEMM chunk reads again, and large layers that
#: run winograd. A call of over 4 GFLOP is cut into tasks for Ctrl-C, which none of the other suites meets
#: (asv_benches/NOTES.md, 2026-12-07 fourth). Not in "all".
LARGE_SUITE = [
    Case("pspnet_bottleneck", (1, 60, 60, 4096), 512, 3, 1, 1, op="conv"),      # PSPNet's 3x3 after the pyramid
    Case("fcn_head", (1, 64, 64, 2048), 512, 3, 1, 1, op="conv"),               # FCN's head on ResNet-50
    Case("unet_bottleneck", (1, 64, 64, 1024), 1024, 3, 1, 1, op="conv"),       # U-Net's 1024-channel stage
    Case("deeplab_head", (1, 33, 33, 2048), 256, 3, 1, 1, op="conv"),           # DeepLab v3's 3x3 head
    Case("deeplab_aspp_d12", (1, 65, 65, 2048), 256, 3, 1, 12, dilation=12, op="conv"),   # an ASPP branch
    Case("vgg_conv4", (1, 56, 56, 512), 512, 3, 1, 1, op="conv"),               # VGG-16 conv4
    Case("stylegan_128", (1, 128, 128, 512), 512, 3, 1, 1, op="conv"),          # a StyleGAN 128-px block
    Case("sr_features_270p", (1, 270, 480, 64), 256, 3, 1, 1, op="conv"),      # a super-resolution x2 tail
    Case("gan_decoder_k4", (1, 64, 64, 512), 256, 4, 2, 1),                     # a GAN decoder, transposed
]
SUITES = {"deconv": SUITE, "conv": CONV_SUITE, "narrow": NARROW_SUITE, "large": LARGE_SUITE}
CASES = {case.name: case for case in SUITE + CONV_SUITE}
#: Suites whose cases are found by their own names, outside :data:`CASES` (their summary is the field's).
OWN_NAME_SUITES = ("field", "narrow", "large")


#: Rounds in which the implementations of a case take turns (measure_case): each is timed for
#: seconds / ROUNDS per round, and its time is the least of its rounds' medians. A case whose plan then
#: looks slower than a peer, or than the function (which runs the same plan and does more), gets ROUNDS
#: more (row["rounds"] says how many it had): a loss is reported only when it holds over all of them.
ROUNDS = 2
#: How much slower than the function a plan must look to be timed again (the function's own noise).
PLAN_OVER_FUNCTION = 1.10


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


# --------------------------------------------------------------------------------------------------------
# Peers: each is loaded once (any exception -> skipped with a reason) and run per case (any exception ->
# that case's cell is "-", with a reason).
# --------------------------------------------------------------------------------------------------------

def _reason(error):
    """One line saying why a peer could not be used."""
    if isinstance(error, ModuleNotFoundError) and error.name:
        return f"{error.name} is not installed"
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _load_torch():
    import torch

    return torch, f"torch {torch.__version__}"


def _torch_runner(torch, case, x, w, b, threads):
    torch.set_num_threads(threads)
    xt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    wt = torch.from_numpy(np.ascontiguousarray(w.transpose(0, 3, 1, 2))).contiguous(memory_format=torch.channels_last)
    bt = torch.from_numpy(b)
    fn = torch.nn.functional.conv_transpose2d if case.transposed else torch.nn.functional.conv2d

    def run():
        with torch.no_grad():
            return fn(xt, wt, bt, **case.kwargs)

    return run, lambda: run().permute(0, 2, 3, 1).numpy()


def _load_ort():
    import onnxruntime as ort
    try:
        import onnx
    except ImportError as error:   # onnx builds the one-node model that onnxruntime runs
        raise ImportError(f"onnx (needed to build the model onnxruntime runs) cannot be imported: "
                          f"{_reason(error)}") from None
    return (ort, onnx), f"onnxruntime {getattr(ort, '__version__', '?')} (onnx {getattr(onnx, '__version__', '?')})"


def _onnx_model(onnx, case, w, b):
    """A one-node ConvTranspose model that the installed onnxruntime accepts: opset ORT_OPSET with the
    lowest IR version that opset needs (onnx writes its newest IR version by default, e.g. 14 in onnx 1.23,
    which an older onnxruntime rejects: onnxruntime 1.30 reads IR <= 13)."""
    from onnx import TensorProto, helper, numpy_helper

    n, h, wd, cin = case.input_shape
    ho, wo = _output_hw(case)
    (ph, pw) = _hw(case.padding)
    extra = {"output_padding": list(_hw(case.output_padding))} if case.transposed else {}
    node = helper.make_node(
        "ConvTranspose" if case.transposed else "Conv", ["x", "w", "b"], ["y"], strides=list(_hw(case.stride)),
        pads=[ph, pw, ph, pw], dilations=list(_hw(case.dilation)), group=case.groups,
        kernel_shape=list(case.kernel_hw), **extra)
    graph = helper.make_graph(
        [node], "deconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, cin, h, wd])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, case.out_channels, ho, wo])],
        initializer=[numpy_helper.from_array(np.ascontiguousarray(w.transpose(0, 3, 1, 2)), "w"),
                     numpy_helper.from_array(b, "b")])
    opsets = [helper.make_opsetid("", ORT_OPSET)]
    model = helper.make_model(graph, opset_imports=opsets)
    try:
        model.ir_version = helper.find_min_ir_version_for(opsets)
    except Exception:  # noqa: BLE001 - an onnx without the version table: IR 7 is opset 13's
        model.ir_version = 7
    return model


def _ort_runner(modules, case, x, w, b, threads):
    ort, onnx = modules
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(_onnx_model(onnx, case, w, b).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    xn = np.ascontiguousarray(x.transpose(0, 3, 1, 2))

    def run():
        return session.run(None, {"x": xn})[0]

    return run, lambda: run().transpose(0, 2, 3, 1)


#: onnxruntime's idle intra-op threads spin for a while after a run (30-90 ms measured:
#: asv_benches/NOTES.md), on the CPUs that whatever is timed next needs.
ORT_SPIN_SECONDS = 0.2


@dataclass(frozen=True)
class PeerSpec:
    key: str        # row keys: f"{key}_s", f"{key}_max_rel_err"
    name: str       # what stderr and the table call it
    column: str     # the table's header
    load: object
    runner: object
    settle_seconds: float = 0.0   # waited after each of its turns, until its threads are idle


PEERS = [PeerSpec("torch_cl", "torch", "torch ms", _load_torch, _torch_runner),
         PeerSpec("ort", "onnxruntime", "ORT ms", _load_ort, _ort_runner, ORT_SPIN_SECONDS)]


class Peers:
    """The peers of one run: which loaded, which were skipped and why (each reason said once on stderr)."""

    def __init__(self, enabled=True, log=sys.stderr):
        self.log = log
        self.loaded = {}      # key -> (modules, version text)
        self.status = {}      # name -> {"version": ..., "ran": [case names], "skipped": reason or None, ...}
        self._said = set()
        for spec in PEERS:
            if not enabled:
                self.status[spec.name] = {"ran": [], "skipped": "--no-peers"}
                continue
            try:
                modules, version = spec.load()
            except BaseException as error:  # noqa: BLE001 - a broken peer (even SystemExit) is skipped
                if isinstance(error, KeyboardInterrupt):
                    raise
                reason = _reason(error)
                self.status[spec.name] = {"ran": [], "skipped": reason}
                self._say(f"bench: skipping {spec.name}: {reason}")
                continue
            self.loaded[spec.key] = modules
            self.status[spec.name] = {"version": version, "ran": [], "skipped": None, "failed": {}}

    def _say(self, line):
        if line not in self._said:
            self._said.add(line)
            print(line, file=self.log, flush=True)

    def runners(self, row, case, x, w, b, ref, threads):
        """{row key of its seconds: run} of the peers that run the case; each one's error goes into the row
        now, and a peer that fails (to build, to run or later while timed: :meth:`failed`) leaves its cell
        empty, with the reason said once."""
        runs = {}
        for spec in PEERS:
            if spec.key not in self.loaded:
                continue
            try:
                run, result = spec.runner(self.loaded[spec.key], case, x, w, b, threads)
                error = _relative_error(result(), ref)
            except Exception as exc:  # noqa: BLE001 - a peer failing on a case leaves that cell empty
                self.failed(spec.key, case, exc)
                continue
            row[f"{spec.key}_max_rel_err"] = error
            runs[f"{spec.key}_s"] = run
        return runs

    def failed(self, key, case, exc):
        spec = next(spec for spec in PEERS if spec.key == key)
        reason = _reason(exc)
        self.status[spec.name]["failed"][case.name] = reason
        self._say(f"bench: skipping {spec.name} (case {case.name}): {reason}")

    def ran(self, row, case):
        for spec in PEERS:
            if f"{spec.key}_s" in row:
                self.status[spec.name]["ran"].append(case.name)

    def summary(self):
        """One line: which peers ran, on how many cases, and which were skipped."""
        parts = []
        for name, status in self.status.items():
            if status.get("skipped"):
                parts.append(f"{name} skipped ({status['skipped']})")
                continue
            failed = status.get("failed", {})
            ran = f"{status['version']} ran" if status["ran"] else f"{status['version']} ran on no case"
            parts.append(ran + (f" (failed on {', '.join(failed)})" if failed else ""))
        return "peers: " + ("; ".join(parts) if parts else "none")


# --------------------------------------------------------------------------------------------------------
# The sgemm peak
# --------------------------------------------------------------------------------------------------------

@dataclass
class Peak:
    """numpy's float32 matmul speed at the benchmark's thread count: the machine's practical peak."""

    gflops: float | None          # the best of the measurements, or None when not measured
    measurements: list
    note: str = ""                # why it is missing or why it should not be trusted

    @property
    def noisy(self):
        values = [v for v in self.measurements if v]
        return len(values) > 1 and (max(values) - min(values)) / max(values) > PEAK_SPREAD_TOLERANCE


def _blas_unavailable():
    """Why numpy's BLAS threads cannot be set, or "" when threadpoolctl can set them."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl is not installed (pip install threadpoolctl), so numpy's BLAS threads cannot be set"
    if not any(lib.get("user_api") == "blas" for lib in threadpool_info()):
        return "threadpoolctl finds no BLAS library in numpy, so its threads cannot be set"
    return ""


def sgemm_gflops(threads, seconds=0.5, size=2048):
    """GFLOP/s of numpy's float32 matmul on size x size squares at `threads` BLAS threads, or None if
    numpy's BLAS threads cannot be set (threadpoolctl missing): a peak at another thread count would
    make % peak meaningless."""
    if _blas_unavailable():
        return None
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
    with threadpool_limits(limits=threads, user_api="blas"):
        t = median_seconds(lambda: a @ a, seconds, warmup=2, min_calls=3)
    return 2 * size ** 3 / t / 1e9


def sgemm_peak(threads, seconds=0.5):
    """One sgemm measurement (GFLOP/s) at `threads` threads, or None."""
    return sgemm_gflops(threads, seconds)


def measure_peak(threads, seconds, repeats=2):
    """`repeats` sgemm measurements at `threads` threads (run_bench adds one after the cases)."""
    note = _blas_unavailable()
    if note:
        return Peak(None, [], note)
    return Peak(None, [sgemm_gflops(threads, seconds) for _ in range(repeats)])


def _finish_peak(peak, rows, ours):
    if not peak.measurements:
        return peak
    peak.gflops = max(peak.measurements)
    notes = []
    if peak.noisy:
        values = ", ".join(f"{v:.0f}" for v in peak.measurements)
        notes.append(f"noisy: the sgemm measurements ({values} GFLOP/s) differ by more than "
                     f"{PEAK_SPREAD_TOLERANCE:.0%}; the machine is busy or changing clocks, so % peak is rough")
    peak.note = "; ".join(notes)
    return peak


def _over_peak_note(rows, peak, ours="plan_s"):
    """The note naming the cases of `rows` (one table's) over 100 % of the sgemm peak, or ""."""
    if not peak.gflops:
        return ""
    over = [r["case"] for r in rows if r["gflop"] / r[ours] > peak.gflops]
    if not over:
        return ""
    return (f"over 100 % of the sgemm peak ({', '.join(over)}): the peak is underestimated "
            "(noise, or a case small enough to stay in cache)")


# --------------------------------------------------------------------------------------------------------
# Measuring and reporting
# --------------------------------------------------------------------------------------------------------

def _case_bytes(case):
    """Bytes an ideal implementation moves: input + output + weights (float32)."""
    ho, wo = _output_hw(case)
    n = case.input_shape[0]
    w_shape = case.weight_shape
    return 4 * (int(np.prod(case.input_shape)) + n * ho * wo * case.out_channels + int(np.prod(w_shape)))


def _relative_error(y, ref):
    return float(np.max(np.abs(np.asarray(y).astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def measure_case(case, threads, seconds=0.5, peers=True, candidates=False):
    """Times (s) and errors for one case: ours (function and plan) and the peers that run.

    ``peers`` is True (load them here), False, or a :class:`Peers`. With ``candidates``, every
    algorithm able to run the layer is timed through a plan too (row["candidates"]: name -> seconds).
    """
    if peers is True:
        peers = Peers()
    function, layer_class, reference = case.functions()
    x, w, b = case.arrays()
    ref = reference(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), **case.kwargs)
    row = {"case": case.name, "gflop": case.flops / 1e9, "mbytes": _case_bytes(case) / 1e6,
           "description": case.describe()[len(case.name):].strip()}
    out = function(x, w, b, **case.kwargs)
    row["max_rel_err"] = _relative_error(out, ref)
    plan = layer_class(w, b, **case.kwargs)
    row["plan_max_rel_err"] = _relative_error(plan(x), ref)
    row["algorithm"] = plan.algorithm
    runs = {"fastdeconv_s": lambda: function(x, w, b, **case.kwargs), "plan_s": lambda: plan(x, out=out)}
    if peers:
        runs.update(peers.runners(row, case, x, w, b, ref, threads))
    _time_in_rounds(row, runs, seconds, peers or None, case)
    row["rounds"] = ROUNDS
    ratio = _peer_ratio(row)
    if (ratio is not None and ratio < 1.0) or row["plan_s"] > PLAN_OVER_FUNCTION * row["fastdeconv_s"]:
        _time_in_rounds(row, runs, seconds, peers or None, case)   # each cell keeps its least round
        row["rounds"] = 2 * ROUNDS
    if peers:
        peers.ran(row, case)
    if candidates:
        row["candidates"] = _time_candidates(case, layer_class, x, w, b, out, ref, seconds)
    return row


def _time_in_rounds(times, runs, seconds, peers=None, case=None):
    """times[key] = the least of ROUNDS medians of runs[key]() (each over seconds / ROUNDS), the runs
    taking turns round by round: a burst of the machine's noise then slows one round of every run
    instead of all of one run. After a peer's turn, its PeerSpec.settle_seconds pass before the next
    run is timed. A peer's run that raises is dropped (peers.failed) and its cell stays empty."""
    settle = {f"{spec.key}_s": spec.settle_seconds for spec in PEERS}
    for _ in range(ROUNDS):
        for key, run in list(runs.items()):
            try:
                elapsed = median_seconds(run, seconds / ROUNDS)
            except Exception as exc:  # noqa: BLE001 - a peer's run failing leaves its cell empty
                if peers is None or key in ("fastdeconv_s", "plan_s"):
                    raise   # ours (their results were checked before) and the candidates'
                peers.failed(key[:-len("_s")], case, exc)
                del runs[key]
                times.pop(key, None)
                continue
            times[key] = min(times.get(key, elapsed), elapsed)
            if settle.get(key):
                time.sleep(settle[key])


def _time_candidates(case, layer_class, x, w, b, out, ref, seconds):
    """Plan seconds of every algorithm that can run the case (a wrong result is an error)."""
    from .._backends.cpu import algorithms, supports
    from .._params import resolve_conv2d, resolve_conv_transpose2d

    resolve = resolve_conv_transpose2d if case.transposed else resolve_conv2d
    geometry = resolve(x.shape, w.shape, **case.kwargs)
    times, runs = {}, {}
    for name in algorithms(case.transposed):
        if not supports(name, geometry):
            continue
        plan = layer_class(w, b, **case.kwargs, algorithm=name)
        error = _relative_error(plan(x), ref)
        if error > 1e-4:
            raise AssertionError(f"case {case.name}: algorithm {name} differs from the reference by {error:.2e}")
        runs[name] = lambda plan=plan: plan(x, out=out)
    _time_in_rounds(times, runs, seconds)
    return times


def _peer_ratio(row):
    """The faster peer's time / our plan time, or None when no peer ran."""
    present = [row[f"{s.key}_s"] for s in PEERS if f"{s.key}_s" in row]
    return min(present) / row["plan_s"] if present else None


def field_summary(rows, worst=10):
    """Lines summarising a suite: min / p10 / median / geomean of × the faster peer (plan), fn/plan, the
    automatic choice against the fastest candidate (when timed), and the `worst` layers."""
    from .field import summary

    lines = []
    ratios = [(r, _peer_ratio(r)) for r in rows]
    ratios = [(r, x) for r, x in ratios if x is not None]
    if ratios:
        stats = summary([x for _, x in ratios])
        lines.append("× the faster peer (plan): " + ", ".join(
            f"{k} {v:.2f}" if k != "layers" else f"{v} layers" for k, v in stats.items()))
    fn_plan = summary([r["fastdeconv_s"] / r["plan_s"] for r in rows])
    lines.append(f"function / plan: median {fn_plan['median']:.2f}, max {max(r['fastdeconv_s'] / r['plan_s'] for r in rows):.2f}")
    timed = [r for r in rows if r.get("candidates")]
    if timed:
        # The choice's own candidate cell, timed in the same turns as its rivals; the plan cell was timed
        # in other turns, so comparing it would add the noise between two cells of one kernel.
        misses = [r for r in timed
                  if r["candidates"].get(r["algorithm"], r["plan_s"]) > 1.10 * min(r["candidates"].values())]
        lines.append(f"automatic choice within 10 % of the fastest algorithm: {len(timed) - len(misses)} of "
                     f"{len(timed)} layers")
        for r in misses:
            cells = ", ".join(f"{name} {seconds * 1e3:.3f}" for name, seconds in
                              sorted(r["candidates"].items(), key=lambda item: item[1]))
            lines.append(f"  {r['case']:<14} {r['algorithm']:<10} candidates (ms): {cells}")
    if ratios:
        lines.append(f"the {min(worst, len(ratios))} worst layers (× the faster peer, our algorithm):")
        for r, x in sorted(ratios, key=lambda item: item[1])[:worst]:
            best = ""
            if r.get("candidates"):
                name = min(r["candidates"], key=r["candidates"].get)
                best = f"; fastest candidate {name} {r['candidates'][name] * 1e3:.3f} ms"
            lines.append(f"  {x:5.2f}×  {r['case']:<14} {r['algorithm']:<10} {r['description']}{best}")
    return lines


def _table(rows, threads, peak):
    """(header, cells per row, notes): the numbers every format shows."""
    ours = "plan_s"
    columns = [c for c in ("fastdeconv_s", "plan_s", *(f"{s.key}_s" for s in PEERS)) if any(c in r for r in rows)]
    names = {"fastdeconv_s": "function ms", "plan_s": "plan ms", **{f"{s.key}_s": s.column for s in PEERS}}
    peers = [c for c in columns if c not in ("fastdeconv_s", "plan_s")]
    header = ["case", "algorithm"] + [names[c] for c in columns] + ["fn/plan", "GFLOP/s", "% peak", "GB/s"]
    header += [f"× {names[c][:-3]}" for c in peers] + ["max rel err"]
    body, ratios = [], []
    for r in rows:
        gflops = r["gflop"] / r[ours]
        if peak.gflops:
            percent = 100 * gflops / peak.gflops
            percent_text = f"{percent:.0f}" + ("!" if percent > 100 else "")
        else:
            percent_text = "-"
        cells = [r["case"], r.get("algorithm", "")]
        cells += [f"{r[c] * 1e3:.3f}" if c in r else "-" for c in columns]
        cells.append(f"{r['fastdeconv_s'] / r[ours]:.2f}" if "fastdeconv_s" in r else "-")
        cells += [f"{gflops:.1f}" if gflops < 10 else f"{gflops:.0f}", percent_text,
                  f"{r['mbytes'] / 1e3 / r[ours]:.1f}"]
        cells += [f"{r[c] / r[ours]:.2f}" if c in r else "-" for c in peers]
        present = [r[c] for c in peers if c in r]
        if present:
            ratios.append(min(present) / r[ours])
        cells.append(f"{max(r['max_rel_err'], r.get('plan_max_rel_err', 0)):.1e}")
        body.append(cells)
    if peak.gflops:
        peak_text = f"{peak.gflops:.0f} GFLOP/s" + (" (NOISY)" if peak.noisy else "")
    else:
        peak_text = "not measured"
    notes = [f"threads: {threads}; sgemm peak (numpy float32 matmul 2048², same run, same threads): {peak_text}"]
    note = "; ".join(n for n in (peak.note, _over_peak_note(rows, peak, ours)) if n)
    if note:
        notes.append(f"note: {note}")
    after = ["% peak: GFLOP/s over the sgemm peak above, which is numpy's BLAS float32 matmul measured here "
             "(not the CPU's theoretical peak); \"!\" marks a case above it"]
    if ratios:
        geomean = float(np.exp(np.mean(np.log(ratios))))
        after.append(f"geometric mean of our speedup (plan) over the faster peer per case: {geomean:.2f}×")
    return header, body, notes, after


def format_table(rows, threads, peak=None, peers_line="", style="text"):
    """The results as an aligned plain-text table (style="text") or a markdown table ("markdown"):
    ms per implementation, our GFLOP/s (and % of the sgemm peak), GB/s (input + output + weights),
    our speed ratio against each peer (> 1: we are faster) and the largest relative error."""
    if not isinstance(peak, Peak):
        peak = Peak(peak, [peak] if peak else [], "" if peak else "threadpoolctl is not installed")
    header, body, notes, after = _table(rows, threads, peak)
    if style == "markdown":
        lines = notes + ["", "| " + " | ".join(header) + " |",
                         "|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        lines.append("")
    else:
        widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header))]

        def line(cells):   # names left-aligned, numbers right-aligned
            return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        lines = notes + [line(header), line(["-" * w for w in widths])] + [line(cells) for cells in body]
    lines += after
    if peers_line:
        lines.append(peers_line)
    return "\n".join(line.rstrip() for line in lines)


def suite_cases(suite="all"):
    """The cases of ``suite``: "deconv", "conv", "all" (both), "narrow" (NARROW_SUITE), "large"
    (LARGE_SUITE) or "field" (:mod:`.field`, drawn with its default seed)."""
    if suite == "field":
        from .field import field_suite

        return field_suite()
    return list(SUITE) + list(CONV_SUITE) if suite == "all" else list(SUITES[suite])


def machine_info():
    """What the results were measured on: the CPU's model name (where the system says it), the logical
    CPUs, the operating system, the architecture and Python (``bench --json`` records it; ``--plot``
    names it in the title)."""
    import os
    import platform

    cpu = ""
    try:
        if sys.platform.startswith("linux"):
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.lower().startswith(("model name", "hardware")):   # x86 / some ARM boards
                        cpu = line.split(":", 1)[1].strip()
                        break
        elif sys.platform == "darwin":
            import subprocess

            cpu = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                 timeout=5).stdout.strip()
    except Exception:  # noqa: BLE001 - the model name is a nicety: without it the rest is still recorded
        cpu = ""
    return {"cpu": cpu or platform.processor() or "", "logical_cpus": os.cpu_count(), "system": platform.system(),
            "arch": platform.machine(), "python": platform.python_version(), "numpy": np.__version__}


def run_bench(cases=None, json_path=None, threads=0, seconds=0.5, peers=True, output_format="text",
              stdout=None, stderr=None, suite="all", candidates=False, plot=None) -> int:
    """Run a suite (``suite`` "deconv", "conv", "all", "narrow" or "field", see :func:`suite_cases`) or the named
    cases of it and print the results, one table per operation, then a summary (:func:`field_summary`)
    for the field suite; returns the exit status (1 when a result is wrong, 3 when ``plot`` failed).
    ``threads`` 0 or None: fastdeconv's default. ``candidates``: also time every algorithm that can run
    each case. ``plot``: called with the result dictionary (what ``json_path`` gets) after the tables
    are printed, e.g. :func:`fastdeconv.bench.plot.main_plot` bound to a file name."""
    import fastdeconv

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    pool = {case.name: case for case in suite_cases(suite)} if suite in OWN_NAME_SUITES else CASES
    unknown = [name for name in cases or [] if name not in pool]
    if unknown:
        print(f"unknown case {unknown[0]!r}; choose from {', '.join(pool)}", file=stderr)
        return 2
    if cases:
        selected = [pool[name] for name in dict.fromkeys(cases)]
    else:
        selected = suite_cases(suite)
    previous = fastdeconv.get_num_threads()
    if threads:
        fastdeconv.set_num_threads(threads)
    threads = fastdeconv.get_num_threads()   # what set_num_threads recorded
    try:
        peer_set = Peers(enabled=peers, log=stderr)
        if plot is not None and not peer_set.loaded:   # said now, not only after the run
            print("bench: no peer can run here, so the plot will show no ratios (install torch or onnxruntime "
                  "and onnx)", file=stderr, flush=True)
        if not _blas_unavailable():
            print(f"bench: measuring the sgemm peak (numpy float32 matmul, {threads} threads)", file=stderr,
                  flush=True)
        peak = measure_peak(threads, seconds)
        limits = None
        if not _blas_unavailable():   # numpy's BLAS threads (the reference's) must not spin on the timed cores
            from threadpoolctl import threadpool_limits

            limits = threadpool_limits(limits=1, user_api="blas")
        rows = []
        try:
            for i, case in enumerate(selected, 1):
                # progress: one line per case on stderr (stdout stays the table or the JSON alone)
                print(f"bench: [{i}/{len(selected)}] {case.name}", file=stderr, flush=True)
                rows.append(measure_case(case, threads, seconds, peer_set, candidates))
        finally:
            if limits is not None:
                limits.restore_original_limits()
        if peak.measurements:   # a last measurement after the cases: did the machine stay as fast?
            peak.measurements.append(sgemm_gflops(threads, seconds))
        _finish_peak(peak, rows, "plan_s")
    finally:
        fastdeconv.set_num_threads(previous)
    result = {"fastdeconv": fastdeconv.__version__, "threads": threads, "seconds_per_cell": seconds,
              "machine": machine_info(),
              "sgemm_peak_gflops": peak.gflops, "sgemm_measurements_gflops": peak.measurements,
              "sgemm_peak_noisy": peak.noisy,
              "note": "; ".join(n for n in (peak.note, _over_peak_note(rows, peak)) if n), "peers": peer_set.status,
              "cases": [asdict(c) for c in selected], "rows": rows,
              "summary": field_summary(rows) if rows else []}
    if output_format == "json":
        print(json.dumps(result, indent=1), file=stdout)
    else:
        tables = []
        for op, title in (("deconv", "transposed convolution: conv_transpose2d / ConvTranspose2d"),
                          ("conv", "convolution: conv2d / Conv2d")):
            op_rows = [row for row, case in zip(rows, selected) if case.op == op]
            if op_rows:
                tables.append(f"{'## ' if output_format == 'markdown' else ''}{title}\n"
                              + format_table(op_rows, threads, peak, style=output_format))
        summary = "\n" + "\n".join(field_summary(rows)) if suite in OWN_NAME_SUITES or candidates else ""
        print("\n\n".join(tables) + summary + "\n" + peer_set.summary(), file=stdout)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    status = 0
    if plot is not None:
        try:
            plot(result)
        except Exception as error:  # noqa: BLE001 - the tables and the JSON are out; say why the picture is not
            print(f"bench: could not draw the plot: {type(error).__name__}: {error}", file=stderr)
            status = 3
    worst = max(max(r["max_rel_err"], r.get("plan_max_rel_err", 0)) for r in rows)
    if worst > 1e-4:
        print(f"ERROR: a result differs from the reference by {worst:.2e} (relative)", file=stderr)
        return 1
    return status

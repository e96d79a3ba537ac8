"""The Metal backends on a real Metal device (macOS). Skipped elsewhere.

Every test is marked ``metal``. When ``$FASTDECONV_REQUIRE_METAL=1`` (the self-hosted Mac job of
.github/workflows/macos.yml) an unavailable backend is a failure, not a skip.

Tolerances (fastdeconv.selftest.tolerance): float32 through MPSGraph — 1e-4 relative (GPU summation
order); float32 through MPSCNN — 5e-3 relative (Apple: MPSCNNConvolution "Weights are converted to half
float (fp16) internally"); float16 — 1e-2 relative. The data are same-sign, so every output is a sum of
same-signed terms and a relative tolerance is meaningful.

``test_selftest_check`` runs the checks of ``python -m fastdeconv selftest`` (fastdeconv.selftest.CHECKS:
non-square kernels, asymmetric strides, groups, depthwise, channel counts not multiples of 4, N > 1,
float32 and float16); a failing MPSCNN kernel is diagnosed (which weight order the GPU read).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import fastdeconv
from fastdeconv import metal
from fastdeconv._backends import mps as mps_backend
from fastdeconv._backends import registry as _backends
from fastdeconv import selftest
from fastdeconv.metal import descriptors
from helpers import Case
from test_metal_descriptors import cases

REQUIRE = os.environ.get("FASTDECONV_REQUIRE_METAL") == "1"


def _needs(path):
    state = metal.status(path)
    if not state.available:
        if REQUIRE:
            pytest.fail(f"FASTDECONV_REQUIRE_METAL=1 but backend={path!r} is unavailable: {state.reason}")
        pytest.skip(f"backend={path!r} unavailable: {state.reason}")


pytestmark = pytest.mark.metal
PATHS = ["mps", "mps-cnn"]


def assert_metal_close(got, ref, tol, **described):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, got.dtype, ref.shape, ref.dtype, described)
    g, r = got.astype(np.float64), ref.astype(np.float64)
    bound = tol * (np.abs(r) + 1e-3 * np.abs(r).max(initial=0.0)) + 1e-30
    bad = np.abs(g - r) > bound
    if bad.any():
        worst = np.unravel_index(np.argmax(np.abs(g - r) - bound), g.shape)
        raise AssertionError(f"{int(bad.sum())}/{bad.size} elements off (rtol {tol}); worst at {worst}: got "
                             f"{g[worst]!r}, cpu {r[worst]!r}; {described}")


def stage_of(path, case):
    if path != "mps-cnn":
        return None
    x, w, b = case.arrays()
    return descriptors.cnn_descriptor(case.geometry(x, w), case.result_dtype, b is not None).stage


def check(path, case):
    _needs(path)
    x, w, b = case.arrays()
    ref = case.call(x, w, b, backend="cpu")
    got = case.call(x, w, b, backend=path)
    assert_metal_close(got, ref, selftest.tolerance(path, case.result_dtype, stage_of(path, case)), path=path,
                       **case.describe())


FIXED = [
    dict(op="t", stride=2, padding=1, output_padding=1),                                  # the decoder's layer
    dict(op="t", c_in=8, c_out=8, groups=2, kernel=(4, 4), stride=2, padding=1),         # MPSCNN grouped
    dict(op="t", c_in=6, c_out=4, groups=2, dilation=2, padding=((0, 1), (2, 0))),      # direct kernel
    dict(op="t", c_in=4, c_out=4, groups=4, stride=3, output_size=(16, 17)),             # depthwise, output_size
    dict(op="t", kernel=(2, 2), stride=1, dilation=3, output_padding=(2, 1)),            # output_padding >= stride
    dict(op="t", padding="same", stride=(2, 3), kernel=(3, 4)),
    dict(op="c", stride=2, padding=1),
    dict(op="c", c_in=3, c_out=3, groups=3, dilation=2, padding="same"),                 # depthwise descriptor
    dict(op="c", c_in=8, c_out=12, groups=4, kernel=(1, 3), stride=(1, 2)),              # direct kernel
    dict(op="t", n=3, hw=(17, 9), c_in=16, c_out=8, kernel=(5, 5), stride=2, padding=2, bias=False),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("params", FIXED, ids=[str(i) for i in range(len(FIXED))])
@pytest.mark.parametrize("path", PATHS)
def test_fixed_cases(path, params, dtype):
    check(path, Case(dtype=dtype, **params))


@pytest.mark.parametrize("check", selftest.CHECKS, ids=[check.name for check in selftest.CHECKS])
@pytest.mark.parametrize("path", PATHS)
def test_selftest_check(path, check):
    _needs(path)
    result = selftest.run_check(check, path)
    assert result.ok, (f"{check.describe()} {check.dtype} on {path} ({result.engine}): error {result.error:.1e} > "
                       f"{result.tol:.0e}; {result.diagnosis}")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", ["t", "c"])
def test_random_cases(path, op):
    _needs(path)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
    @given(case=cases(op))
    def run(case):
        check(path, case)

    run()


@pytest.mark.parametrize("path", PATHS)
def test_unbatched_and_out(path):
    _needs(path)
    case = Case(op="t", dtype="float32", unbatched=True, stride=2)
    x, w, b = case.arrays()
    ref = case.call(x, w, b, backend="cpu")
    out = np.empty_like(ref)
    assert case.call(x, w, b, backend=path, out=out) is out
    assert_metal_close(out, ref, selftest.tolerance(path, np.float32, stage_of(path, case)))


@pytest.mark.parametrize("kernel", [3, 4])
@pytest.mark.parametrize("path", PATHS)
def test_delta_calibration(path, kernel):
    """research/mps.md §7.1: a delta input shows which weight lands where (window centring, rotation)."""
    _needs(path)
    x = np.zeros((1, 3, 3, 4), np.float32)
    x[0, 1, 1, 0] = 1.0
    w = np.zeros((4, kernel, kernel, 4), np.float32)
    w[0, :, :, 0] = np.arange(1, kernel * kernel + 1).reshape(kernel, kernel)
    for kernel_offset_case in (dict(stride=2, padding=0), dict(stride=2, padding=1, output_padding=1)):
        ref = fastdeconv.conv_transpose2d(x, w, backend="cpu", **kernel_offset_case)
        got = fastdeconv.conv_transpose2d(x, w, backend=path, **kernel_offset_case)
        assert np.allclose(got, ref, rtol=5e-3, atol=1e-6), (
            f"{path} {kernel_offset_case}: channel 0 got\n{got[0, :, :, 0]}\nexpected\n{ref[0, :, :, 0]}")


def test_direct_kernel_on_the_device():
    """conv_transpose.metal itself, forced for configurations MPSCNN could run."""
    _needs("mps-cnn")
    from fastdeconv.metal import pyobjc_layer

    for dtype in (np.float32, np.float16):
        for case in (Case(op="t", dtype=np.dtype(dtype).name, stride=2, padding=1, dilation=2, output_padding=1),
                     Case(op="c", dtype=np.dtype(dtype).name, stride=2, padding=(1, 0), groups=1)):
            x, w, b = case.arrays()
            g = case.geometry(x, w)
            descriptor = descriptors.cnn_descriptor(g, dtype, True, force_direct=True)
            runner = pyobjc_layer.CnnRunner(descriptor, descriptors.cnn_weights(descriptor, w, g.groups),
                                            descriptors.cnn_bias(descriptor, b, g.out_channels))
            got = runner.run(np.ascontiguousarray(x, dtype))
            assert_metal_close(got, case.call(x, w, b, backend="cpu"), selftest.tolerance("mps-cnn", dtype),
                               **case.describe())


@pytest.mark.parametrize("path", PATHS)
def test_layer_reuses_gpu_state(path):
    _needs(path)
    case = Case(op="t", dtype="float32", c_in=8, c_out=8, stride=2, padding=1, output_padding=1)
    x, w, b = case.arrays()
    layer = mps_backend.MetalBackend(path).layer(w, b, np.float32)
    g = case.geometry(x, w)
    first = layer.run(x, g)
    second = layer.run(x, g)
    assert np.array_equal(first, second)
    assert_metal_close(first, case.call(x, w, b, backend="cpu"),
                       selftest.tolerance(path, np.float32, stage_of(path, case)))


def test_backends_report_mps():
    _needs("mps")
    rows = {row.name: row for row in _backends.backends()}
    assert rows["mps"].available and "Metal device" in rows["mps"].reason

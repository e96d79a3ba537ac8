"""Layers whose GEMM rows take the strided tiles (src/kernels/gemm.h, STRIDED TILES: AVX-512): the
pixels of one output row read A rows evenly spaced in every tap, with at least 256 products per
output (taps x channels). Each layer is checked against the reference on every GEMM ISA, float32 and
float64, serially and threaded; and its result is the same bits at 1 and 3 threads, where the rows are
cut into other tiles (a row tile at a cut or a row's end takes the indirect tiles, which sum in the
same order)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import GEMM_ISAS, Case, check_case, gemm_isa, threaded

STRIDED_LAYERS = [
    # 16 outputs (one 16-wide panel: the 24-row tile), 3x3 stride 1 over 32 channels: 288 products
    (Case("c", n=2, hw=(9, 40), c_in=32, c_out=16, kernel=(3, 3), padding=1), "im2col"),
    # 48 outputs (a 32-wide panel, 12-row tiles, then a 16-wide one), k4 s2, rows 2 x channels apart
    (Case("c", n=1, hw=(12, 70), c_in=24, c_out=48, kernel=(4, 4), stride=2, padding=1), "im2col"),
    # 1-D, dilated: one output row of 150 pixels
    (Case("c", n=1, hw=(1, 160), c_in=40, c_out=64, kernel=(1, 7), dilation=(1, 3), padding=(0, 9)), "im2col"),
    # transposed k4 s2: each stride phase a 2x2 convolution over 64 channels (256 products)
    (Case("t", n=1, hw=(6, 30), c_in=64, c_out=16, kernel=(4, 4), stride=2, padding=1), "phase"),
]


def _id(layer):
    case, algorithm = layer
    return f"{case.op}{case.hw}c{case.c_in}-{case.c_out}k{case.kernel}s{case.stride}-{algorithm}"


@pytest.mark.parametrize("threads", [None, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("isa", GEMM_ISAS)
@pytest.mark.parametrize("layer", STRIDED_LAYERS, ids=[_id(layer) for layer in STRIDED_LAYERS])
def test_strided_layers_match_reference(layer, isa, dtype, threads):
    case, algorithm = layer
    with gemm_isa(isa):
        assert check_case(Case(**{**case.__dict__, "threads": threads, "dtype": dtype}), algorithm)


@pytest.mark.parametrize("isa", GEMM_ISAS)
@pytest.mark.parametrize("layer", STRIDED_LAYERS, ids=[_id(layer) for layer in STRIDED_LAYERS])
def test_strided_layers_same_bits_at_any_thread_count(layer, isa):
    case, algorithm = layer
    x, w, b = Case(**{**case.__dict__, "dtype": "float32"}).arrays()
    results = []
    for threads in (1, 3):
        with gemm_isa(isa), threaded(threads):
            results.append(case.call(x, w, b, backend="cpu", algorithm=algorithm))
    np.testing.assert_array_equal(results[0], results[1])

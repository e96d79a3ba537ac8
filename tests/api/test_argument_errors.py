"""Bad input: the exception type and a message that names the argument and repeats the value.

Also the output-shape functions against their formulas.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import fastdeconv

BACKENDS = ["cpu", "reference", "auto"]


def _x(shape=(1, 4, 4, 4), dtype=np.float64):
    return np.ones(shape, dtype=dtype)


def _wt(shape=(4, 3, 3, 2), dtype=np.float64):
    return np.ones(shape, dtype=dtype)


# (id, function, kwargs, exception, match). x/weight default to _x()/_wt() for "t" and conv2d shapes for "c".
T, C = "t", "c"
CASES = [
    # ndim of x / weight
    ("x_ndim_2", T, dict(x=np.ones((4, 4))), ValueError, r"x .*ndim=2.*\(4, 4\)"),
    ("x_ndim_5", T, dict(x=np.ones((1, 1, 4, 4, 4))), ValueError, r"x .*ndim=5"),
    ("weight_ndim_3", T, dict(weight=np.ones((4, 3, 3))), ValueError, r"weight .*ndim=3.*\(4, 3, 3\)"),
    ("weight_ndim_5_conv", C, dict(weight=np.ones((2, 3, 3, 4, 1))), ValueError, r"weight .*ndim=5"),
    # channels and groups
    ("channel_mismatch", T, dict(weight=np.ones((3, 3, 3, 2))), ValueError, r"C_in=4.*weight.*C_in=3"),
    ("channel_mismatch_conv", C, dict(weight=np.ones((2, 3, 3, 3))), ValueError, r"C_in=4.*weight.*C_in=3"),
    ("cin_not_divisible", T, dict(groups=3), ValueError, r"C_in=4.*groups=3"),
    ("cin_not_divisible_conv", C, dict(groups=3, weight=np.ones((3, 3, 3, 1))), ValueError, r"groups=3"),
    ("cout_not_divisible_conv", C, dict(groups=2, weight=np.ones((3, 3, 3, 2))), ValueError, r"C_out=3.*groups=2"),
    ("groups_0", T, dict(groups=0), ValueError, r"groups.*0"),
    ("groups_negative", C, dict(groups=-2), ValueError, r"groups.*-2"),
    ("groups_float", T, dict(groups=2.0), TypeError, r"groups.*2\.0"),
    # stride / dilation
    ("stride_0", T, dict(stride=0), ValueError, r"stride.*0"),
    ("stride_pair_0", T, dict(stride=(2, 0)), ValueError, r"stride.*\(2, 0\)"),
    ("stride_negative_conv", C, dict(stride=-1), ValueError, r"stride.*-1"),
    ("stride_triple", T, dict(stride=(1, 2, 3)), TypeError, r"stride.*\(1, 2, 3\)"),
    ("stride_float", C, dict(stride=1.5), TypeError, r"stride.*1\.5"),
    ("dilation_0", T, dict(dilation=0), ValueError, r"dilation.*0"),
    ("dilation_pair_0_conv", C, dict(dilation=(0, 1)), ValueError, r"dilation.*\(0, 1\)"),
    # padding
    ("padding_negative", T, dict(padding=-1), ValueError, r"padding.*-1"),
    ("padding_negative_pair", T, dict(padding=(0, -2)), ValueError, r"padding.*-2"),
    ("padding_negative_pairs", C, dict(padding=((0, 0), (1, -1))), ValueError, r"padding.*-1"),
    ("padding_unknown_string", T, dict(padding="full"), ValueError, r"padding.*'full'"),
    ("padding_unknown_string_conv", C, dict(padding="causal"), ValueError, r"padding.*'causal'"),
    ("padding_triple", T, dict(padding=(1, 2, 3)), TypeError, r"padding.*\(1, 2, 3\)"),
    ("padding_ragged", C, dict(padding=((1, 2), (3,))), TypeError, r"padding"),
    ("padding_float", T, dict(padding=0.5), TypeError, r"padding.*0\.5"),
    # output_padding
    ("output_padding_eq_stride", T, dict(stride=2, output_padding=2), ValueError, r"output_padding.*2"),
    ("output_padding_gt_stride_w", T, dict(stride=(3, 2), output_padding=(2, 2)), ValueError,
     r"output_padding=\(2, 2\).*stride=\(3, 2\).*width"),
    ("output_padding_stride1", T, dict(output_padding=1), ValueError, r"output_padding.*1"),
    ("output_padding_eq_dilation", T, dict(dilation=2, output_padding=2), ValueError, r"output_padding.*dilation"),
    ("output_padding_negative", T, dict(stride=2, output_padding=-1), ValueError, r"output_padding.*-1"),
    ("output_padding_with_same", T, dict(stride=2, padding="same", output_padding=1), ValueError,
     r"output_padding.*same|same.*output_padding"),
    # output_size
    ("output_size_too_small", T, dict(stride=2, output_size=(8, 9)), ValueError,
     r"output_size=\(8, 9\).*\[9, 10\]"),
    ("output_size_too_big", T, dict(stride=2, output_size=(9, 11)), ValueError, r"output_size.*\[9, 10\]"),
    ("output_size_stride1", T, dict(output_size=(7, 6)), ValueError, r"output_size.*\[6, 6\]"),
    ("output_size_same_mismatch", T, dict(stride=2, padding="same", output_size=(9, 8)), ValueError,
     r"output_size.*\[8, 8\]"),
    ("output_size_conflicts_output_padding", T, dict(stride=2, output_padding=1, output_size=(9, 9)), ValueError,
     r"output_size.*output_padding|output_padding.*output_size"),
    ("output_size_zero", T, dict(output_size=(0, 6)), ValueError, r"output_size"),
    ("output_size_triple", T, dict(output_size=(6, 6, 6)), TypeError, r"output_size"),
    # computed output size < 1
    ("output_lt_1", T, dict(x=np.ones((1, 1, 1, 4)), weight=np.ones((4, 1, 1, 2)), padding=1), ValueError,
     r"output size.*-1"),
    ("output_lt_1_crop", T, dict(x=np.ones((1, 2, 2, 4)), weight=np.ones((4, 2, 2, 2)), padding=((2, 1), (0, 0))),
     ValueError, r"output size.*\(0, 3\)"),
    ("output_lt_1_conv", C, dict(x=np.ones((1, 2, 2, 4)), weight=np.ones((2, 3, 3, 4))), ValueError,
     r"output size.*\(2, 2\).*\(3, 3\)"),
    ("output_lt_1_conv_dilated", C, dict(dilation=3), ValueError, r"output size.*\(7, 7\)"),
    # zero-sized spatial dims / kernel
    ("x_zero_height", T, dict(x=np.ones((1, 0, 4, 4))), ValueError, r"x.*\(0, 4\)"),
    ("kernel_zero", T, dict(weight=np.ones((4, 0, 3, 2))), ValueError, r"kernel.*\(0, 3\)"),
    # bias
    ("bias_length", T, dict(bias=np.ones(3)), ValueError, r"bias.*\(2,\).*\(3,\)"),
    ("bias_length_conv", C, dict(bias=np.ones(5)), ValueError, r"bias.*\(2,\).*\(5,\)"),
    ("bias_2d", T, dict(bias=np.ones((1, 2))), ValueError, r"bias.*\(1, 2\)"),
    ("bias_complex", T, dict(bias=np.ones(2, dtype=np.complex128)), TypeError, r"bias.*complex128"),
    ("bias_bool", C, dict(bias=np.ones(2, dtype=bool)), TypeError, r"bias.*bool"),
    # dtypes
    ("x_int", T, dict(x=np.ones((1, 4, 4, 4), dtype=np.int32)), TypeError, r"x .*int32.*float16, float32.*float64"),
    ("x_int64_conv", C, dict(x=np.ones((1, 4, 4, 4), dtype=np.int64)), TypeError, r"x .*int64.*float16"),
    ("x_bool", T, dict(x=np.ones((1, 4, 4, 4), dtype=bool)), TypeError, r"x .*bool.*float16"),
    ("x_complex", T, dict(x=np.ones((1, 4, 4, 4), dtype=np.complex64)), TypeError, r"x .*complex64.*float16"),
    ("x_object", C, dict(x=np.ones((1, 4, 4, 4), dtype=object)), TypeError, r"x .*object.*float16"),
    ("weight_int", T, dict(weight=np.ones((4, 3, 3, 2), dtype=np.int16)), TypeError, r"weight .*int16.*float16"),
    ("weight_complex_conv", C, dict(weight=np.ones((2, 3, 3, 4), dtype=np.complex128)), TypeError,
     r"weight .*complex128.*float32"),
    ("weight_uint8", C, dict(weight=np.ones((2, 3, 3, 4), dtype=np.uint8)), TypeError, r"weight .*uint8"),
    ("x_list_of_ints", T, dict(x=[[[[1, 2, 3, 4]]]]), TypeError, r"x .*int"),
    # huge parameters: a ValueError naming the argument and the limit, never OverflowError or numpy's
    # "array is too big" / "Maximum allowed dimension exceeded"
    ("dilation_2_62", T, dict(dilation=2**62), ValueError, r"dilation=4611686018427387904.*index range.*2\*\*63"),
    ("dilation_2_63", T, dict(dilation=2**63), ValueError, r"dilation must be <= 2\*\*62.*9223372036854775808"),
    ("dilation_2_64", T, dict(dilation=2**64), ValueError, r"dilation must be <= 2\*\*62"),
    ("stride_2_40", T, dict(stride=2**40), ValueError, r"result would have shape .* elements.*2\*\*48.*stride=1099511627776"),
    ("stride_padding_2_60", T, dict(stride=2**60, padding=2**60), ValueError, r"result would have shape .*stride=1152921504606846976"),
    ("padding_2_63", T, dict(padding=2**63), ValueError, r"padding must be <= 2\*\*62"),
    ("padding_pair_2_63_conv", C, dict(padding=((0, 2**63), (0, 0))), ValueError, r"padding must be <= 2\*\*62"),
    ("output_padding_2_63", T, dict(stride=2**32, output_padding=2**63), ValueError, r"output_padding must be <= 2"),
    ("groups_2_70", T, dict(groups=2**70), ValueError, r"groups must be <= 2\*\*62"),
    ("output_size_2_70", T, dict(output_size=(2**70, 3)), ValueError, r"output_size must be <= 2\*\*62"),
    ("stride_conv_2_63", C, dict(stride=2**63), ValueError, r"stride must be <= 2\*\*62"),
    ("dilation_conv_2_62", C, dict(dilation=2**62), ValueError, r"dilated kernel.*dilation=\(4611686018427387904"),
    ("result_too_large", T, dict(stride=2**31), ValueError, r"result would have shape .* elements.*2\*\*48.*stride=2147483648"),
    # backend
    ("backend_unknown", T, dict(backend="gpu"), ValueError, r"backend.*'gpu'"),
    ("backend_unknown_conv", C, dict(backend="CPU"), ValueError, r"backend.*'CPU'"),
]


def _call(op, kw, backend_default):
    kw = dict(kw)
    if op == T:
        x = kw.pop("x", _x())
        w = kw.pop("weight", _wt())
        fn = fastdeconv.conv_transpose2d
    else:
        x = kw.pop("x", _x())
        w = kw.pop("weight", np.ones((2, 3, 3, 4)))
        fn = fastdeconv.conv2d
    kw.setdefault("backend", backend_default)
    return fn(x, w, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,op,kw,exc,match", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, op, kw, exc, match, backend):
    with pytest.raises(exc, match=match):
        _call(op, kw, backend)


def test_index_range_beyond_64_bits_is_rejected():
    """Shapes only (no array that large exists): an index span past 2**62 is a ValueError naming the
    arguments, whatever the result's size."""
    from fastdeconv._params import resolve_conv2d, resolve_conv_transpose2d

    with pytest.raises(ValueError, match=r"stride=4294967296.*height axis.*2\*\*63"):
        resolve_conv_transpose2d((1, 2**31, 1, 1), (1, 3, 1, 1), stride=2**32)
    with pytest.raises(ValueError, match=r"dilation=4294967296.*2\*\*63"):
        resolve_conv2d((1, 2**62, 1, 1), (1, 3, 1, 1), dilation=2**32)


def test_broadcast_input_beyond_64_bit_offsets_is_rejected():
    """A zero-strided x can claim more elements than any memory holds: a ValueError, not numpy's."""
    x = np.broadcast_to(np.ones((1, 1, 1, 4)), (2**30, 2**10, 2**10, 4))
    with pytest.raises(ValueError, match=r"x would have shape .* elements.*not below 2\*\*48"):
        fastdeconv.conv_transpose2d(x, _wt())


def test_huge_parameters_in_the_layer_name_the_argument():
    with pytest.raises(ValueError, match=r"padding must be <= 2\*\*62"):
        fastdeconv.ConvTranspose2d(_wt(), padding=2**63)
    with pytest.raises(ValueError, match=r"padding=4611686018427387904.*2\*\*63"):
        fastdeconv.ConvTranspose2d(_wt(), padding=2**62)
    layer = fastdeconv.ConvTranspose2d(_wt(), stride=2**62)   # a 1-pixel input never uses the stride
    assert layer(_x((1, 1, 1, 4))).shape == (1, 3, 3, 2)
    with pytest.raises(ValueError, match=r"stride=4611686018427387904.*2\*\*63"):
        layer(_x((1, 2, 1, 4)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_valid_counterparts_of_edge_errors(backend):
    """The limits just inside the error cases work (so the error cases test the boundary)."""
    x, w = _x(), _wt()
    f = fastdeconv.conv_transpose2d
    assert f(x, w, stride=2, output_padding=1, backend=backend).shape == (1, 10, 10, 2)
    assert f(x, w, dilation=2, output_padding=1, backend=backend).shape == (1, 9, 9, 2)
    assert f(x, w, stride=2, output_size=(9, 10), backend=backend).shape == (1, 9, 10, 2)
    assert f(x, w, stride=2, output_padding=1, output_size=(10, 10), backend=backend).shape == (1, 10, 10, 2)
    assert f(x, w, stride=2, padding="same", output_size=(8, 8), backend=backend).shape == (1, 8, 8, 2)
    assert f(np.ones((1, 1, 1, 4)), np.ones((4, 1, 1, 2)), padding=((0, 0), (0, 0)), backend=backend).shape \
        == (1, 1, 1, 2)
    assert fastdeconv.conv2d(x, np.ones((2, 3, 3, 4)), dilation=(1, 1), padding=((2, 2), (0, 0)),
                             backend=backend).shape == (1, 6, 2, 2)


def test_mps_backend_is_a_clear_runtime_error():
    for fn, w in ((fastdeconv.conv_transpose2d, _wt()), (fastdeconv.conv2d, np.ones((2, 3, 3, 4)))):
        with pytest.raises(RuntimeError, match="mps"):
            fn(_x(), w, backend="mps")


# ---------------------------------------------------------------------------------------------
# out=
# ---------------------------------------------------------------------------------------------

OUT_SHAPE = (1, 6, 6, 2)   # conv_transpose2d(_x(), _wt())


def _out_cases():
    ok = np.empty(OUT_SHAPE)
    ro = np.empty(OUT_SHAPE)
    ro.flags.writeable = False
    return [
        ("wrong_shape", np.empty((1, 6, 5, 2)), r"out.*\(1, 6, 6, 2\).*\(1, 6, 5, 2\)"),
        ("unbatched_shape_for_batched", np.empty(OUT_SHAPE[1:]), r"out.*shape"),
        ("wrong_dtype", np.empty(OUT_SHAPE, dtype=np.float32), r"out.*float64.*float32"),
        ("int_dtype", np.empty(OUT_SHAPE, dtype=np.int64), r"out.*int64"),
        ("non_contiguous", np.empty((1, 6, 12, 2))[:, :, ::2], r"out.*C-contiguous=False"),
        ("fortran", np.asfortranarray(ok), r"out.*C-contiguous=False"),
        ("read_only", ro, r"out.*writeable=False"),
        ("list", ok.tolist(), r"out"),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,out,match", _out_cases(), ids=[c[0] for c in _out_cases()])
def test_bad_out(name, out, match, backend):
    x, w = _x(), _wt()
    with pytest.raises(ValueError, match=match):
        fastdeconv.conv_transpose2d(x, w, out=out, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("what", ["x", "weight", "bias"])
def test_out_overlapping_an_input(what, backend):
    """out sharing memory with x, weight or bias is rejected (shapes chosen so out fits the buffer)."""
    x_size, w_size, out_size = 1 * 4 * 4 * 4, 4 * 3 * 3 * 2, 6 * 6 * 2
    buf = np.zeros(max(x_size, w_size, out_size) + 8)
    x, w, b = _x(), _wt(), np.ones(2)
    if what == "x":
        x = buf[:x_size].reshape(1, 4, 4, 4)
    elif what == "weight":
        w = buf[:w_size].reshape(4, 3, 3, 2)
    else:
        b = buf[out_size - 2:out_size]
    out = buf[:out_size].reshape(OUT_SHAPE)
    with pytest.raises(ValueError, match=f"out.*overlap.*{what}"):
        fastdeconv.conv_transpose2d(x, w, b, out=out, backend=backend)
    with pytest.raises(ValueError, match="out"):
        fastdeconv.conv2d(np.zeros((1, 6, 6, 2)), buf[:2 * 3 * 3 * 2].reshape(2, 3, 3, 2), padding=1,
                          out=buf[:72].reshape(1, 6, 6, 2), backend=backend)


def test_bad_out_conv2d_and_float16():
    x16 = np.ones((1, 4, 4, 4), np.float16)
    w16 = np.ones((2, 3, 3, 4), np.float16)
    with pytest.raises(ValueError, match=r"out.*float16.*float32"):
        fastdeconv.conv2d(x16, w16, out=np.empty((1, 2, 2, 2), np.float32))
    with pytest.raises(ValueError, match=r"out.*\(2, 2, 2\)"):
        fastdeconv.conv2d(x16[0], w16, out=np.empty((1, 2, 2, 2), np.float16))


# ---------------------------------------------------------------------------------------------
# Threads, forced algorithm
# ---------------------------------------------------------------------------------------------


def test_set_num_threads_rejects_bad_values():
    with pytest.raises(ValueError, match=r"n.*-1"):
        fastdeconv.set_num_threads(-1)
    with pytest.raises(TypeError, match=r"n.*'2'"):
        fastdeconv.set_num_threads("2")
    with pytest.raises(TypeError, match=r"n.*True"):
        fastdeconv.set_num_threads(True)


# ---------------------------------------------------------------------------------------------
# Output-shape functions
# ---------------------------------------------------------------------------------------------


def _t_formula(i, k, s, p0, p1, op, d):
    return (i - 1) * s - p0 - p1 + d * (k - 1) + op + 1


def _c_formula(i, k, s, p0, p1, d):
    return (i + p0 + p1 - d * (k - 1) - 1) // s + 1


@pytest.mark.parametrize("s", [1, 2, 3])
@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_output_shape_functions_follow_the_formulas(s, d, k):
    for i in range(1, 7):
        for p0 in range(3):
            for p1 in range(3):
                for op in range(max(s, d)):
                    expect = _t_formula(i, k, s, p0, p1, op, d)
                    w_expect = _t_formula(i + 1, k + 1, s, p1, p0, 0, d)
                    args = ((i, i + 1), (k, k + 1), s, ((p0, p1), (p1, p0)), (op, 0), d)
                    if min(expect, w_expect) < 1:
                        with pytest.raises(ValueError, match="output size"):
                            fastdeconv.conv_transpose2d_output_shape(*args)
                    else:
                        assert fastdeconv.conv_transpose2d_output_shape(*args) == (expect, w_expect)
                cexp = _c_formula(i, k, s, p0, p1, d)
                cargs = ((i, i), (k, k), s, ((p0, p1), (p0, p1)), d)
                if i + p0 + p1 < d * (k - 1) + 1:
                    with pytest.raises(ValueError, match="output size"):
                        fastdeconv.conv2d_output_shape(*cargs)
                else:
                    assert fastdeconv.conv2d_output_shape(*cargs) == (cexp, cexp)
            # "same": transposed H·s, conv ceil(H/s); "valid": no padding
            assert fastdeconv.conv_transpose2d_output_shape((i, i), k, s, "same", 0, d) == (i * s, i * s)
            assert fastdeconv.conv2d_output_shape((i, i), k, s, "same", d) == (-(-i // s),) * 2
            assert fastdeconv.conv_transpose2d_output_shape((i, 1), k, s, "valid", 0, d) == (
                _t_formula(i, k, s, 0, 0, 0, d), _t_formula(1, k, s, 0, 0, 0, d))


def test_output_shape_functions_match_the_calls():
    rng = np.random.default_rng(0)
    for _ in range(30):
        i = tuple(rng.integers(1, 6, 2))
        k = tuple(rng.integers(1, 4, 2))
        s = tuple(rng.integers(1, 4, 2))
        d = tuple(rng.integers(1, 3, 2))
        op = tuple(int(rng.integers(0, max(a, b))) for a, b in zip(s, d))
        shape = fastdeconv.conv_transpose2d_output_shape(i, k, s, 0, op, d)
        y = fastdeconv.conv_transpose2d(np.ones((1, *i, 1)), np.ones((1, *k, 1)), stride=s, output_padding=op,
                                        dilation=d)
        assert y.shape[1:3] == shape


@pytest.mark.parametrize("fn", [fastdeconv.conv_transpose2d_output_shape, fastdeconv.conv2d_output_shape])
@pytest.mark.parametrize("args,exc,match", [
    (((0, 4), (3, 3)), ValueError, r"input_hw.*\(0, 4\)"),
    (((4, 4), (3, 0)), ValueError, r"kernel_hw.*\(3, 0\)"),
    (((4, 4), (3, 3, 3)), TypeError, r"kernel_hw"),
    (((4, 4), (3, 3), 0), ValueError, r"stride.*0"),
    (((4, 4), (3, 3), 1, -1), ValueError, r"padding.*-1"),
    (((4, 4), (3, 3), 1, "full"), ValueError, r"padding.*'full'"),
])
def test_output_shape_function_errors(fn, args, exc, match):
    with pytest.raises(exc, match=match):
        fn(*args)


def test_output_shape_too_small_errors():
    with pytest.raises(ValueError, match=r"output size.*\(-3, -3\)"):
        fastdeconv.conv_transpose2d_output_shape((1, 1), (5, 5), 1, 4)
    with pytest.raises(ValueError, match=r"output size.*\(1, 1\).*\(5, 5\)"):
        fastdeconv.conv2d_output_shape((1, 1), (5, 5), 1, 0)


def test_transposed_output_shape_output_padding_errors():
    with pytest.raises(ValueError, match=r"output_padding.*\(2, 0\)"):
        fastdeconv.conv_transpose2d_output_shape((4, 4), (3, 3), stride=2, output_padding=(2, 0))
    with pytest.raises(ValueError, match=r"dilation.*0"):
        fastdeconv.conv_transpose2d_output_shape((4, 4), (3, 3), dilation=0)
    with pytest.raises(ValueError, match=r"dilation.*0"):
        fastdeconv.conv2d_output_shape((4, 4), (3, 3), dilation=(1, 0))


@pytest.mark.parametrize("masked", ["x", "weight", "bias", "layer x", "layer weight", "out"])
def test_masked_arrays_are_refused_with_the_fix(masked):
    """A masked element would be computed with the value hidden under the mask (a masked 1e30 in the
    result): refused, naming np.ma.filled."""
    x, w, b = np.ones((1, 3, 3, 2)), np.ones((2, 3, 3, 2)), np.ones(2)
    x[0, 1, 1, 0] = w[0, 1, 1, 0] = b[0] = 1e30
    mask = lambda a: np.ma.masked_array(a, mask=a == 1e30)   # noqa: E731
    out = np.ma.masked_array(np.empty((1, 5, 5, 2)))
    calls = {
        "x": lambda: fastdeconv.conv_transpose2d(mask(x), w, b),
        "weight": lambda: fastdeconv.conv_transpose2d(x, mask(w), b),
        "bias": lambda: fastdeconv.conv2d(x, w, mask(b), padding=1),
        "layer x": lambda: fastdeconv.ConvTranspose2d(w, b)(mask(x)),
        "layer weight": lambda: fastdeconv.Conv2d(mask(w), b),
        "out": lambda: fastdeconv.conv_transpose2d(x, w, b, out=out),
    }
    error = ValueError if masked == "out" else TypeError
    with pytest.raises(error, match="np.ma.filled" if masked != "out" else "masked"):
        calls[masked]()

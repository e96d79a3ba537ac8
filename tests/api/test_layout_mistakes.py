"""Layout mistakes that would otherwise compute another layer, or fail with a misleading error:
torch's positional order, channels-first input, weights in torch's or TF's layout, a forgotten
``groups``, torch's layer constructors. Each error names the mistake and the fix, and the fix it
names gives torch's result."""

import pickle
import warnings

import numpy as np
import pytest

import fastdeconv
from fastdeconv import reference as ref

RNG = np.random.default_rng(7)


def _randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


X = _randn(2, 5, 6, 16)                  # NHWC: H=5, W=6, C=16
W_T = _randn(16, 4, 4, 8)                # conv_transpose2d: (C_in, kH, kW, C_out/g)
W_C = _randn(32, 3, 3, 16)               # conv2d: (C_out, kH, kW, C_in/g)


@pytest.mark.parametrize("call", [
    lambda: fastdeconv.conv_transpose2d(X, W_T, None, 2, 1, 1, 1, 1),   # torch: (..., output_padding, groups, dilation)
    lambda: fastdeconv.conv2d(X, W_C, None, 1, 1, 1, 1),
    lambda: fastdeconv.reference.conv_transpose2d(X, W_T, None, 2, 1, 1),
    lambda: fastdeconv.ConvTranspose2d(W_T, None, 2, 1, 1),
    lambda: fastdeconv.Conv2d(W_C, None, 1, 1, 2),
], ids=["function-t", "function-c", "reference", "layer-t", "layer-c"])
def test_output_padding_dilation_and_groups_are_keyword_only(call):
    with pytest.raises(TypeError, match="positional argument"):
        call()


def test_stride_and_padding_stay_positional():
    got = fastdeconv.conv_transpose2d(X, W_T, None, 2, 1, output_padding=1)
    np.testing.assert_allclose(got, ref.conv_transpose2d(X, W_T, stride=2, padding=1, output_padding=1), atol=1e-4)


@pytest.mark.parametrize("op", ["t", "c"])
@pytest.mark.parametrize("batched", [True, False])
def test_channels_first_input_is_named_with_its_transpose(op, batched):
    x = X if batched else X[0]
    wrong = np.moveaxis(x, -1, -3)   # (N, C, H, W) / (C, H, W)
    fn, w = (fastdeconv.conv_transpose2d, W_T) if op == "t" else (fastdeconv.conv2d, W_C)
    fix = "x.transpose(0, 2, 3, 1)" if batched else "x.transpose(1, 2, 0)"
    with pytest.raises(ValueError, match=r"x looks channels-first") as error:
        fn(wrong, w)
    assert fix in str(error.value)
    np.testing.assert_array_equal(eval(fix, {"x": wrong}), x)   # the fix it names undoes the mistake


def test_torch_conv2d_weight_is_named():
    with pytest.raises(ValueError, match=r"weight looks like torch's Conv2d layout.*weight\.transpose\(0, 2, 3, 1\)"):
        fastdeconv.conv2d(X, W_C.transpose(0, 3, 1, 2))


def test_channels_first_input_and_torch_weight_together_are_both_named():
    with pytest.raises(ValueError, match=r"x looks channels-first.* and weight looks like torch's Conv2d layout"):
        fastdeconv.conv2d(X.transpose(0, 3, 1, 2), W_C.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("op", ["t", "c"])
def test_tensorflow_filters_are_named(op):
    if op == "t":   # conv2d_transpose filter (kH, kW, C_out, C_in)
        call, match = (lambda: fastdeconv.conv_transpose2d(X, W_T.transpose(1, 2, 3, 0))), "TF's conv2d_transpose"
    else:           # HWIO (kH, kW, C_in, C_out)
        call, match = (lambda: fastdeconv.conv2d(X, W_C.transpose(1, 2, 3, 0))), "TF's HWIO"
    with pytest.raises(ValueError, match=match + r".*weight\.transpose\(3, 0, 1, 2\)"):
        call()


def test_torch_transposed_weight_with_bias_is_blamed_on_the_weight():
    with pytest.raises(ValueError, match=r"^bias must have shape.*weight looks like torch's ConvTranspose2d layout"):
        fastdeconv.conv_transpose2d(X, W_T.transpose(0, 3, 1, 2), _randn(8))
    with pytest.raises(ValueError, match=r"weight looks like torch's ConvTranspose2d layout"):
        fastdeconv.ConvTranspose2d(W_T.transpose(0, 3, 1, 2), _randn(8))


def test_torch_transposed_weight_without_bias_warns_once_per_layer():
    torch_layout = _randn(16, 32, 4, 4)   # (C_in, C_out/g, kH, kW): reads as a 32x4 kernel with 4 outputs
    with pytest.warns(fastdeconv.LayoutWarning, match=r"weight\.transpose\(0, 2, 3, 1\)") as record:
        fastdeconv.conv_transpose2d(X, torch_layout, stride=2)
    assert record[0].filename == __file__   # points at the caller's line, not into the package
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        layer = fastdeconv.ConvTranspose2d(torch_layout)
        layer(X)
        layer(X[:1, :3])   # another shape: no second warning from the same layer
    assert [w.category for w in record] == [fastdeconv.LayoutWarning]


@pytest.mark.parametrize("shape", [(16, 4, 4, 8), (16, 3, 3, 3), (16, 3, 2, 2), (16, 7, 1, 1), (16, 6, 3, 3),
                                   (16, 1, 9, 9)])
def test_ordinary_transposed_weights_do_not_warn(shape):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fastdeconv.conv_transpose2d(X, _randn(*shape))


def test_a_forgotten_groups_is_named():
    with pytest.raises(ValueError, match=r"groups=4 makes the shapes agree.*did you forget groups="):
        fastdeconv.conv2d(X, _randn(32, 3, 3, 4))                       # C_in/g = 4: groups=4
    with pytest.raises(ValueError, match=r"^bias must have shape.*groups=4 makes the shapes agree"):
        fastdeconv.conv_transpose2d(X, _randn(16, 3, 3, 2), _randn(8))  # C_out = 8 = 4 · 2


@pytest.mark.parametrize("layer, args, kwargs", [
    (fastdeconv.ConvTranspose2d, (16, 32, 4), {"stride": 2}),
    (fastdeconv.ConvTranspose2d, (16, 32, 4, 2, 1), {}),
    (fastdeconv.Conv2d, (16, 32, 3), {}),
    (fastdeconv.Conv2d, (np.int64(16), 32, 3), {"padding": 1}),
    (fastdeconv.Conv2d, (), {"weight": 16, "bias": None}),
])
def test_torch_style_layer_constructors_say_they_take_weights(layer, args, kwargs):
    with pytest.raises(TypeError, match=r"take trained weights, not channel counts as torch\.nn\.") as error:
        layer(*args, **kwargs)
    assert "transpose(0, 2, 3, 1)" in str(error.value)


def test_layers_still_pickle_and_copy():
    layer = fastdeconv.ConvTranspose2d(W_T, _randn(8), 2, 1, output_padding=1, groups=1)
    again = pickle.loads(pickle.dumps(layer))
    np.testing.assert_array_equal(again(X), layer(X))


def test_the_named_fixes_give_torchs_results():
    torch = pytest.importorskip("torch")
    x_nchw = torch.from_numpy(X.transpose(0, 3, 1, 2).copy())
    deconv = torch.nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1, output_padding=1, groups=2, dilation=1).double()
    conv = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=2, dilation=2).double()
    with torch.no_grad():
        expected_t = deconv(x_nchw.double()).numpy().transpose(0, 2, 3, 1)
        expected_c = conv(x_nchw.double()).numpy().transpose(0, 2, 3, 1)
    w_t, b_t = deconv.weight.detach().numpy(), deconv.bias.detach().numpy()
    w_c, b_c = conv.weight.detach().numpy(), conv.bias.detach().numpy()
    # torch's positional order, translated by keyword as the README says
    got_t = fastdeconv.conv_transpose2d(X.astype(np.float64), w_t.transpose(0, 2, 3, 1), b_t, 2, 1,
                                        output_padding=1, groups=2, dilation=1)
    got_c = fastdeconv.conv2d(X.astype(np.float64), w_c.transpose(0, 2, 3, 1), b_c, 2, 1, groups=2, dilation=2)
    np.testing.assert_allclose(got_t, expected_t, atol=1e-10)
    np.testing.assert_allclose(got_c, expected_c, atol=1e-10)

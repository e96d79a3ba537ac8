"""fastdeconv.weights: framework layouts, BatchNorm folding, MPSCNN parameters and .dat files."""

from __future__ import annotations

import numpy as np
import pytest

import fastdeconv
from fastdeconv import weights

RNG = np.random.default_rng(1234)


def _nchw_to_nhwc(array):
    return np.ascontiguousarray(np.asarray(array).transpose(0, 2, 3, 1))


# ---------------------------------------------------------------------------------------- layouts

@pytest.mark.parametrize("transposed", [True, False])
def test_torch_and_tf_round_trips(transposed):
    w = RNG.standard_normal((6, 2, 3, 5))
    assert np.array_equal(weights.to_torch(weights.from_torch(w, transposed), transposed), w)
    assert np.array_equal(weights.to_tf(weights.from_tf(w, transposed), transposed), w)
    ours = weights.from_torch(w, transposed)
    assert ours.shape == (6, 3, 5, 2) and ours.flags.c_contiguous
    assert np.array_equal(weights.from_tf(weights.to_tf(ours, transposed), transposed), ours)
    assert weights.from_onnx is weights.from_torch and weights.from_mxnet is weights.from_torch


def test_from_tf_matches_from_torch_for_the_same_layer():
    torch_transposed = RNG.standard_normal((4, 3, 2, 5))            # (C_in, C_out, kH, kW)
    tf_transposed = torch_transposed.transpose(2, 3, 1, 0)          # (kH, kW, C_out, C_in)
    assert np.array_equal(weights.from_tf(tf_transposed, True), weights.from_torch(torch_transposed, True))
    torch_conv = RNG.standard_normal((6, 2, 3, 3))                  # (C_out, C_in/g, kH, kW)
    tf_conv = torch_conv.transpose(2, 3, 1, 0)                      # HWIO
    assert np.array_equal(weights.from_tf(tf_conv, False), weights.from_torch(torch_conv, False))


def test_layout_rejects_non_4d():
    with pytest.raises(ValueError, match=r"weight must be 4-D, got ndim=3 shape=\(2, 3, 4\)"):
        weights.from_torch(np.zeros((2, 3, 4)), True)


@pytest.mark.parametrize("groups", [1, 2])
def test_from_torch_against_torch_layers(groups):
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 4, 5, 6, dtype=torch.float64)
    deconv = torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=2, padding=1, output_padding=1, dilation=1,
                                      groups=groups).double()
    conv = torch.nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, dilation=2, groups=groups).double()
    with torch.no_grad():
        expected_t, expected_c = deconv(x).numpy(), conv(x).numpy()
    x_nhwc = _nchw_to_nhwc(x.numpy())
    got_t = fastdeconv.conv_transpose2d(x_nhwc, weights.from_torch(deconv.weight.detach().numpy(), True),
                                        deconv.bias.detach().numpy(), 2, 1, output_padding=1,
                                        dilation=1, groups=groups)
    got_c = fastdeconv.conv2d(x_nhwc, weights.from_torch(conv.weight.detach().numpy(), False),
                              conv.bias.detach().numpy(), 2, 1, dilation=2, groups=groups)
    np.testing.assert_allclose(got_t, _nchw_to_nhwc(expected_t), atol=1e-12)
    np.testing.assert_allclose(got_c, _nchw_to_nhwc(expected_c), atol=1e-12)


# ---------------------------------------------------------------------------------------- BatchNorm

@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("groups, with_bias, eps", [(1, True, 1e-5), (2, False, 1e-3), (3, True, 1e-3)])
def test_fold_batchnorm_against_torch_eval(transposed, groups, with_bias, eps):
    torch = pytest.importorskip("torch")
    cin, cout = 3 * groups, 2 * groups
    layer_type = torch.nn.ConvTranspose2d if transposed else torch.nn.Conv2d
    layer = layer_type(cin, cout, 3, stride=2, padding=1, groups=groups, bias=with_bias).double()
    bn = torch.nn.BatchNorm2d(cout, eps=eps).double()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.normal_()
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
    model = torch.nn.Sequential(layer, bn).eval()
    x = torch.randn(2, cin, 4, 5, dtype=torch.float64)
    with torch.no_grad():
        expected = _nchw_to_nhwc(model(x).numpy())
    weight, bias = weights.fold_batchnorm(
        weights.from_torch(layer.weight.detach().numpy(), transposed),
        layer.bias.detach().numpy() if with_bias else None,
        bn.weight.detach().numpy(), bn.bias.detach().numpy(), bn.running_mean.numpy(), bn.running_var.numpy(),
        eps, transposed=transposed, groups=groups)
    x_nhwc = _nchw_to_nhwc(x.numpy())
    if transposed:
        got = fastdeconv.conv_transpose2d(x_nhwc, weight, bias, 2, 1, groups=groups)
    else:
        got = fastdeconv.conv2d(x_nhwc, weight, bias, 2, 1, groups=groups)
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_fold_batchnorm_scales_the_documented_slices():
    """Transposed, groups=2, Cig=2, Cog=3: output channel g·Cog + o scales weight[g·Cig:(g+1)·Cig, :, :, o]."""
    weight = np.ones((4, 1, 1, 3))
    gamma = np.arange(1.0, 7.0)
    folded, bias = weights.fold_batchnorm(weight, None, gamma, np.zeros(6), np.zeros(6), np.ones(6), 0.0,
                                          transposed=True, groups=2)
    assert np.array_equal(folded[:2, 0, 0], np.tile([1.0, 2.0, 3.0], (2, 1)))
    assert np.array_equal(folded[2:, 0, 0], np.tile([4.0, 5.0, 6.0], (2, 1)))
    assert np.array_equal(bias, np.zeros(6))
    assert folded.dtype == np.float64


def test_fold_batchnorm_messages():
    with pytest.raises(ValueError, match=r"gamma must have shape \(C_out,\) = \(6,\).*got shape \(5,\)"):
        weights.fold_batchnorm(np.ones((4, 1, 1, 3)), None, np.ones(5), np.zeros(6), np.zeros(6), np.ones(6), 1e-5,
                               transposed=True, groups=2)
    with pytest.raises(ValueError, match=r"var \+ eps must be > 0"):
        weights.fold_batchnorm(np.ones((2, 1, 1, 1)), None, np.ones(2), np.zeros(2), np.zeros(2), np.zeros(2), 0.0,
                               transposed=False)


# ---------------------------------------------------------------------------------------- MPSCNN

def test_to_mpscnn_transpose_rotates_and_relays():
    groups, cig, cog, kh, kw = 2, 3, 4, 2, 3
    w = RNG.standard_normal((groups * cig, kh, kw, cog))
    mps = weights.to_mpscnn_transpose(w, groups)
    assert mps.shape == (groups * cog, kh, kw, cig) and mps.dtype == np.float32 and mps.flags.c_contiguous
    for g, o, ky, kx, i in [(0, 0, 0, 0, 0), (1, 2, 1, 0, 2), (1, 3, 0, 2, 1)]:
        assert mps[g * cog + o, ky, kx, i] == np.float32(w[g * cig + i, kh - 1 - ky, kw - 1 - kx, o])
    with pytest.raises(ValueError, match="C_in=6 .* not divisible by groups=4"):
        weights.to_mpscnn_transpose(w, 4)


def test_mpscnn_transpose_params_values():
    # k=4, s=2, p=1 (DCGAN): kd=4, kernelOffset = 2 - 3 + 1 = 0, destination 2·H.
    p = weights.mpscnn_transpose_params((5, 7), 4, stride=2, padding=1)
    assert (p.kernel_offset_y, p.kernel_offset_x, p.destination_height, p.destination_width) == (0, 0, 10, 14)
    assert (p.offset_x, p.offset_y, p.edge_mode) == (0, 0, "zero")
    # asymmetric padding, dilation, output_padding: kd = 2·(3-1)+1 = 5 -> kernelOffset = 2 - 4 + pad_begin.
    p = weights.mpscnn_transpose_params((8, 8), (3, 2), stride=(2, 3), padding=((1, 3), (0, 2)),
                                        output_padding=(1, 2), dilation=(2, 1))
    assert (p.kernel_offset_y, p.kernel_offset_x) == (2 - 4 + 1, 1 - 1 + 0)
    assert (p.destination_height, p.destination_width) == fastdeconv.conv_transpose2d_output_shape(
        (8, 8), (3, 2), (2, 3), ((1, 3), (0, 2)), (1, 2), (2, 1))
    assert (p.stride_y, p.stride_x, p.dilation_y, p.dilation_x, p.kernel_height, p.kernel_width) == (2, 3, 2, 1, 3, 2)
    # output_size and 'same' go through fastdeconv._params
    assert weights.mpscnn_transpose_params((4, 4), 3, 2, 1, output_size=(8, 8)).destination_height == 8
    assert weights.mpscnn_transpose_params((4, 5), 3, 2, "same").destination_width == 10


def test_mpscnn_transpose_params_errors():
    with pytest.raises(weights.MPSCNNUnsupportedError,
                       match=r"groups=2 with C_in=8, C_out=4: C_in/groups=4 and C_out/groups=2 must both be multiples "
                             r"of 4.*number of channels in each group must be multiple of 4"):
        weights.mpscnn_transpose_params((4, 4), 3, 2, groups=2, in_channels=8, out_channels=4)
    with pytest.raises(ValueError, match="in_channels and out_channels are required when groups > 1"):
        weights.mpscnn_transpose_params((4, 4), 3, 2, groups=2)
    with pytest.raises(ValueError, match=r"output_padding must be smaller than max\(stride, dilation\)"):
        weights.mpscnn_transpose_params((4, 4), 3, 2, output_padding=2)
    # groups = 1 has no channel rule; 8/8 per group is fine
    weights.mpscnn_transpose_params((4, 4), 3, 2, groups=2, in_channels=16, out_channels=8)
    weights.mpscnn_transpose_params((4, 4), 3, 2, in_channels=3, out_channels=5)


def test_mpscnn_conv_params():
    p = weights.mpscnn_conv_params((7, 6), (3, 2), 2, ((1, 0), (2, 1)), (2, 1), 2, in_channels=8, out_channels=8)
    assert (p.offset_y, p.offset_x) == ((5 >> 1) - 1, (2 >> 1) - 2)
    assert (p.destination_height, p.destination_width) == fastdeconv.conv2d_output_shape(
        (7, 6), (3, 2), 2, ((1, 0), (2, 1)), (2, 1))
    assert weights.mpscnn_conv_params((5, 5), 3, groups=6, in_channels=6, out_channels=6).depthwise
    with pytest.raises(weights.MPSCNNUnsupportedError, match="C_in/groups=2"):
        weights.mpscnn_conv_params((5, 5), 3, groups=3, in_channels=6, out_channels=12)


# ---------------------------------------------------------------------------------------- .dat files

def test_save_and_load_mps(tmp_path):
    w = RNG.standard_normal((4, 3, 3, 2))
    b = RNG.standard_normal(4)
    written = weights.save_mps(tmp_path, "layer", w, b)
    assert [p.name for p in written] == ["layer_weight.dat", "layer_bias.dat"]
    raw = (tmp_path / "layer_weight.dat").read_bytes()
    assert raw == w.astype("<f4").tobytes() and len(raw) == 4 * w.size
    got_w, got_b = weights.load_mps(tmp_path, "layer", w.shape)
    assert np.array_equal(got_w, w.astype(np.float32)) and np.array_equal(got_b, b.astype(np.float32))
    weights.save_mps(tmp_path, "nobias", w)
    assert weights.load_mps(tmp_path, "nobias", w.shape)[1] is None
    with pytest.raises(ValueError, match=r"layer_weight.dat has 288 bytes, but weight_shape=\(4, 3, 3, 3\) needs 432"):
        weights.load_mps(tmp_path, "layer", (4, 3, 3, 3))

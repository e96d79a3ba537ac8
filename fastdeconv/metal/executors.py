"""numpy executors: run a Metal descriptor under the documented semantics of what it calls.

These never call fastdeconv's own convolutions; each is written from the definition of the Metal
operation the descriptor drives, so comparing their result with backend="cpu" checks the
*descriptor* (layouts, Apple descriptor fields, outputShape, offsets, kernel arguments):

* MPSGraph ``convolution2D``: cross-correlation, explicit paddings, NHWC data, OIHW weights,
  output ``⌊(in + pad_begin + pad_end − kd)/s⌋ + 1`` per axis (:func:`graph_convolution2d`).
* MPSGraph ``convolutionTranspose2D``: by Apple's header "exactly the same as convolution gradient
  with respect to input image": the adjoint of the forward convolution of an ``outputShape`` input
  with the same descriptor, evaluated by transposing the forward convolution's gather
  (a scatter-add through the very same index arrays, :func:`graph_convolution_transpose2d`).
* MPSCNNConvolutionTranspose / MPSCNNConvolution: :func:`fastdeconv.metal.mpscnn_model.convolution_transpose`
  / :func:`fastdeconv.metal.mpscnn_model.convolution` (models of Apple's documented zero insertion and
  un-rotated, centred correlation), fed with parameters rebuilt from the descriptor's fields only.
* The direct kernel of ``conv_transpose.metal``: :class:`MslTranscription`, the MSL index arithmetic
  line by line, vectorised over the thread index ``gid``.

The module also exposes the engine interface of :mod:`fastdeconv.metal.pyobjc_layer`
(``resident``, ``GraphRunner``, ``CnnRunner``), so the backend can run end to end on numpy
(:func:`fastdeconv.metal.engine.simulated`).
"""

from __future__ import annotations

import numpy as np

from .._params import forward_output_size
from .descriptors import (
    DTYPE_OF_DATA_TYPE,
    DTYPE_OF_IMAGE_FORMAT,
    EDGE_MODES,
    GRAPH_LAYOUT_NHWC,
    GRAPH_LAYOUT_OIHW,
    CnnDescriptor,
    CnnKernelDescriptor,
    DirectKernelDescriptor,
    GraphConvolutionDescriptor,
    GraphDescriptor,
    add_bias_after_readback,
)


# ------------------------------------------------------------------------------------------------
# MPSGraph
# ------------------------------------------------------------------------------------------------


def _taps(size_in, size_out, kernel, stride, dilation, pad_begin):
    """Forward convolution taps on one axis: ``index[o, k] = o·s − pad_begin + k·d`` and its validity
    ``0 <= index < size_in`` (outside, the zero padding is read)."""
    index = np.arange(size_out)[:, None] * stride - pad_begin + np.arange(kernel)[None, :] * dilation
    return index, (index >= 0) & (index < size_in)


def _check_weights(w: np.ndarray, desc: GraphConvolutionDescriptor, out_channels, in_channels):
    o, i_per_group = w.shape[:2]
    if desc.weights_layout != GRAPH_LAYOUT_OIHW or desc.data_layout != GRAPH_LAYOUT_NHWC:
        raise ValueError(f"this executor models dataLayout NHWC (1) / weightsLayout OIHW (2), got {desc}")
    if o != out_channels or i_per_group * desc.groups != in_channels or o % desc.groups:
        raise ValueError(f"OIHW weights {w.shape} do not match {in_channels} → {out_channels} channels, "
                         f"groups={desc.groups}")


def _gather(x, desc: GraphConvolutionDescriptor, kernel_hw, out_hw):
    """cols[n, oy, ox, ky, kx, c] = x[n, iy(oy, ky), ix(ox, kx), c], 0 where the index is in the padding."""
    (kh, kw), (ho, wo) = kernel_hw, out_hw
    rows, row_ok = _taps(x.shape[1], ho, kh, desc.stride_in_y, desc.dilation_rate_in_y, desc.padding_top)
    cols, col_ok = _taps(x.shape[2], wo, kw, desc.stride_in_x, desc.dilation_rate_in_x, desc.padding_left)
    ok = row_ok[:, None, :, None] & col_ok[None, :, None, :]                         # (ho, wo, kh, kw)
    r = np.clip(rows, 0, x.shape[1] - 1)[:, None, :, None]
    c = np.clip(cols, 0, x.shape[2] - 1)[None, :, None, :]
    return r, c, ok


def graph_convolution2d(x: np.ndarray, w: np.ndarray, desc: GraphConvolutionDescriptor) -> np.ndarray:
    """MPSGraph convolution2D (NHWC, OIHW, explicit paddings): ``y[n, oy, ox, g·Og + o] =
    Σ x[n, oy·sy − top + ky·dy, ox·sx − left + kx·dx, g·Ig + i] · w[g·Og + o, i, ky, kx]``."""
    n, h, wd, cin = x.shape
    cout, ig, kh, kw = w.shape
    _check_weights(w, desc, cout, cin)
    ho = forward_output_size(h, kh, desc.stride_in_y, desc.dilation_rate_in_y, desc.padding_top, desc.padding_bottom)
    wo = forward_output_size(wd, kw, desc.stride_in_x, desc.dilation_rate_in_x, desc.padding_left, desc.padding_right)
    r, c, ok = _gather(x, desc, (kh, kw), (ho, wo))
    cols = np.where(ok[None, ..., None], x[:, r, c, :], 0)                           # (n, ho, wo, kh, kw, cin)
    g = desc.groups
    cols = cols.reshape(n, ho, wo, kh, kw, g, ig)
    wg = w.reshape(g, cout // g, ig, kh, kw)
    return np.einsum("nyxhwgi,goihw->nyxgo", cols, wg).reshape(n, ho, wo, cout)


def graph_convolution_transpose2d(src: np.ndarray, w: np.ndarray, output_shape,
                                  desc: GraphConvolutionDescriptor) -> np.ndarray:
    """MPSGraph convolutionTranspose2D = the data gradient of :func:`graph_convolution2d`.

    The forward convolution takes an ``output_shape`` (N, H_out, W_out, C) input to the source's
    shape (that relation is checked); its data gradient for an incoming gradient ``src`` is
    ``dx = Σ_{oy, ox, ky, kx, o} src[n, oy, ox, g·O_g + o] · w[g·O_g + o, i, ky, kx]`` accumulated into
    ``x[n, iy(oy, ky), ix(ox, kx), g·I_g + i]`` over the taps that are inside the image — the gather
    of the forward convolution, transposed.
    """
    n, h, wd, cin = src.shape
    o_total, ig, kh, kw = w.shape
    on, ho, wo, cout = output_shape
    _check_weights(w, desc, cin, cout)
    forward = (forward_output_size(ho, kh, desc.stride_in_y, desc.dilation_rate_in_y, desc.padding_top, desc.padding_bottom),
               forward_output_size(wo, kw, desc.stride_in_x, desc.dilation_rate_in_x, desc.padding_left,
                             desc.padding_right))
    if on != n or forward != (h, wd):
        raise ValueError(f"outputShape {tuple(output_shape)} with {desc} is the input of a forward convolution "
                         f"producing {forward}, not the source {(h, wd)} (batch {n})")
    g = desc.groups
    r, c, ok = _gather(np.empty((1, ho, wo, 1)), desc, (kh, kw), (h, wd))
    # dcols[n, oy, ox, ky, kx, g, i] = Σ_o src[n, oy, ox, g, o] · w[g, o, i, ky, kx]
    dcols = np.einsum("nyxgo,goihw->nyxhwgi", src.reshape(n, h, wd, g, o_total // g), w.reshape(g, -1, ig, kh, kw))
    dcols = np.where(ok[None, ..., None, None], dcols, 0).reshape(n, h, wd, kh, kw, cout)
    y = np.zeros((n, ho, wo, cout), dtype=dcols.dtype)
    r, c = np.broadcast_to(r, ok.shape), np.broadcast_to(c, ok.shape)
    for b in range(n):
        np.add.at(y[b], (r, c), dcols[b])
    return y


def run_graph(descriptor: GraphDescriptor, source: np.ndarray, weights: np.ndarray,
              bias: np.ndarray | None) -> np.ndarray:
    """Execute a :class:`GraphDescriptor` node by node, as the PyObjC layer builds the graph."""
    io = DTYPE_OF_DATA_TYPE[descriptor.data_type]
    compute = DTYPE_OF_DATA_TYPE[descriptor.compute_data_type]
    for name, array, shape in (("source", source, descriptor.source_shape),
                               ("weights", weights, descriptor.weights_shape),
                               ("bias", bias, descriptor.bias_shape)):
        if (array is None) != (shape is None) or (array is not None and (array.shape != shape or array.dtype != io)):
            raise ValueError(f"{name} placeholder expects {shape} {io}, got "
                             f"{None if array is None else (array.shape, array.dtype)}")
    if descriptor.op is None:
        y = np.zeros(descriptor.result_shape, dtype=compute)
    else:
        x, w = source.astype(compute), weights.astype(compute)              # castTensor:toType:name:
        if descriptor.op == "convolution2D":
            y = graph_convolution2d(x, w, descriptor.convolution)
        elif descriptor.op == "convolutionTranspose2D":
            y = graph_convolution_transpose2d(x, w, descriptor.output_shape, descriptor.convolution)
        else:
            raise ValueError(f"unknown MPSGraph op {descriptor.op!r}")
        y = y.astype(compute)
        th, tw = descriptor.tail_padding
        if th or tw:                                                         # padTensor, constant 0
            y = np.pad(y, ((0, 0), (0, th), (0, tw), (0, 0)))
    if bias is not None:
        y = y + bias.astype(compute)                                         # additionWithPrimaryTensor
    if y.shape != descriptor.result_shape:
        raise ValueError(f"the graph produces {y.shape}, the descriptor expects {descriptor.result_shape}")
    return y.astype(io)                                                      # castTensor back


# ------------------------------------------------------------------------------------------------
# MPSCNN
# ------------------------------------------------------------------------------------------------


def model_params(stage: CnnKernelDescriptor):
    """The stage's settings as fastdeconv.weights' parameter dataclass, built from the descriptor's
    fields only (exactly what the PyObjC layer sends), for :mod:`fastdeconv.metal.mpscnn_model`."""
    from .. import weights as weights_module  # noqa: PLC0415

    d = stage.convolution
    edge_mode = {code: name for name, code in EDGE_MODES.items()}[stage.edge_mode]
    common = dict(
        offset_x=stage.offset_x, offset_y=stage.offset_y, destination_height=stage.destination.height,
        destination_width=stage.destination.width, edge_mode=edge_mode,
        stride_x=d.stride_in_pixels_x, stride_y=d.stride_in_pixels_y, dilation_x=d.dilation_rate_x,
        dilation_y=d.dilation_rate_y, kernel_width=d.kernel_width, kernel_height=d.kernel_height,
        source_height=stage.source.height, source_width=stage.source.width)
    depthwise = d.descriptor_class == "MPSCNNDepthWiseConvolutionDescriptor"
    # A depthwise descriptor has groups 1 but connects channel c to channel c only: groups = C_in.
    groups = d.input_feature_channels if depthwise else d.groups
    if stage.kernel_class == "MPSCNNConvolutionTranspose":
        return weights_module.MPSCNNTransposeParams(
            kernel_offset_x=stage.kernel_offset_x, kernel_offset_y=stage.kernel_offset_y, groups=groups, **common)
    if stage.kernel_class == "MPSCNNConvolution":
        return weights_module.MPSCNNConvolutionParams(groups=groups, depthwise=depthwise, **common)
    raise ValueError(f"unknown MPSCNN kernel class {stage.kernel_class!r}")


def _run_cnn_kernel(stage: CnnKernelDescriptor, x: np.ndarray, weights: np.ndarray, bias) -> np.ndarray:
    """writeBytes into the source images' format, the kernel (fastdeconv.metal.mpscnn_model), readBytes."""
    from . import mpscnn_model  # noqa: PLC0415

    image_dtype = DTYPE_OF_IMAGE_FORMAT[stage.source.channel_format]
    if x.shape != (stage.batch, stage.source.height, stage.source.width, stage.source.feature_channels):
        raise ValueError(f"source images {x.shape} do not match {stage.source} × {stage.batch}")
    if weights.shape != stage.weights_shape or weights.dtype != np.float32 or (bias is not None) != stage.has_bias:
        raise ValueError(f"the data source's weights {weights.shape} {weights.dtype} / bias {bias is not None} do "
                         f"not match the descriptor {stage.weights_shape} float32 / {stage.has_bias}")
    model = (mpscnn_model.convolution_transpose if stage.kernel_class == "MPSCNNConvolutionTranspose"
             else mpscnn_model.convolution)
    y = np.asarray(model(x.astype(image_dtype), weights, model_params(stage)))
    expected = (stage.batch, stage.destination.height, stage.destination.width, stage.destination.feature_channels)
    if y.shape != expected:
        raise ValueError(f"{stage.kernel_class} produced {y.shape}, the destination images are {expected}")
    return add_bias_after_readback(y.astype(DTYPE_OF_IMAGE_FORMAT[stage.destination.channel_format]), bias)


class MslTranscription:
    """conv_transpose.metal, line for line, vectorised over the thread index ``gid``.

    C ``int`` semantics: ``/`` and ``%`` truncate toward zero (:func:`c_div`, :func:`c_rem`); every
    value fits in int32 (the descriptor guarantees it). ``float(v)`` loads widen to float32, ``fma`` is
    evaluated in float64 and rounded to float32 (one rounding, as fma), ``T(acc)`` rounds to the
    storage type. ``p`` is the ConvParams struct as a dict.
    """

    @staticmethod
    def c_div(a, b):
        return np.trunc(np.asarray(a) / b).astype(np.int64) if np.ndim(a) else int(a / b)

    @staticmethod
    def c_rem(a, b):
        return a - MslTranscription.c_div(a, b) * b

    @staticmethod
    def fma(a, b, c):
        return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)

    @classmethod
    def _decode(cls, p, gid):
        oc = cls.c_rem(gid, p["out_channels"])
        rest = cls.c_div(gid, p["out_channels"])
        ox = cls.c_rem(rest, p["out_w"])
        rest = cls.c_div(rest, p["out_w"])
        oy = cls.c_rem(rest, p["out_h"])
        n = cls.c_div(rest, p["out_h"])
        return oc, ox, oy, n

    @classmethod
    def conv_transpose2d_direct(cls, x, w, bias, y, p, gid):
        total = p["batch"] * p["out_h"] * p["out_w"] * p["out_channels"]
        gid = gid[gid < total]                                         # if ((int)gid >= total) return;
        oc, ox, oy, n = cls._decode(p, gid)
        cig = cls.c_div(p["in_channels"], p["groups"])
        cog = cls.c_div(p["out_channels"], p["groups"])
        g = cls.c_div(oc, cog)
        o = oc - g * cog
        w_step = p["kernel_h"] * p["kernel_w"] * cog
        acc = bias[oc].astype(np.float32)
        for ky in range(p["kernel_h"]):
            ty = oy + p["pad_top"] - ky * p["dilation_h"]
            live_y = ~((ty < 0) | (cls.c_rem(ty, p["stride_h"]) != 0))        # if (ty < 0 || ty % sh) continue;
            iy = cls.c_div(ty, p["stride_h"])
            live_y &= ~(iy >= p["in_h"])                                       # if (iy >= in_h) continue;
            for kx in range(p["kernel_w"]):
                tx = ox + p["pad_left"] - kx * p["dilation_w"]
                live = live_y & ~((tx < 0) | (cls.c_rem(tx, p["stride_w"]) != 0))
                ix = cls.c_div(tx, p["stride_w"])
                live &= ~(ix >= p["in_w"])
                x_base = ((n * p["in_h"] + iy) * p["in_w"] + ix) * p["in_channels"] + g * cig
                w_base = ((g * cig * p["kernel_h"] + ky) * p["kernel_w"] + kx) * cog + o
                for i in range(cig):
                    xi = np.where(live, x_base + i, 0)                         # only live threads load
                    wi = np.where(live, w_base + i * w_step, 0)
                    acc = np.where(live, cls.fma(x[xi].astype(np.float32), w[wi].astype(np.float32), acc), acc)
        y[gid] = acc.astype(y.dtype)                                           # y[gid] = T(acc);

    @classmethod
    def conv2d_direct(cls, x, w, bias, y, p, gid):
        total = p["batch"] * p["out_h"] * p["out_w"] * p["out_channels"]
        gid = gid[gid < total]
        oc, ox, oy, n = cls._decode(p, gid)
        cig = cls.c_div(p["in_channels"], p["groups"])
        cog = cls.c_div(p["out_channels"], p["groups"])
        g = cls.c_div(oc, cog)
        acc = bias[oc].astype(np.float32)
        for ky in range(p["kernel_h"]):
            iy = oy * p["stride_h"] - p["pad_top"] + ky * p["dilation_h"]
            live_y = ~((iy < 0) | (iy >= p["in_h"]))
            for kx in range(p["kernel_w"]):
                ix = ox * p["stride_w"] - p["pad_left"] + kx * p["dilation_w"]
                live = live_y & ~((ix < 0) | (ix >= p["in_w"]))
                x_base = ((n * p["in_h"] + iy) * p["in_w"] + ix) * p["in_channels"] + g * cig
                w_base = ((oc * p["kernel_h"] + ky) * p["kernel_w"] + kx) * cig
                for i in range(cig):
                    xi = np.where(live, x_base + i, 0)
                    wi = np.where(live, w_base + i, 0)
                    acc = np.where(live, cls.fma(x[xi].astype(np.float32), w[wi].astype(np.float32), acc), acc)
        y[gid] = acc.astype(y.dtype)


def run_direct(stage: DirectKernelDescriptor, x: np.ndarray, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Dispatch the transcribed kernel over ⌈threads / tg⌉·tg thread ids, on flat buffers."""
    dtype = np.dtype(stage.dtype)
    for name, array, shape in (("x", x, stage.x_shape), ("weight", weights, stage.weight_shape),
                               ("bias", bias, stage.bias_shape)):
        if array.shape != shape or array.dtype != dtype:
            raise ValueError(f"buffer {name} expects {shape} {dtype}, got {array.shape} {array.dtype}")
    y = np.full(int(np.prod(stage.y_shape)), np.nan, dtype=dtype)
    tg = stage.threads_per_threadgroup
    groups = -(-stage.threads // tg)
    gid = np.arange(groups * tg, dtype=np.int64)
    kind = stage.function.rsplit("_direct_", 1)[0]
    kernel = {"conv_transpose2d": MslTranscription.conv_transpose2d_direct,
              "conv2d": MslTranscription.conv2d_direct}[kind]
    kernel(x.ravel(), weights.ravel(), bias, y, stage.param_dict(), gid)
    return y.reshape(stage.y_shape)


def run_cnn(descriptor: CnnDescriptor, x: np.ndarray, weights: np.ndarray, bias) -> np.ndarray:
    """Execute a :class:`CnnDescriptor` (its single stage)."""
    stage = descriptor.stage
    if isinstance(stage, DirectKernelDescriptor):
        y = run_direct(stage, x, weights, bias)
    else:
        y = _run_cnn_kernel(stage, x, weights, bias)
    if y.shape != descriptor.result_shape:
        raise ValueError(f"the descriptor produces {y.shape}, expected {descriptor.result_shape}")
    return y


# ------------------------------------------------------------------------------------------------
# The engine interface shared with pyobjc_layer
# ------------------------------------------------------------------------------------------------


def resident(array: np.ndarray | None):
    """Data kept "on the device" across calls; here the array itself."""
    return None if array is None else np.ascontiguousarray(array)


class GraphRunner:
    """Same interface as pyobjc_layer.GraphRunner: ``run(source, weights, bias) -> ndarray``."""

    def __init__(self, descriptor: GraphDescriptor):
        self.descriptor = descriptor

    def run(self, source, weights, bias):
        return run_graph(self.descriptor, source, weights, bias)


class CnnRunner:
    """Same interface as pyobjc_layer.CnnRunner: weights bound at construction, ``run(x) -> ndarray``."""

    def __init__(self, descriptor: CnnDescriptor, weights: np.ndarray, bias):
        self.descriptor, self.weights, self.bias = descriptor, weights, bias

    def run(self, x):
        return run_cnn(self.descriptor, x, self.weights, self.bias)

"""backend="cpu": chooses an algorithm per layer and runs the C kernels.

The algorithms are the rows of the C table in src/algorithms/algorithms.c (one template file each,
see src/algorithms/algorithm.h); the compiled shim ``_cpu`` lists them, says whether one can run a
layer, packs the weights (:class:`_cpu.PackedWeights`, once per layer) and binds packed weights to
one input shape (:class:`_cpu.Runner`), which runs the kernel on threads. :func:`choose_algorithm` is
the one place that decides which algorithm a layer uses.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import _cpu
from .._cache import BoundedCache
from .._params import ConvGeometry
from .protocol import BackendStatus

# In table order; the kernels are src/algorithms/<transposed ? "deconv" : "conv">_<name>.template.c (a
# name is unique within its kind: both kinds have a "depthwise").
DECONV_ALGORITHMS = tuple(_cpu.algorithms(True))
CONV_ALGORITHMS = tuple(_cpu.algorithms(False))

# Results of this dtype are computed in this one (float16: accumulated in float32, rounded once).
_COMPUTE_DTYPE = {np.dtype(np.float16): np.dtype(np.float32), np.dtype(np.float32): np.dtype(np.float32),
                  np.dtype(np.float64): np.dtype(np.float64)}

#: Input shapes (at one thread count each) whose runners a packed layer keeps.
CACHE_SHAPES = 64


def algorithms(transposed: bool) -> tuple[str, ...]:
    return DECONV_ALGORITHMS if transposed else CONV_ALGORITHMS


def supports(algorithm: str, geometry: ConvGeometry) -> bool:
    """Whether an algorithm can run this layer (its template in src/algorithms/ says why not)."""
    return _unsupported(algorithm, geometry) is None


def _unsupported(algorithm: str, geometry: ConvGeometry) -> str | None:
    """Why an algorithm cannot run this layer, or None: its template's reason, unless the layer runs as
    its equivalent convolution (_RUN_AS_CONVOLUTION), which that kind's algorithm of the name runs."""
    reason = _cpu.unsupported(algorithm, geometry)
    if reason is None or algorithm not in _RUN_AS_CONVOLUTION or not _dilated_stride_one_transposed(geometry):
        return reason
    convolution = as_convolution(geometry)
    if convolution is None:
        return ("it runs a stride-1 dilated transposed convolution as the equivalent convolution, whose padding "
                "(kernel - 1)·dilation - padding (plus output_padding after) must not be negative")
    return _cpu.unsupported(algorithm, convolution)


# Transposed-convolution algorithms that run a stride-1 dilated layer, which their own kernels cannot, as its
# equivalent convolution (as_convolution) with the convolution algorithm of the same name: "winograd", whose
# convolution computes a dilation's phases in Winograd tiles (src/algorithms/conv_winograd.template.c).
_RUN_AS_CONVOLUTION = frozenset({"winograd"})


def _dilated_stride_one_transposed(geometry: ConvGeometry) -> bool:
    return geometry.transposed and geometry.stride == (1, 1) and geometry.dilation != (1, 1)


def as_convolution(geometry: ConvGeometry) -> ConvGeometry | None:
    """The convolution equal to a stride-1 dilated transposed convolution, else None.

    With stride 1, y[o] = sum_k x[o + p - k·d] · w[k] (per axis) is the correlation of the same input with
    the flipped weight (convolution_weight) and padding (kernel - 1)·d - p before, (kernel - 1)·d - p +
    output_padding after: the same output, term for term. None also where that padding would be negative
    (a layer that crops more than its kernel spans)."""
    if not _dilated_stride_one_transposed(geometry):
        return None
    pad = tuple(((k - 1) * d - before, (k - 1) * d - after + extra) for k, d, (before, after), extra
                in zip(geometry.kernel_hw, geometry.dilation, geometry.pad, geometry.output_padding))
    if min(min(axis) for axis in pad) < 0:
        return None
    return dataclasses.replace(geometry, transposed=False, pad=pad, output_padding=(0, 0))


def convolution_weight(weight: np.ndarray, geometry: ConvGeometry) -> np.ndarray:
    """A transposed convolution's (C_in, kH, kW, C_out/groups) weight as the (C_out, kH, kW, C_in/groups)
    weight of as_convolution(geometry): w[g·Cog + o, u, v, c] = weight[g·Cig + c, kH - 1 - u, kW - 1 - v, o]."""
    (kh, kw), groups = geometry.kernel_hw, geometry.groups
    blocks = weight.reshape(groups, geometry.in_per_group, kh, kw, geometry.out_per_group)[:, :, ::-1, ::-1, :]
    return np.ascontiguousarray(blocks.transpose(0, 4, 2, 3, 1).reshape(geometry.out_channels, kh, kw,
                                                                         geometry.in_per_group))


def choose_algorithm(geometry: ConvGeometry) -> str:
    """The algorithm for a layer (the measurements behind each rule: asv_benches/NOTES.md).

    A convolution with one input channel per group (depthwise, with any channel multiplier) uses
    "depthwise": as an im2col GEMM it would have K = kH·kW and N = C_out/groups, far too small for
    the GEMM's tiles. One of several groups with 2-12 input channels each and at least as many, but at
    most 16, outputs (ResNeXt's and RegNet's grouped 3×3) uses "grouped", the same direct kernel over
    channels across groups: merged into GEMMs (group_merge) such layers multiply block-diagonal zeros,
    1.2-4.4× slower; with 16 inputs per group or more than 16 outputs the GEMM is the faster again, and
    with fewer outputs than inputs the kernel's vectors run part-filled. One whose kernel sides are 2 or
    3 times its strides (k3 s1, k4 s2; dilated only with stride 1) with enough channels
    (sH·sW·C_in/groups >= 32, C_out/groups >= 16), at most 16 MiB of weights (as for transposed
    convolutions, below) and, below 64 outputs per group, not many more in than out (sH·sW·C_in <= 8·C_out:
    with 16-48 outputs from 400-3000 channels its transformed tiles, not the GEMMs, set the pace; from 64
    outputs it was as fast or faster whatever the inputs) uses "winograd": its stride
    phases as channels (a stride-1 correlation of 2 or 3 taps per side), computed in Winograd tiles
    (images of fewer than 64 output pixels run its im2col kernel, and so do calls of fewer than 512 outputs
    of a strided layer with at least 2 Mi weight elements, where reading the 2.25x larger transformed
    weights costs more than the multiplies saved); a dilated one, its dilation phases
    (every dH-th row and dW-th column of the output: stride-1 correlations of adjacent taps) in the same
    tiles, where each phase has at least 144 outputs (a k3 d2 layer on a 32×32 map; fewer run its im2col
    kernel). Every other convolution uses "im2col". For a transposed convolution:

    * one input channel per group: "depthwise". A GEMM would have K = taps and N = C_out/groups; the
      direct kernel is bound by memory.
    * one group of few channels on both sides (C_in <= 16 and C_in · C_out <= 32, or <= 16 with a
      kernel equal to the stride): "planar", a direct kernel vectorised over runs of output pixels (the
      input rows transposed to channels by columns): one broadcast weight times a vector of pixels
      per tap and channel. The phase GEMM's N = C_out/groups would fill a fraction of a SIMD
      register, and col2im's column buffer and scatter-add are kH·kW times the output. With more
      channels its reads of the transposed rows (per output channel, from L2) cost more than col2im's
      GEMM, which then is efficient enough. Where the ISA has 32 vector registers (AVX-512, NEON:
      _cpu.planar_block_outputs() is 8) the kernel computes 8 outputs over each load of the input
      vectors, and "planar" also takes one group with up to 24 outputs (12 with stride 1 on both axes)
      whenever the kernel differs from the stride: from C_in <= 16, or from C_in <= 128 to 8 outputs or
      more with a stride of 2 or more, a kernel of several rows and no "winograd" (_planar_blocks_pay):
      LinkNet's and ENet's 16 -> 16 k3 s2 decoders ran 1.2-1.5x faster than "phase" and "col2im",
      ERFNet's 64 -> 16 1.2x, 1-D ones up to 2x; and 1-D kernels (1 x k, stride 1 x s, s >= 2) to up to 12
      outputs from up to 64 inputs, or to 8-12 from up to 128 (Demucs' and Conv-TasNet's last layers,
      1.1-1.4x faster than "col2im"). With every weight finite (the usual case) its border
      pixels run in the vectors too. Several groups of few channels (_planar_groups_pay): up to 8 outputs
      from up to 32 inputs per group, and with 32 registers up to 16 outputs from up to 16 inputs per group
      (128 outputs in all) where "winograd" does not pay; each group run as it is, never merged
      (group_merge): 1.15-1.9x faster than "winograd" on the merged groups at 1-16 threads
      (the field's grouped01, grouped03 and grouped07: 32 groups of 4 -> 4, 3.7 ms against 5.6; but
      grouped07 at 1 thread on the 16-core Xeon, 1.12x slower).
    * few outputs per group (_col2im_pays): "col2im". The phase GEMMs' N = C_out/groups would fill
      a fraction of a SIMD register (or one vector, in a tile narrower than the wide ones); col2im's
      N = kH·kW·C_out/groups keeps the GEMM efficient, and its scatter-add costs about 1/C_in of its
      GEMM. That is C_out/groups < 8 with at least 16 columns, or with a kernel equal to the stride
      (k2 s2 heads: no two taps meet, every output has one term: the GEMM adds the bias and the scatter
      is a copy, which reads the input once where "planar" transposes it); and for one group:
      C_out < 64 with a kernel equal to the stride; with any other undilated kernel, C_out < 16, or
      C_out < 32 from C_in > 24·C_out (Keypoint R-CNN's 512 -> 17 k4 s2: 1.6-1.8x faster than
      "winograd" at 1, 4 and 16 threads, its batch of RoIs split by images). Merged groups
      (group_merge) and groups of 8 or more outputs keep the phase GEMMs: col2im ran such grouped
      layers 1.1-1.6x slower. Where taps overlap, col2im's bands of output rows recompute the GEMM
      rows their neighbours share, thin at many threads: with 16-31 outputs it was 1.2-1.6x faster
      than "winograd" at 1 and 2 threads from 64 inputs, but 1.3-2.2x slower at 16; a dilated layer's
      taps reach further (dilation·(kernel - 1) rows): 64 -> 12 k3 d2 ran 2.3x slower than "phase" at 16.
    * a stride phase with at least 2 taps along both axes (k4 s2, k3 s1, k3 s2; dilated only with
      stride 1: as its equivalent convolution, flipped weight, whose dilation phases the convolution's
      "winograd" computes, unless a weight is Inf or NaN), enough channels (C_in/groups >= 32, or
      exactly 16 in each of several groups, merged or not; and C_out/groups >= 16, or >= 32 where the
      phases have unequal taps: k3 s2, k5 s2) and at most 16 MiB of
      float32 weights (its packed form is 2.8-5x the weights, which must stay in the weight cache):
      "winograd", the phase decomposition with 1.78x (F(2,2)) to 2.25x (F(3,2), F(2,3)) fewer
      multiplies per output on those phases; with fewer channels its tile transforms cost more than
      that saves. Its error stays within the direct sum's. A call with fewer than 64 input pixels
      (N·H·W: its tiles would be mostly padding), or fewer than 512 for a strided layer of several
      groups (each group's tiles transformed on their own, with few channels), runs the phase kernel,
      whose packed weights "winograd" holds too.
    * everything else: "phase". Stride-phase decomposition multiplies no inserted zeros and writes
      every output once (no column buffer, no zero fill, no scatter-add).
    * a choice that cannot run the layer (huge kernels or strides, see :func:`supports`): "col2im".

    The choice depends on the weights and parameters only, never on the input's size: a layer packs
    its weights once, for every input. Where the size matters, the algorithm decides per call.
    """
    if not geometry.transposed:
        if geometry.in_per_group == 1:
            choice = "depthwise"
        elif (geometry.groups > 1 and 2 <= geometry.in_per_group <= _GROUPED_MAX_IN_PER_GROUP
              and geometry.in_per_group <= geometry.out_per_group <= _GROUPED_MAX_OUT_PER_GROUP):
            choice = "grouped"
        elif _conv_winograd_pays(geometry):
            choice = "winograd"
        else:
            choice = "im2col"
        return choice if supports(choice, geometry) else "im2col"
    kh, kw = geometry.kernel_hw
    channels = geometry.in_per_group * geometry.out_per_group
    if geometry.in_per_group == 1:
        choice = "depthwise"
    elif ((geometry.groups == 1 and geometry.out_per_group < 8 and geometry.in_per_group <= _PLANAR_MAX_IN_PER_GROUP
          and channels <= _PLANAR_MAX_CHANNELS[(kh, kw) == geometry.stride]) or _planar_blocks_pay(geometry)
          or _planar_groups_pay(geometry)):
        choice = "planar"
    elif _col2im_pays(geometry):
        choice = "col2im"
    elif _winograd_pays(geometry):
        choice = "winograd" if supports("winograd", geometry) else "phase"
    else:
        choice = "phase"
    return choice if supports(choice, geometry) else "col2im"


# "planar" up to this C_in/groups · C_out/groups: [kernel wider than the stride, kernel equal to it]
# (the field suite's heads and super-resolution tails, asv_benches/NOTES.md), and up to this C_in/groups:
# from 24 input channels col2im's GEMM (K = C_in) is the faster (one-output tails, 2026-12-05).
_PLANAR_MAX_CHANNELS = (32, 16)
_PLANAR_MAX_IN_PER_GROUP = 16
# ... and, where its blocks hold 8 outputs, up to this C_out (for a kernel other than the stride; the
# second for stride 1 on both axes): from 16 inputs to 32 outputs, or 16 to 16 with stride 1, the phase
# GEMM was the faster; and up to this C_in with at least 8 outputs where a stride is 2 or more and the
# kernel has several rows (k3 s2 and k5 s2 from 256 inputs, and 32-128 inputs to 1-6 outputs ran slower
# than col2im or the phase GEMMs; asv_benches/NOTES.md, 2026-12-07 seventh).
_PLANAR_BLOCKS_MAX_OUT = (24, 12)
_PLANAR_BLOCKS_MAX_IN_STRIDED = 128
# ... and 1-D kernels (1 x k, stride 1 x s with s >= 2) to at most this many outputs: from up to 128 inputs to 8
# or more, from up to the second to fewer (from 128 inputs 1 or 2 outputs ran 1.1-1.45x slower than "col2im";
# on rows as short as crn_dec4's, 31 inputs, 64 -> 16 ran 1.1-1.2x slower; asv_benches/NOTES.md, 2026-12-08).
_PLANAR_BLOCKS_MAX_OUT_1D = 12
_PLANAR_BLOCKS_MAX_IN_1D_FEW_OUT = 64


def _planar_blocks_pay(geometry: ConvGeometry) -> bool:
    """choose_algorithm's wider "planar" rule, for an ISA whose planar kernel computes 8 outputs at once."""
    if (_cpu.planar_block_outputs() < 8 or geometry.groups != 1 or geometry.kernel_hw == geometry.stride
            or geometry.out_per_group > _PLANAR_BLOCKS_MAX_OUT[geometry.stride == (1, 1)]):
        return False
    if geometry.in_per_group <= _PLANAR_MAX_IN_PER_GROUP:
        return True
    if geometry.kernel_hw[0] == 1 and geometry.stride[0] == 1 and geometry.stride[1] > 1:   # 1-D
        return geometry.out_per_group <= _PLANAR_BLOCKS_MAX_OUT_1D and (
            geometry.in_per_group <= _PLANAR_BLOCKS_MAX_IN_1D_FEW_OUT
            or (8 <= geometry.out_per_group and geometry.in_per_group <= _PLANAR_BLOCKS_MAX_IN_STRIDED))
    return (8 <= geometry.out_per_group and geometry.in_per_group <= _PLANAR_BLOCKS_MAX_IN_STRIDED
            and geometry.stride != (1, 1) and geometry.kernel_hw[0] > 1 and not _winograd_pays(geometry))


def _planar_groups_pay(geometry: ConvGeometry) -> bool:
    """choose_algorithm's "planar" rule for several groups of 2 or more input channels each."""
    cig, cog = geometry.in_per_group, geometry.out_per_group
    if geometry.groups == 1 or cig < 2 or geometry.kernel_hw == geometry.stride:
        return False
    if cog <= _PLANAR_GROUPS_MAX_OUT:
        return cig <= _PLANAR_GROUPS_MAX_IN
    return (cog <= _PLANAR_GROUPS_BLOCKS_MAX_OUT and cig <= _PLANAR_MAX_IN_PER_GROUP
            and geometry.out_channels <= _PLANAR_GROUPS_BLOCKS_MAX_CHANNELS and _cpu.planar_block_outputs() >= 8
            and not _winograd_pays(geometry))

# "planar" for several groups (_planar_groups_pay): up to 8 outputs from up to 32 inputs per group, on every ISA;
# up to 16 outputs from up to 16 inputs per group, 128 outputs in all, on 32-register ISAs (asv_benches/NOTES.md,
# 2026-12-08).
_PLANAR_GROUPS_MAX_OUT = 8
_PLANAR_GROUPS_MAX_IN = 32
_PLANAR_GROUPS_BLOCKS_MAX_OUT = 16
_PLANAR_GROUPS_BLOCKS_MAX_CHANNELS = 128


# Convolution "grouped" up to these C_in/groups and C_out/groups (asv_benches/NOTES.md, 2026-12-05: 12 -> 12
# ran 1.2x faster than im2col, 16 -> 16 1.6x slower; 8 -> 16 1.4x faster, 8 -> 32 1.1x slower).
_GROUPED_MAX_IN_PER_GROUP = 12
_GROUPED_MAX_OUT_PER_GROUP = 16

# "winograd" where both axes have a phase of 2 or more taps and the channels make the GEMMs, not the
# tile transforms, the larger cost (the thresholds' measurements: asv_benches/NOTES.md).
_WINOGRAD_MIN_IN_PER_GROUP = 32
_WINOGRAD_MIN_OUT_PER_GROUP = 16
# ... or this many where the phases have unequal taps (k3 s2: 2 and 1, k5 s2: 3 and 2), whose tiles serve
# some phases only: with 16-31 outputs "phase" was within 10 % or up to 1.36x faster, and scales to 16 threads.
_WINOGRAD_MIXED_PHASES_MIN_OUT_PER_GROUP = 32
# ... and where several groups (merged or not) have exactly this many input channels each: k4 s2 with 8 groups
# of 16 ran 1.2-1.3x faster than "phase" at 1 and 2 threads (the field's grouped05 and, merged from 32 groups
# of 4, grouped07, which "planar" now runs); one group of 16 only 0.94-1.17x, 20-24 channels per group
# 0.7-0.93x (asv_benches/NOTES.md).
_WINOGRAD_GROUPED_IN_PER_GROUP = 16
# The convolution's "winograd" with sH·sW·C_in/groups up to this many times C_out/groups, or with at least
# this many outputs per group from any number of inputs: 1.05-1.46x faster than im2col at 1, 2 and 4 threads
# from 512-1024 inputs to 64-128 outputs, one slower by 11 % at 16 (asv_benches/NOTES.md, 2026-12-07 third).
_CONV_WINOGRAD_MAX_IN_PER_OUT = 8
_CONV_WINOGRAD_ANY_IN_MIN_OUT = 64
# Above this many bytes of float32 weights a layer keeps its direct algorithm: Winograd's packed
# weights (2.8-5x the weights: the direct kernel's and the transformed ones) would outgrow the weight
# cache (a 64 MiB layer's 272 MiB did: the function API re-packed it on every call, 190 ms against
# the layer's 0.8 ms), and such layers meet small inputs (a 1x1 to 4x4 GAN stem).
_WINOGRAD_MAX_WEIGHT_BYTES = 16 << 20


def _winograd_pays(geometry: ConvGeometry) -> bool:
    (kh, kw), (sh, sw) = geometry.kernel_hw, geometry.stride
    channels = geometry.in_per_group >= _WINOGRAD_MIN_IN_PER_GROUP or (
        geometry.groups > 1 and geometry.in_per_group == _WINOGRAD_GROUPED_IN_PER_GROUP)
    return (-(-kh // sh) >= 2 and -(-kw // sw) >= 2 and channels
            and geometry.out_per_group >= (_WINOGRAD_MIN_OUT_PER_GROUP if _equal_phases(geometry)
                                           else _WINOGRAD_MIXED_PHASES_MIN_OUT_PER_GROUP)
            and _weight_bytes(geometry) <= _WINOGRAD_MAX_WEIGHT_BYTES)


def _col2im_pays(geometry: ConvGeometry) -> bool:
    """choose_algorithm's "col2im" rule for few outputs per group (the measurements: asv_benches/NOTES.md,
    2026-12-06)."""
    (kh, kw), out, inputs = geometry.kernel_hw, geometry.out_per_group, geometry.in_per_group
    if out < 8:
        return kh * kw * out >= 16 or (kh, kw) == geometry.stride
    if geometry.groups > 1:
        return False
    if (kh, kw) == geometry.stride:
        return out < _COL2IM_MAX_OUT_KERNEL_IS_STRIDE
    return geometry.dilation == (1, 1) and (out < 16 or (out < 32 and inputs > _COL2IM_MIN_IN_PER_OUT * out))


def _equal_phases(geometry: ConvGeometry) -> bool:
    """Whether the kernel is a multiple of the stride along both axes: every stride phase has the same
    taps (k4 s2: 2×2 each; k3 s2 mixes 2 and 1, k5 s2 3 and 2)."""
    (kh, kw), (sh, sw) = geometry.kernel_hw, geometry.stride
    return kh % sh == 0 and kw % sw == 0


# col2im's one wide GEMM where the phase GEMMs would be narrow (_col2im_pays).
_COL2IM_MAX_OUT_KERNEL_IS_STRIDE = 64
_COL2IM_MIN_IN_PER_OUT = 24


def _weight_bytes(geometry: ConvGeometry) -> int:
    """The layer's weights in float32 bytes."""
    return 4 * int(np.prod(geometry.weight_shape))


def _conv_winograd_pays(geometry: ConvGeometry) -> bool:
    """A convolution whose kernel is 2 or 3 times its stride runs as a stride-1 correlation of 2 or 3
    taps per side over sH·sW·C_in channels (src/algorithms/conv_winograd.template.c): Winograd pays on
    the same channel terms as for that correlation, while the outputs are many (64 per group) or not far
    fewer than the input channels (the field suite's encoders: asv_benches/NOTES.md)."""
    (kh, kw), (sh, sw) = geometry.kernel_hw, geometry.stride
    inputs, outputs = geometry.in_per_group * sh * sw, geometry.out_per_group
    return (kh % sh == 0 and kw % sw == 0 and 2 <= kh // sh <= 3 and 2 <= kw // sw <= 3
            and inputs >= _WINOGRAD_MIN_IN_PER_GROUP and outputs >= _WINOGRAD_MIN_OUT_PER_GROUP
            and (inputs <= _CONV_WINOGRAD_MAX_IN_PER_OUT * outputs or outputs >= _CONV_WINOGRAD_ANY_IN_MIN_OUT)
            and _weight_bytes(geometry) <= _WINOGRAD_MAX_WEIGHT_BYTES and supports("winograd", geometry))


def resolve_algorithm(algorithm, geometry: ConvGeometry) -> str:
    """``algorithm=`` checked against this layer: None chooses; a name must be one of the layer's
    kind and able to run it (ValueError naming why not)."""
    if algorithm is None:
        return choose_algorithm(geometry)
    names = algorithms(geometry.transposed)
    if not isinstance(algorithm, str) or algorithm not in names:
        kind = "transposed convolutions" if geometry.transposed else "convolutions"
        raise ValueError(f"algorithm must be None or one of {', '.join(map(repr, names))} for {kind}, "
                         f"got {algorithm!r}")
    reason = _unsupported(algorithm, geometry)
    if reason is not None:
        raise ValueError(f"algorithm={algorithm!r} cannot run this layer (C_in={geometry.in_channels}, "
                         f"C_out={geometry.out_channels}, groups={geometry.groups}, kernel={geometry.kernel_hw}, "
                         f"stride={geometry.stride}): {reason}")
    return algorithm


def rows_for_columns(geometry: ConvGeometry) -> ConvGeometry | None:
    """The layer with its two spatial axes exchanged, when that moves no data: a 1-D layer (input and
    output height 1, kernel height 1, no padding along H). An NHWC array of height 1 is the same
    memory as one of width 1, and a (·, 1, kW, ·) weight the same as a (·, kW, 1, ·) one, so the layer's
    columns become rows, which the algorithms cut between threads; None for any other layer."""
    (h, w), (ho, wo), (kh, kw) = geometry.input_hw, geometry.output_hw, geometry.kernel_hw
    if h != 1 or ho != 1 or kh != 1 or geometry.pad[0] != (0, 0) or (w == 1 and wo == 1):
        return None
    return dataclasses.replace(geometry, input_hw=(w, h), output_hw=(wo, ho), kernel_hw=(kw, kh),
                               stride=geometry.stride[::-1], dilation=geometry.dilation[::-1],
                               pad=geometry.pad[::-1], output_padding=geometry.output_padding[::-1])


def _exchanged_packing(geometry: ConvGeometry) -> ConvGeometry:
    """The geometry whose packing rows_for_columns gives this layer's 1-D inputs."""
    return dataclasses.replace(geometry, kernel_hw=geometry.kernel_hw[::-1], stride=geometry.stride[::-1],
                               dilation=geometry.dilation[::-1], pad=geometry.pad[::-1])


def _exchange_axes(weight: np.ndarray) -> np.ndarray:
    """A (·, 1, kW, ·) weight as (·, kW, 1, ·): the same memory."""
    return weight.reshape(weight.shape[0], weight.shape[2], weight.shape[1], weight.shape[3])


def _packing(geometry: ConvGeometry) -> tuple:
    """What an algorithm's packed weights depend on besides the channels and groups (algorithm.h;
    the leading pads enter only through the row and column phase tables)."""
    return geometry.kernel_hw, geometry.stride, geometry.dilation, (geometry.pad[0][0], geometry.pad[1][0])


# Groups of fewer output channels than this run merged with their neighbours (group_merge).
_MERGED_GROUP_CHANNELS = 16


def group_merge(geometry: ConvGeometry) -> int:
    """How many neighbouring groups a layer runs as one (1: none): for 2 to 15 output channels per group
    (and more than one input channel per group), the fewest groups, S, that divide the groups and give
    S·C_out/groups >= 16 (all of them when no fewer do). Merged, S groups are one group of
    block-diagonal weights (merge_group_weights): S times the multiplies, by exact zeros, in GEMMs and
    tiles 16 or more columns wide instead of 2-8 (asv_benches/NOTES.md). One input channel per group
    keeps its direct kernel ("depthwise")."""
    g, cig, cog = geometry.groups, geometry.in_per_group, geometry.out_per_group
    if g == 1 or cig == 1 or cog >= _MERGED_GROUP_CHANNELS:
        return 1
    for s in range(2, g):
        if g % s == 0 and s * cog >= _MERGED_GROUP_CHANNELS:
            return s
    return g


def merge_group_weights(weight: np.ndarray, geometry: ConvGeometry, merge: int) -> np.ndarray:
    """The weight of ``geometry`` with each run of ``merge`` neighbouring groups as one group: the
    groups' weights on the block diagonal, zeros elsewhere. Shapes (C_out, kH, kW, merge·C_in/groups)
    for a convolution, (C_in, kH, kW, merge·C_out/groups) for a transposed one (fastdeconv's layouts)."""
    rows, kh, kw, cols = weight.shape
    g = geometry.groups
    blocks = weight.reshape(g // merge, merge, rows // g, kh, kw, cols)
    merged = np.zeros((g // merge, merge, rows // g, kh, kw, merge, cols), weight.dtype)
    for j in range(merge):
        merged[:, j, :, :, :, j, :] = blocks[:, j]
    return merged.reshape(rows, kh, kw, merge * cols)


# Algorithms that run each group's few channels at full vector width themselves: their groups stay unmerged
# (merged, they would only multiply the zeros between them).
_OWN_GROUPS = frozenset({"planar", "grouped"})
# Algorithms that vectorise over output pixels, not channels: their tasks split the columns of a 1-D input
# (H = 1) themselves, so it keeps its orientation.
_OWN_COLUMNS = frozenset({"planar"})


def _merged(geometry: ConvGeometry, merge: int) -> ConvGeometry:
    return geometry if merge == 1 else dataclasses.replace(geometry, groups=geometry.groups // merge)


class PackedLayer:
    """One layer's weights packed for one algorithm and compute dtype; runs any input shape.

    A layer with kernel height 1 and no padding along H runs its 1-D inputs (height 1) with the axes
    exchanged (:func:`rows_for_columns`), so that their columns thread. When that orientation packs
    differently (any kernel but 1x1 with equal strides and dilations), its weights are packed when the
    first input of that orientation comes, from the weight array it was given (which the backend
    protocol makes the caller's own, unchanged copy).

    An algorithm that hands small calls to another's kernel (``winograd``: to ``phase`` / ``im2col``,
    :func:`_cpu.delegate`) packs on the first call: that algorithm's weights for a small call, else its
    own transformed weights, which hold the other's packing too; later calls of any size run on the own
    packing once it is made, and the delegate's is let go (held on only by the runners of shapes that
    ran before). A layer only ever called on small inputs holds no transformed weights.

    A layer of few channels per group runs its groups merged (group_merge), unless ``merge_groups`` is
    False. A zero weight times an Inf or NaN input is NaN, which would reach the other groups of the
    merged one, so a call whose input holds either runs the groups unmerged (a second packing, made on
    the first such input); the merged call adds only exact zeros (0·x for finite x)."""

    def __init__(self, weight: np.ndarray, bias, dtype, geometry: ConvGeometry, algorithm: str | None = None,
                 merge_groups: bool = True):
        unmerged_choice = resolve_algorithm(algorithm, geometry)
        self._merge = group_merge(geometry) if merge_groups and unmerged_choice not in _OWN_GROUPS else 1
        self._unmerged_arguments = (weight, bias, dtype, geometry, algorithm) if self._merge > 1 else None
        self._unmerged = None
        if self._merge > 1:
            weight = merge_group_weights(np.asarray(weight), geometry, self._merge)
            geometry = _merged(geometry, self._merge)
        self.algorithm = resolve_algorithm(algorithm, geometry)
        self.dtype = _COMPUTE_DTYPE[np.dtype(dtype)]
        # The C algorithm that runs it: a stride-1 dilated transposed layer that this algorithm runs as its
        # equivalent convolution, unless a weight is Inf or NaN. That convolution's padding taps are terms
        # 0 · w, NaN for such a w, which the transposed convolution does not have: its "phase" kernel runs it,
        # as "winograd" runs its own layers with non-finite weights.
        self._kernel_algorithm = self.algorithm
        self._as_convolution = self.algorithm in _RUN_AS_CONVOLUTION and _dilated_stride_one_transposed(geometry)
        if self._as_convolution and not np.isfinite(weight).all():
            self._as_convolution, self._kernel_algorithm = False, "phase"
        if self._as_convolution:
            weight = convolution_weight(np.asarray(weight), geometry)
            geometry = as_convolution(geometry)
        weight = np.ascontiguousarray(weight, self.dtype)
        self._packs = {}   # (C algorithm, axes exchanged) -> _cpu.PackedWeights
        # both orientations run from one packing when exchanging the axes leaves it as it is
        self._one_packing = _packing(_exchanged_packing(geometry)) == _packing(geometry)
        exchanged = self._exchanged(geometry)
        packing = self._packing_for(exchanged or geometry, exchanged is not None)
        # Kept for a packing not made yet (the caller's own copy: protocol.py): the other orientation's,
        # or, where the layer's geometry (an empty probe) is one that its algorithm delegates, whichever
        # the first call needs. Whatever this geometry's pads: a Dask block kernel runs one layer for
        # blocks whose pads differ.
        self._weight = weight if (geometry.kernel_hw[0] == 1 and not self._one_packing) or \
            packing != self._kernel_algorithm else None
        if packing == self._kernel_algorithm:
            self._pack(packing, weight, exchanged or geometry, exchanged is not None)
        # rounded to the result dtype first (float16 results: exactly as conv_transpose2d rounds it)
        self.bias = None if bias is None else np.asarray(bias, dtype=dtype).astype(self.dtype, copy=False)
        self._runners = BoundedCache(CACHE_SHAPES)   # (geometry, threads) -> _cpu.Runner

    def _exchanged(self, geometry: ConvGeometry) -> ConvGeometry | None:
        """rows_for_columns(geometry) where this layer's algorithm can run it and does not thread its
        columns itself, else None."""
        if self._kernel_algorithm in _OWN_COLUMNS:
            return None
        exchanged = rows_for_columns(geometry)
        return exchanged if exchanged is not None and supports(self._kernel_algorithm, exchanged) else None

    def _packing_for(self, geometry: ConvGeometry, exchanged: bool) -> str:
        """The C algorithm whose packing runs this geometry: the layer's own, or, until that is packed
        (its blob holds the other's too), the one it delegates this geometry to (_cpu.delegate: the
        small calls of winograd, run by phase's or im2col's kernel on that algorithm's own packing)."""
        if (self._kernel_algorithm, exchanged and not self._one_packing) in self._packs:
            return self._kernel_algorithm
        return _cpu.delegate(self._kernel_algorithm, geometry) or self._kernel_algorithm

    def _pack(self, algorithm: str, weight, geometry: ConvGeometry, exchanged: bool) -> _cpu.PackedWeights:
        key = (algorithm, exchanged and not self._one_packing)
        if key not in self._packs:
            if algorithm == self._kernel_algorithm:   # its blob holds the delegate's packing: let that go first
                for other in [k for k in self._packs if k[1] == key[1]]:
                    self._packs.pop(other, None)
            self._packs[key] = _cpu.PackedWeights(algorithm, _exchange_axes(weight) if exchanged else weight,
                                                  geometry)
        return self._packs[key]

    @property
    def packed(self) -> _cpu.PackedWeights | None:
        """The packed weights made first (None until the first call, for a layer that packs then)."""
        return next(iter(self._packs.values()), None)

    @property
    def nbytes(self) -> int:
        """The bytes of the packed weights (both orientations, when both were needed; the algorithm's
        own and the one it delegates small calls to, when both were needed; the unmerged groups', when an
        input needed them)."""
        return sum(p.nbytes for p in self._packs.values()) + (0 if self._unmerged is None else self._unmerged.nbytes)

    def _make_runner(self, geometry: ConvGeometry) -> _cpu.Runner:
        if self._as_convolution:
            convolution = as_convolution(geometry)
            if convolution is None:   # no call of this layer's pads, nor a Dask block of it, has such pads
                raise ValueError(f"pads {geometry.pad} crop more than the dilated kernel spans: "
                                 f"this layer runs as a convolution and cannot run them")
            geometry = convolution
        exchanged = self._exchanged(geometry)
        packing = self._packing_for(exchanged or geometry, exchanged is not None)
        packed = self._pack(packing, self._weight, exchanged or geometry, exchanged is not None)
        return _cpu.Runner(packed, self.bias, exchanged or geometry)

    def runner(self, geometry: ConvGeometry) -> _cpu.Runner:
        """The runner for inputs of this geometry at the current thread count (cached; the merged groups'
        when this layer merges them)."""
        geometry = _merged(geometry, self._merge)
        return self._runners.get_or_make((geometry, _cpu.get_num_threads()), lambda: self._make_runner(geometry))

    def bind(self, geometry: ConvGeometry):
        runner, shape, dtype = self.runner(geometry), geometry.output_shape, self.dtype

        def run(x, buffer):
            return runner.run(x, _cpu.empty_result(shape, dtype) if buffer is None else buffer)

        if self._merge == 1:
            return run

        def run_merged(x, buffer):
            if _cpu.all_finite(x):
                return run(x, buffer)
            if self._unmerged is None:
                self._unmerged = PackedLayer(*self._unmerged_arguments, merge_groups=False)
            return self._unmerged.bind(geometry)(x, buffer)

        return run_merged


class CpuBackend:
    """backend="cpu": the C kernels."""

    name = "cpu"
    algorithms = tuple(dict.fromkeys(DECONV_ALGORITHMS + CONV_ALGORITHMS))
    cache_layers = True

    @staticmethod
    def status():
        return BackendStatus(True, "C kernels (fastdeconv._cpu)")

    @staticmethod
    def prefers(call) -> bool:
        return False

    @staticmethod
    def resolve_algorithm(algorithm, geometry: ConvGeometry) -> str:
        return resolve_algorithm(algorithm, geometry)

    @staticmethod
    def layer(weight, bias, dtype, geometry: ConvGeometry, algorithm: str | None = None) -> PackedLayer:
        return PackedLayer(weight, bias, dtype, geometry, algorithm)


CPU = CpuBackend()

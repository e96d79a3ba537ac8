"""The parameter contract, parsed in one place for every backend.

Everything that turns user arguments (stride, padding, output_padding,
dilation, groups, output_size) into numbers, and every output-shape
calculation, lives here. Backends receive a :class:`ConvGeometry` and never
look at the raw arguments.

Per spatial axis, with kernel extent ``kd = d·(k − 1) + 1``:

* transposed convolution:  ``out = (in − 1)·s − pad_begin − pad_end + kd + output_padding``
* convolution:             ``out = ⌊(in + pad_begin + pad_end − kd) / s⌋ + 1``
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

__all__ = [
    "ConvGeometry",
    "conv2d_output_shape",
    "conv_transpose2d_output_shape",
    "resolve_conv2d",
    "resolve_conv_transpose2d",
]


#: The C kernels compute with signed 64-bit integers and never rely on wrapping; src/runtime/conv_geometry.h
#: states the bound they are exact within, and these enforce it. Each stride, dilation, padding,
#: output_padding, output_size and groups value must be at most MAX_PARAMETER (so that the error names
#: it); then every index span per axis must stay below MAX_INDEX and the element counts of x, the
#: weight and the result below MAX_ELEMENTS (:func:`_check_index_range`). Anything within is computed
#: exactly, however large its stride or padding.
MAX_PARAMETER = 2**62
MAX_INDEX = 2**63
MAX_ELEMENTS = 2**48


def is_int(value) -> bool:
    """An integer (Python's or numpy's), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_at_most(values, name: str, original) -> None:
    if max(values) > MAX_PARAMETER:
        raise ValueError(f"{name} must be <= 2**62 = {MAX_PARAMETER} in each dimension, got {original!r}")


def _int_pair(value, name: str, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints, each >= minimum, as (h, w)."""
    if is_int(value):
        pair = (int(value), int(value))
    else:
        try:
            items = tuple(value)
        except TypeError:
            raise TypeError(f"{name} must be an int or a pair of ints (h, w), got {value!r}") from None
        if len(items) != 2 or not all(is_int(v) for v in items):
            raise TypeError(f"{name} must be an int or a pair of ints (h, w), got {value!r}")
        pair = (int(items[0]), int(items[1]))
    if min(pair) < minimum:
        raise ValueError(f"{name} must be >= {minimum} in each dimension, got {value!r}")
    _check_at_most(pair, name, value)
    return pair


def _explicit_padding(padding) -> tuple[tuple[int, int], tuple[int, int]]:
    """int, (ph, pw) or ((top, bottom), (left, right)) -> ((top, bottom), (left, right))."""
    message = (
        "padding must be an int, (ph, pw), ((top, bottom), (left, right)), 'same' or 'valid', "
        f"got {padding!r}"
    )
    if is_int(padding):
        pads = ((int(padding),) * 2, (int(padding),) * 2)
    elif isinstance(padding, (dict, set, frozenset)):   # unordered: tuple() would take keys in any order
        raise TypeError(message)
    else:
        try:
            items = tuple(padding)
        except TypeError:
            raise TypeError(message) from None
        if len(items) != 2:
            raise TypeError(message)
        if all(is_int(v) for v in items):
            pads = ((int(items[0]),) * 2, (int(items[1]),) * 2)
        else:
            try:
                pads = tuple(tuple(axis) for axis in items)
            except TypeError:
                raise TypeError(message) from None
            if not all(len(axis) == 2 and all(is_int(v) for v in axis) for axis in pads):
                raise TypeError(message)
            pads = tuple((int(a), int(b)) for a, b in pads)
    if min(pads[0] + pads[1]) < 0:
        raise ValueError(f"padding must be >= 0, got {padding!r}")
    _check_at_most(pads[0] + pads[1], "padding", padding)
    return pads


def kernel_extent(kernel: int, dilation: int) -> int:
    """The span of a dilated kernel along one axis: kd = d·(k − 1) + 1."""
    return dilation * (kernel - 1) + 1


def forward_output_size(size, kernel, stride, dilation, pad_begin, pad_end) -> int:
    """One axis of a convolution's output: ⌊(size + pad_begin + pad_end − kd) / s⌋ + 1, kd = d·(k − 1) + 1."""
    return (size + pad_begin + pad_end - kernel_extent(kernel, dilation)) // stride + 1


def _padding_mode(padding):
    """'same' or 'valid' for those strings (any case), None for explicit padding."""
    if not isinstance(padding, str):
        return None
    if padding.lower() not in ("same", "valid"):
        raise ValueError(f"padding must be an int, a pair, a pair of pairs, 'same' or 'valid', got {padding!r}")
    return padding.lower()


def _split_same(total: int) -> tuple[int, int]:
    """TF's 'SAME' split: the extra row or column goes to the bottom/right."""
    return total // 2, total - total // 2


@dataclass(frozen=True)
class ConvGeometry:
    """A fully resolved 2-D (transposed) convolution over NHWC data.

    ``weight_shape`` is (C_in, kH, kW, C_out/groups) for a transposed
    convolution and (C_out, kH, kW, C_in/groups) for a convolution.
    ``pad`` is ((top, bottom), (left, right)); ``output_padding`` is only
    meaningful for transposed convolutions (it adds rows/columns at the
    bottom/right).
    """

    transposed: bool
    batch: int
    input_hw: tuple[int, int]
    in_channels: int
    out_channels: int
    kernel_hw: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad: tuple[tuple[int, int], tuple[int, int]]
    output_padding: tuple[int, int]
    groups: int
    output_hw: tuple[int, int]

    @property
    def in_per_group(self) -> int:
        return self.in_channels // self.groups

    @property
    def out_per_group(self) -> int:
        return self.out_channels // self.groups

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, *self.input_hw, self.in_channels)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, *self.output_hw, self.out_channels)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        if self.transposed:
            return (self.in_channels, *self.kernel_hw, self.out_per_group)
        return (self.out_channels, *self.kernel_hw, self.in_per_group)

    @property
    def flops(self) -> int:
        """2·N·H·W·C_in·kH·kW·C_out/groups for a transposed convolution (per input pixel);
        2·N·Ho·Wo·C_out·kH·kW·C_in/groups for a convolution (per output pixel)."""
        kh, kw = self.kernel_hw
        pixels = self.batch * (self.input_hw[0] * self.input_hw[1] if self.transposed
                               else self.output_hw[0] * self.output_hw[1])
        channels = self.in_channels if self.transposed else self.out_channels
        per_group = self.out_per_group if self.transposed else self.in_per_group
        return 2 * pixels * channels * kh * kw * per_group


def _resolve_transposed_axes(input_hw, kernel_hw, stride, padding, output_padding, dilation, output_size):
    """Pads, output_padding and output size of a transposed convolution, per axis."""
    stride = _int_pair(stride, "stride", 1)
    dilation = _int_pair(dilation, "dilation", 1)
    explicit_op = _int_pair(output_padding, "output_padding", 0)
    extents = [kernel_extent(k, d) for k, d in zip(kernel_hw, dilation)]
    mode = _padding_mode(padding)
    if mode == "same":
        # out = in·s: total padding kd − s; when the dilated kernel is shorter than the
        # stride, nothing is cropped and the missing rows (output_padding s − kd) hold the bias.
        if explicit_op != (0, 0):
            raise ValueError(f"output_padding must be 0 with padding='same', got {output_padding!r}")
        pads = tuple(_split_same(max(kd - s, 0)) for kd, s in zip(extents, stride))
        same_op = tuple(max(s - kd, 0) for kd, s in zip(extents, stride))
    else:
        pads = ((0, 0), (0, 0)) if mode == "valid" else _explicit_padding(padding)

    base = [(i - 1) * s - p0 - p1 + kd for i, s, (p0, p1), kd in zip(input_hw, stride, pads, extents)]
    limit = tuple(max(s, d) for s, d in zip(stride, dilation))
    if mode == "same":
        op = same_op
    else:
        op = explicit_op
        for axis, name in enumerate(("height", "width")):
            if op[axis] >= limit[axis]:
                raise ValueError(
                    f"output_padding must be smaller than max(stride, dilation) in each dimension: "
                    f"output_padding={explicit_op}, stride={stride}, dilation={dilation} ({name})"
                )

    if output_size is not None:
        target = _int_pair(output_size, "output_size", 1)
        chosen = []
        for axis, name in enumerate(("height", "width")):
            if mode == "same":
                valid = (base[axis] + op[axis], base[axis] + op[axis])
            else:
                valid = (base[axis], base[axis] + limit[axis] - 1)
            if not valid[0] <= target[axis] <= valid[1]:
                raise ValueError(
                    f"output_size={tuple(target)} cannot be reached: the output {name} must be in "
                    f"[{valid[0]}, {valid[1]}] for input {tuple(input_hw)}, kernel {tuple(kernel_hw)}, "
                    f"stride={stride}, padding={padding!r}, dilation={dilation}"
                )
            chosen.append(target[axis] - base[axis])
        chosen = tuple(chosen)
        if mode != "same" and op != (0, 0) and op != chosen:
            raise ValueError(
                f"output_size={tuple(target)} needs output_padding={chosen}, which conflicts with "
                f"output_padding={explicit_op}"
            )
        op = chosen

    out_hw = tuple(b + o for b, o in zip(base, op))
    if min(out_hw) < 1:
        raise ValueError(
            f"the computed output size {out_hw} is smaller than 1: input {tuple(input_hw)}, kernel "
            f"{tuple(kernel_hw)}, stride={stride}, padding={padding!r}, output_padding={op}, dilation={dilation}"
        )
    return stride, dilation, pads, op, out_hw


def _resolve_forward_axes(input_hw, kernel_hw, stride, padding, dilation):
    """Pads and output size of a convolution, per axis."""
    stride = _int_pair(stride, "stride", 1)
    dilation = _int_pair(dilation, "dilation", 1)
    extents = [kernel_extent(k, d) for k, d in zip(kernel_hw, dilation)]
    mode = _padding_mode(padding)
    if mode == "same":
        # TF: out = ceil(in / s), extra padding at the bottom/right.
        pads = tuple(_split_same(max((-(-i // s) - 1) * s + kd - i, 0)) for i, s, kd in zip(input_hw, stride, extents))
    else:
        pads = ((0, 0), (0, 0)) if mode == "valid" else _explicit_padding(padding)
    padded = [i + p0 + p1 for i, (p0, p1) in zip(input_hw, pads)]
    if any(p < kd for p, kd in zip(padded, extents)):
        raise ValueError(
            f"the computed output size is smaller than 1: the padded input {tuple(padded)} is smaller than the "
            f"dilated kernel {tuple(extents)} (input {tuple(input_hw)}, kernel {tuple(kernel_hw)}, "
            f"padding={padding!r}, dilation={dilation})"
        )
    out_hw = tuple(forward_output_size(i, k, s, d, p0, p1)
                   for i, k, s, d, (p0, p1) in zip(input_hw, kernel_hw, stride, dilation, pads))
    return stride, dilation, pads, out_hw


def check_groups(groups) -> None:
    """groups must be an int >= 1 (TypeError / ValueError otherwise)."""
    if not is_int(groups):
        raise TypeError(f"groups must be an int, got {groups!r}")
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got groups={groups}")
    if groups > MAX_PARAMETER:
        raise ValueError(f"groups must be <= 2**62 = {MAX_PARAMETER}, got groups={groups}")


def _check_index_range(geometry: ConvGeometry, arguments: str) -> ConvGeometry:
    """Reject a geometry whose indices could leave 64-bit arithmetic in the kernels.

    Per axis, every coordinate a kernel forms (iy·s − pad + ky·d, its quotient by s, loop bounds such
    as out + s − 1) is a sum of some of the terms of
        span = in + out + (strided − 1)·s + (k − 1)·d + pad_begin + pad_end + output_padding + s + d,
    each at most once, where the strided side is the input of a transposed convolution and the output
    of a convolution; span must stay below MAX_INDEX. Every element offset lies within the element
    count of x, the weight or the result, each of which (counting zero extents as 1) must stay below
    MAX_ELEMENTS.
    """
    axes = zip(("height", "width"), geometry.input_hw, geometry.output_hw, geometry.kernel_hw, geometry.stride,
               geometry.dilation, geometry.pad, geometry.output_padding)
    for name, size_in, size_out, k, s, d, (p0, p1), op in axes:
        strided = size_in if geometry.transposed else size_out
        span = size_in + size_out + (strided - 1) * s + (k - 1) * d + p0 + p1 + op + s + d
        if span >= MAX_INDEX:
            raise ValueError(f"{arguments} give the {name} axis an index range of {span}, not below the 2**63 "
                             "that 64-bit index arithmetic allows; reduce stride, dilation or padding")
    for name, shape in (("x", geometry.input_shape), ("the weight", geometry.weight_shape),
                        ("the result", geometry.output_shape)):
        # nonzero extents: numpy refuses such a shape even when another extent is 0
        extent = max(shape[0], 1) * max(shape[1], 1) * max(shape[2], 1) * max(shape[3], 1)
        if extent >= MAX_ELEMENTS:
            raise ValueError(f"{name} would have shape {shape}, {extent} elements (nonzero extents), not below "
                             f"2**48: {arguments}")
    return geometry


TRANSPOSED_WEIGHT_LAYOUT = "(C_in, kH, kW, C_out // groups)"
FORWARD_WEIGHT_LAYOUT = "(C_out, kH, kW, C_in // groups)"


def groups_hint(channels: int, per_group: int, other_channels: int, groups: int, what: str) -> str:
    """"; groups=g makes the shapes agree ..." when channels = g · per_group for a g other than groups
    that also divides other_channels; "" otherwise (``what`` names the channels' source)."""
    fitting = channels // per_group if per_group and channels % per_group == 0 else 0
    if fitting in (0, groups) or other_channels % fitting:
        return ""
    return (f"; groups={fitting} makes the shapes agree ({what} / weight.shape[3] = {channels} / {per_group}): "
            "did you forget groups=?")


def _layout_hint(x_shape, w_shape, groups, transposed) -> str:
    """The likely cause of a channel mismatch between x and weight, with its fix ("" if none fits):
    channels-first x, a weight in torch's or TF's layout, or a forgotten groups."""
    channels_axis = len(x_shape) - 3   # axis 1 of (N, C, H, W), axis 0 of (C, H, W)
    to_channels_last = "(0, 2, 3, 1)" if len(x_shape) == 4 else "(1, 2, 0)"
    if transposed:
        weights = {"": w_shape[0],
                   " and weight looks like TF's conv2d_transpose filter (kH, kW, C_out, C_in): pass "
                   "weight.transpose(3, 0, 1, 2)": w_shape[3]}
    else:
        weights = {"": w_shape[3] * groups,
                   " and weight looks like torch's Conv2d layout (C_out, C_in // groups, kH, kW): pass "
                   "weight.transpose(0, 2, 3, 1)": w_shape[1] * groups,
                   " and weight looks like TF's HWIO filter (kH, kW, C_in, C_out): pass "
                   "weight.transpose(3, 0, 1, 2)": w_shape[2] * groups}
    hints = []
    for weight_hint, channels in weights.items():
        if x_shape[-1] == channels and weight_hint:
            hints.append(weight_hint[len(" and "):])
        elif x_shape[channels_axis] == channels != x_shape[-1]:
            hints.append(f"x looks channels-first {('(N, C, H, W)', '(C, H, W)')[channels_axis == 0]}: fastdeconv "
                         f"takes channels-last (NHWC) input, pass x.transpose{to_channels_last}" + weight_hint)
    forgotten = "" if transposed else groups_hint(x_shape[-1], w_shape[3], w_shape[0], groups, "C_in")
    return "".join(f"; {hint}" for hint in hints) + forgotten


def _check_shapes(x_shape, w_shape, groups, transposed):
    """Validate ndim, channels and groups; return (batch, input_hw, C_in, C_out, kernel_hw)."""
    if len(x_shape) not in (3, 4):
        raise ValueError(f"x must have shape (N, H, W, C_in) or (H, W, C_in), got ndim={len(x_shape)} shape={tuple(x_shape)}")
    if len(w_shape) != 4:
        layout = TRANSPOSED_WEIGHT_LAYOUT if transposed else FORWARD_WEIGHT_LAYOUT
        raise ValueError(f"weight must have shape {layout}, got ndim={len(w_shape)} shape={tuple(w_shape)}")
    check_groups(groups)
    groups = int(groups)   # a numpy integer would keep its width in C_out = C_out/g * groups
    batch = x_shape[0] if len(x_shape) == 4 else 1
    input_hw = tuple(int(v) for v in x_shape[-3:-1])
    in_channels = int(x_shape[-1])
    kernel_hw = (int(w_shape[1]), int(w_shape[2]))
    if min(kernel_hw) < 1:
        raise ValueError(f"weight's kernel size must be >= 1, got kernel {kernel_hw} from weight shape {tuple(w_shape)}")
    expected_in = int(w_shape[0]) if transposed else int(w_shape[3]) * groups
    if in_channels != expected_in:
        layout = TRANSPOSED_WEIGHT_LAYOUT if transposed else FORWARD_WEIGHT_LAYOUT
        grouped = "" if transposed else f" with groups={groups}"
        raise ValueError(f"x has C_in={in_channels} channels (its last axis) but weight {tuple(w_shape)}{grouped} "
                         f"expects C_in={expected_in} (weight is {layout})"
                         + _layout_hint(tuple(x_shape), tuple(w_shape), groups, transposed))
    if in_channels % groups:
        raise ValueError(f"C_in={in_channels} (x's last axis) is not divisible by groups={groups}")
    if transposed:
        out_channels = int(w_shape[3]) * groups
    else:
        out_channels = int(w_shape[0])
        if out_channels % groups:
            raise ValueError(f"C_out={out_channels} (weight's first axis) is not divisible by groups={groups}")
    if min(input_hw) < 1:
        raise ValueError(f"x's spatial size must be >= 1, got (H, W)={input_hw} from x shape {tuple(x_shape)}")
    if groups > max(in_channels, out_channels, 1):   # possible with zero channels only
        raise ValueError(f"groups={groups} exceeds both C_in={in_channels} and C_out={out_channels}: every group "
                         "needs a channel")
    return int(batch), input_hw, in_channels, out_channels, kernel_hw


def resolve_conv_transpose2d(x_shape, w_shape, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                             output_size=None) -> ConvGeometry:
    """Validate a conv_transpose2d call's shapes and parameters; x_shape may be unbatched."""
    batch, input_hw, cin, cout, kernel_hw = _check_shapes(x_shape, w_shape, groups, transposed=True)
    resolved = _resolve_transposed_axes(input_hw, kernel_hw, stride, padding, output_padding, dilation, output_size)
    geometry = ConvGeometry(True, batch, input_hw, cin, cout, kernel_hw, resolved[0], resolved[1], resolved[2],
                            resolved[3], int(groups), resolved[4])
    return _check_index_range(geometry, f"input {input_hw}, kernel {kernel_hw}, stride={stride!r}, "
                                        f"padding={padding!r}, output_padding={resolved[3]}, dilation={dilation!r}")


def resolve_conv2d(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1) -> ConvGeometry:
    """Validate a conv2d call's shapes and parameters; x_shape may be unbatched."""
    batch, input_hw, cin, cout, kernel_hw = _check_shapes(x_shape, w_shape, groups, transposed=False)
    resolved = _resolve_forward_axes(input_hw, kernel_hw, stride, padding, dilation)
    geometry = ConvGeometry(False, batch, input_hw, cin, cout, kernel_hw, resolved[0], resolved[1], resolved[2], (0, 0),
                            int(groups), resolved[3])
    return _check_index_range(geometry, f"input {input_hw}, kernel {kernel_hw}, stride={stride!r}, "
                                        f"padding={padding!r}, dilation={dilation!r}")


def conv_transpose2d_output_shape(input_hw, kernel_hw, stride=1, padding=0, output_padding=0, dilation=1):
    """(H_out, W_out) of a transposed convolution.

    ``H_out = (H − 1)·sH − pad_top − pad_bottom + dH·(kH − 1) + output_padding_h + 1``, and the
    same for W. Raises ValueError for the same inputs conv_transpose2d rejects.

    Examples
    --------
    >>> import fastdeconv
    >>> fastdeconv.conv_transpose2d_output_shape((5, 5), (3, 3), stride=2, padding=1)
    (9, 9)
    >>> fastdeconv.conv_transpose2d_output_shape((16, 8), (4, 4), stride=2, padding="same")
    (32, 16)
    """
    input_hw = _int_pair(input_hw, "input_hw", 1)
    kernel_hw = _int_pair(kernel_hw, "kernel_hw", 1)
    return _resolve_transposed_axes(input_hw, kernel_hw, stride, padding, output_padding, dilation, None)[4]


def conv2d_output_shape(input_hw, kernel_hw, stride=1, padding=0, dilation=1):
    """(H_out, W_out) of a convolution: ``H_out = ⌊(H + pad_top + pad_bottom − dH·(kH − 1) − 1) / sH⌋ + 1``.

    Examples
    --------
    >>> import fastdeconv
    >>> fastdeconv.conv2d_output_shape((32, 32), (4, 4), stride=2, padding=1)
    (16, 16)
    >>> fastdeconv.conv2d_output_shape((7, 7), (3, 3), stride=2, padding="same")
    (4, 4)
    """
    input_hw = _int_pair(input_hw, "input_hw", 1)
    kernel_hw = _int_pair(kernel_hw, "kernel_hw", 1)
    return _resolve_forward_axes(input_hw, kernel_hw, stride, padding, dilation)[3]

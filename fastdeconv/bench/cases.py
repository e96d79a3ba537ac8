"""One benchmark layer (:class:`Case`): its shapes and parameters, the arrays it runs on, its FLOPs.
Shared by the fixed suites (:mod:`.suites`) and the field suite (:mod:`.field`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _hw(value):
    """(height, width) of a Case field given as one int (square) or a pair."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


@dataclass(frozen=True)
class Case:
    """One layer: kernel, stride, padding, output_padding and dilation are an int (both axes) or an
    (H, W) pair; padding is symmetric per axis."""

    name: str
    input_shape: tuple  # (N, H, W, C_in)
    out_channels: int
    kernel: object
    stride: object
    padding: object
    output_padding: object = 0
    dilation: object = 1
    groups: int = 1
    op: str = "deconv"   # "deconv": conv_transpose2d; "conv": conv2d (output_padding unused)
    family: str = ""     # the field suite's family (fastdeconv.bench.field); "" in the fixed suites

    @property
    def transposed(self):
        return self.op == "deconv"

    @property
    def kernel_hw(self):
        return _hw(self.kernel)

    @property
    def weight_shape(self):
        """(C_in, kH, kW, C_out/g) for a transposed convolution, (C_out, kH, kW, C_in/g) for a convolution."""
        c_in, c_out, (kh, kw) = self.input_shape[3], self.out_channels, self.kernel_hw
        return (c_in, kh, kw, c_out // self.groups) if self.transposed else (c_out, kh, kw, c_in // self.groups)

    @property
    def kwargs(self):
        kwargs = dict(stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups)
        return {**kwargs, "output_padding": self.output_padding} if self.transposed else kwargs

    @property
    def taps(self):
        kh, kw = self.kernel_hw
        return kh * kw

    @property
    def flops(self):
        n, h, w, cin = self.input_shape
        if not self.transposed:
            h, w = _output_hw(self)
            return 2 * n * h * w * self.out_channels * self.taps * cin // self.groups
        return 2 * n * h * w * cin * self.taps * self.out_channels // self.groups

    def arrays(self, dtype=np.float32, seed=0):
        """x, weight, bias with a fixed seed (weights scaled by 1/sqrt(fan-in))."""
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(self.input_shape).astype(dtype)
        per_group = self.weight_shape[0] // self.groups if self.transposed else self.weight_shape[3]
        w = rng.standard_normal(self.weight_shape) / np.sqrt(per_group * self.taps)
        b = rng.standard_normal(self.out_channels)
        return x, w.astype(dtype), b.astype(dtype)

    def functions(self):
        """(function, layer class, reference function) of this case's operation."""
        import fastdeconv

        if self.transposed:
            return fastdeconv.conv_transpose2d, fastdeconv.ConvTranspose2d, fastdeconv.reference.conv_transpose2d
        return fastdeconv.conv2d, fastdeconv.Conv2d, fastdeconv.reference.conv2d

    def describe(self):
        def text(value):
            h, w = _hw(value)
            return f"{h}" if h == w else f"({h},{w})"

        defaults = {"output_padding": 0, "dilation": 1, "groups": 1}
        extra = "".join(f" {k}={text(getattr(self, k))}" for k in defaults
                        if _hw(getattr(self, k)) != _hw(defaults[k]))
        return (f"{self.name:<14} {self.op:<6} NHWC {self.input_shape} -> C_out {self.out_channels}, "
                f"k{text(self.kernel)} s{text(self.stride)} p{text(self.padding)}{extra}")


def _output_hw(case):
    from .._params import conv2d_output_shape, conv_transpose2d_output_shape

    if not case.transposed:
        return conv2d_output_shape(case.input_shape[1:3], case.kernel_hw, case.stride, case.padding, case.dilation)
    return conv_transpose2d_output_shape(case.input_shape[1:3], case.kernel_hw, case.stride, case.padding,
                                         case.output_padding, case.dilation)

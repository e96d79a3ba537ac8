"""The call contract shared by every backend: a validated :class:`Call` in, a finished result out.

:func:`prepare` turns user arguments into a :class:`Call` (4-D arrays, resolved geometry, result
dtype; :func:`prepare_conv_transpose2d` and :func:`prepare_conv2d` name the parameters);
:func:`finish` casts a computed result to the result dtype, removes the batch axis of unbatched
calls and honours ``out=``.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass

import numpy as np

from ._params import ConvGeometry, groups_hint, resolve_conv2d, resolve_conv_transpose2d

SUPPORTED_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_SUPPORTED_NAMES = "float16, float32 or float64"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


@dataclass
class Call:
    x: np.ndarray            # (N, H, W, C_in), the caller's dtype and strides
    weight: np.ndarray
    bias: np.ndarray | None  # (C_out,) in the result dtype
    geometry: ConvGeometry
    dtype: np.dtype          # result dtype
    unbatched: bool
    out: np.ndarray | None   # validated, in the caller's shape

    @property
    def result_shape(self) -> tuple:
        """The shape of the result: the geometry's output shape, without N if x was unbatched."""
        return self.geometry.output_shape[1:] if self.unbatched else self.geometry.output_shape


def _aligned(array: np.ndarray) -> np.ndarray:
    """The array, or an aligned copy when its data is not aligned for its dtype (a view at an odd
    byte offset of a buffer): the C kernels read it as float* / double*, which must be aligned."""
    return array if array.flags.aligned else array.copy()


def _reject_masked(value, name: str) -> None:
    """A masked array would be computed with the values under its mask: refused, with the fix."""
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(f"{name} is a numpy.ma.MaskedArray, whose masked elements would be computed with the "
                        f"values hidden under the mask; pass np.ma.filled({name}, fill_value) to choose what "
                        f"they count as, or {name}.data to use the hidden values")


class LayoutWarning(UserWarning):
    """A conv_transpose2d weight whose shape looks like torch's ConvTranspose2d layout (C_in, C_out/g,
    kH, kW) rather than fastdeconv's (C_in, kH, kW, C_out/g), given without the bias that would tell.

    A ``UserWarning``; ``warnings.simplefilter("ignore", fastdeconv.LayoutWarning)`` for a layer whose
    kernel really is over twice as tall as wide with as many outputs per group as it has columns.

    Examples
    --------
    >>> import warnings, numpy as np, fastdeconv
    >>> torch_layout = np.ones((4, 16, 3, 3), np.float32)           # torch: (C_in, C_out, kH, kW)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = fastdeconv.conv_transpose2d(np.ones((1, 2, 2, 4), np.float32), torch_layout)
    >>> caught[0].category is fastdeconv.LayoutWarning
    True
    """


def _looks_like_torch_transposed(w_shape) -> bool:
    """(C_in, A, k, k) with A >= 8, A > 2k and k >= 2: torch's (C_in, C_out/g=A, k, k) far more likely
    than a kernel of A rows by k columns (more than twice as tall as wide) with exactly k outputs per
    group."""
    return len(w_shape) == 4 and w_shape[1] >= 8 and w_shape[1] > 2 * w_shape[2] and w_shape[2] == w_shape[3] >= 2


def _warn_layout(w_shape) -> None:
    frame, level = sys._getframe(1), 2   # stacklevel 2 is the frame that called this function
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):   # the caller's line
        frame, level = frame.f_back, level + 1
    warnings.warn(f"weight {tuple(w_shape)} is read as (C_in, kH, kW, C_out // groups) = a {w_shape[1]}x{w_shape[2]} "
                  f"kernel with {w_shape[3]} outputs per group; if it is torch's ConvTranspose2d layout (C_in, "
                  f"C_out // groups, kH, kW), pass weight.transpose(0, 2, 3, 1)", LayoutWarning, stacklevel=level)


def _bias_hint(bias_shape, w_shape, geometry: ConvGeometry) -> str:
    """Why a bias disagrees with the weight, when the weight is the likely culprit."""
    length, groups = (bias_shape[0], geometry.groups) if len(bias_shape) == 1 else (None, 0)
    if not geometry.transposed or length is None:
        return ""
    if length == w_shape[1] * groups != w_shape[3] * groups:
        return ("; weight looks like torch's ConvTranspose2d layout (C_in, C_out // groups, kH, kW), whose C_out "
                "the bias has: pass weight.transpose(0, 2, 3, 1)")
    return groups_hint(length, w_shape[3], geometry.in_channels, groups, "len(bias)")


def _as_float_array(value, name: str) -> np.ndarray:
    _reject_masked(value, name)
    array = np.asarray(value)
    if array.dtype not in SUPPORTED_DTYPES:
        native = array.dtype.newbyteorder("=")
        if native not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {array.dtype}; supported dtypes are {_SUPPORTED_NAMES}")
        array = array.astype(native)   # byte-swapped floats: the same values in native order
    return _aligned(array)


def prepare(x, weight, bias, out, *, transposed: bool, resolve, check_layout: bool = True) -> Call:
    """Validate a call. ``resolve(x_shape, w_shape)`` returns its ConvGeometry. ``check_layout``:
    warn (:class:`LayoutWarning`) of a bias-less transposed weight shaped as torch's layout would be
    (a layer checks once, when it is built)."""
    x = _as_float_array(x, "x")
    weight = _as_float_array(weight, "weight")
    geometry = resolve(x.shape, weight.shape)
    unbatched = x.ndim == 3
    if unbatched:
        x = x[np.newaxis]
    dtype = np.result_type(x.dtype, weight.dtype)
    if bias is not None:
        _reject_masked(bias, "bias")
        bias_array = np.asarray(bias)
        if bias_array.dtype.kind not in "fiu":
            raise TypeError(f"bias has dtype {bias_array.dtype}; it must be real numbers ({_SUPPORTED_NAMES})")
        if bias_array.shape != (geometry.out_channels,):
            raise ValueError(f"bias must have shape (C_out,) = ({geometry.out_channels},), got {bias_array.shape}"
                             + _bias_hint(bias_array.shape, weight.shape, geometry))
        bias = _aligned(bias_array.astype(dtype, copy=False))
    elif transposed and check_layout and _looks_like_torch_transposed(weight.shape):
        _warn_layout(weight.shape)
    call = Call(x, weight, bias, geometry, dtype, unbatched, out)
    if out is not None:
        check_out(out, call.result_shape, dtype, (("x", x), ("weight", weight), ("bias", bias)))
    return call


def prepare_conv_transpose2d(x, weight, bias, out, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                             output_size=None) -> Call:
    """:func:`prepare` for a conv_transpose2d call with these parameters."""
    return prepare(x, weight, bias, out, transposed=True, resolve=lambda xs, ws: resolve_conv_transpose2d(
        xs, ws, stride, padding, output_padding, dilation, groups, output_size))


def prepare_conv2d(x, weight, bias, out, stride=1, padding=0, dilation=1, groups=1) -> Call:
    """:func:`prepare` for a conv2d call with these parameters."""
    return prepare(x, weight, bias, out, transposed=False, resolve=lambda xs, ws: resolve_conv2d(
        xs, ws, stride, padding, dilation, groups))


def check_out(out, shape, dtype, inputs) -> None:
    """out= must be a writeable C-contiguous ndarray of exactly (shape, dtype), sharing no memory
    with any of the (name, array) inputs."""
    if not isinstance(out, np.ndarray) or isinstance(out, np.ma.MaskedArray):
        raise ValueError(f"out must be a numpy array (not a masked array), got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(
            f"out must be a writeable C-contiguous array of shape {shape} and dtype {dtype}, got shape "
            f"{out.shape}, dtype {out.dtype}, C-contiguous={out.flags.c_contiguous}, "
            f"writeable={out.flags.writeable}"
        )
    check_no_overlap(out, inputs)


def check_no_overlap(out: np.ndarray, inputs) -> None:
    """out= must share no memory with any of the (name, array) inputs."""
    for name, array in inputs:
        if array is not None and np.may_share_memory(out, array):
            raise ValueError(f"out must not overlap {name}")


def finish(call: Call, y: np.ndarray) -> np.ndarray:
    """Cast y (N, Ho, Wo, C_out) to the result dtype, drop the batch axis if unbatched, fill out=."""
    if call.unbatched:
        y = y[0]
    if call.out is not None:
        if not np.may_share_memory(call.out, y):
            call.out[...] = y
        return call.out
    return y.astype(call.dtype, copy=False)


def is_dask(x) -> bool:
    """x is a dask collection, told by its type's module (so that numpy calls never import dask);
    the callers then hand it to :mod:`fastdeconv.dask`."""
    return type(x).__module__.startswith("dask.")

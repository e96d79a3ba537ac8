"""The types of the public API's arguments (for annotations; nothing here runs)."""

from __future__ import annotations

from typing import Union

import numpy as np
import numpy.typing as npt

__all__ = ["ArrayLike", "IntPair", "Padding", "NDArray"]

#: x, weight, bias: numpy arrays or anything np.asarray takes (a dask array for x, see fastdeconv.dask)
ArrayLike = npt.ArrayLike
#: the result: float16, float32 or float64
NDArray = npt.NDArray[np.floating]
#: stride, dilation, output_padding, output_size: an int or (h, w)
IntPair = Union[int, "tuple[int, int]"]
#: padding: an int, (ph, pw), ((top, bottom), (left, right)), "same" or "valid"
Padding = Union[int, "tuple[int, int]", "tuple[tuple[int, int], tuple[int, int]]", str]

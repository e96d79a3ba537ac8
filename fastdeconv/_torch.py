"""from_torch: a torch.nn.ConvTranspose2d / Conv2d module as fastdeconv's layer, weights converted.

torch is never imported here: a torch module can only exist once its caller has imported torch, so
the function finds torch in ``sys.modules`` (and anything given while torch is not imported is not a
torch module).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Union

import numpy as np

from ._call import LayoutWarning
from ._layers import Conv2d, ConvTranspose2d

__all__ = ["from_torch"]

Padding = Union[int, tuple[int, int], tuple[tuple[int, int], tuple[int, int]]]


def _numpy(tensor: Any) -> np.ndarray:
    """A parameter's values as a new numpy array, off the GPU and out of autograd; bfloat16 (which numpy
    has no type for) as float32, which holds it exactly."""
    tensor = tensor.detach().cpu()
    if str(tensor.dtype) == "torch.bfloat16":
        tensor = tensor.float()
    return np.array(tensor.numpy())


def _pair(value: Any, name: str, module: Any) -> tuple[int, int]:
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise ValueError(f"{type(module).__name__}.{name} = {value!r}: expected two integers")
    return int(items[0]), int(items[1])


def _conv_padding(module: Any) -> Padding:
    """torch Conv2d's padding as conv2d's: 'valid' is 0; 'same' (torch allows it with stride 1 only) is
    torch's own explicit padding, the total d·(k − 1) per axis split with the odd one at the bottom /
    right, so that the layer then takes any input size, as torch's does."""
    padding = module.padding
    if padding == "valid":
        return 0
    if padding == "same":
        pads = []
        for k, d in zip(module.kernel_size, module.dilation):
            total = d * (k - 1)
            pads.append((total // 2, total - total // 2))
        return (pads[0], pads[1])
    return _pair(padding, "padding", module)


def from_torch(module: Any, *, algorithm: str | None = None,
               backend: str = "cpu") -> ConvTranspose2d | Conv2d:
    """Make fastdeconv's layer out of a torch ``ConvTranspose2d`` or ``Conv2d`` module.

    The weight is converted to fastdeconv's layout (a copy: later changes to the module do not reach
    the layer), and the bias, stride, padding, output padding, dilation and groups are carried over,
    so that ``layer(x)`` on NHWC data equals ``module(x)`` on the same data in NCHW. torch is not
    imported by fastdeconv (neither here nor at ``import fastdeconv``).

    Parameters
    ----------
    module : torch.nn.ConvTranspose2d or torch.nn.Conv2d
        Any device and floating dtype (float16, float32, float64; bfloat16 becomes float32); a
        subclass of either counts as it.
    algorithm, backend : str, optional
        As for :class:`ConvTranspose2d` / :class:`Conv2d`.

    Returns
    -------
    ConvTranspose2d or Conv2d
        The weight, in fastdeconv's dtype as in torch's, becomes

        * ``torch.nn.ConvTranspose2d``: (C_in, C_out/groups, kH, kW) ->
          (C_in, kH, kW, C_out/groups), ``weight.transpose(0, 2, 3, 1)``;
        * ``torch.nn.Conv2d``: (C_out, C_in/groups, kH, kW) -> (C_out, kH, kW, C_in/groups), also
          ``weight.transpose(0, 2, 3, 1)``.

    Raises
    ------
    TypeError
        ``module`` is neither, naming its type (a ``Conv1d``, ``Conv3d``, a whole network, ...:
        convert each 2-D convolution module on its own).
    ValueError
        ``padding_mode`` other than 'zeros' (reflect, replicate and circular padding are not
        computed by fastdeconv); a lazy module not yet run (its weight has no shape); padding that
        is not integers on a ``ConvTranspose2d``.

    Notes
    -----
    ``Conv2d(padding="valid")`` becomes ``padding=0``; ``Conv2d(padding="same")`` (torch allows it
    with stride 1 only) becomes torch's explicit padding: in total ``dilation·(k − 1)`` per axis,
    ``total // 2`` at the top/left and the rest at the bottom/right, which is what torch computes
    and also what fastdeconv's ``padding="same"`` gives at stride 1, but fixed, as torch's is.

    Examples
    --------
    >>> import numpy as np, torch, fastdeconv
    >>> _ = torch.manual_seed(0)
    >>> up = torch.nn.ConvTranspose2d(8, 4, kernel_size=4, stride=2, padding=1)
    >>> layer = fastdeconv.from_torch(up)
    >>> layer.weight.shape                  # (C_in, kH, kW, C_out)
    (8, 4, 4, 4)
    >>> x = np.random.default_rng(0).standard_normal((1, 16, 16, 8), dtype=np.float32)   # NHWC
    >>> y = layer(x)
    >>> y.shape
    (1, 32, 32, 4)
    >>> with torch.no_grad():
    ...     expected = up(torch.from_numpy(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1).numpy()
    >>> bool(np.allclose(y, expected, atol=1e-5))
    True
    """
    torch = sys.modules.get("torch")
    nn: Any = getattr(torch, "nn", None)
    transposed_type = getattr(nn, "ConvTranspose2d", None)
    conv_type = getattr(nn, "Conv2d", None)
    transposed = transposed_type is not None and isinstance(module, transposed_type)
    if not transposed and not (conv_type is not None and isinstance(module, conv_type)):
        kind = type(module)
        raise TypeError(f"from_torch takes a torch.nn.ConvTranspose2d or torch.nn.Conv2d, got "
                        f"{kind.__module__}.{kind.__qualname__}")
    name = type(module).__name__
    if module.padding_mode != "zeros":
        raise ValueError(f"{name} has padding_mode={module.padding_mode!r}: fastdeconv pads with zeros only "
                         "(padding_mode='zeros')")
    if nn.parameter.is_lazy(module.weight):
        raise ValueError(f"{name} is a lazy module whose weight has no shape yet: run it on an input first")
    weight = _numpy(module.weight).transpose(0, 2, 3, 1)
    bias = None if module.bias is None else _numpy(module.bias)
    stride = _pair(module.stride, "stride", module)
    dilation = _pair(module.dilation, "dilation", module)
    groups = int(module.groups)
    with warnings.catch_warnings():
        # a converted weight is in fastdeconv's layout by construction: no guessing about torch's
        warnings.simplefilter("ignore", LayoutWarning)
        if transposed:
            if isinstance(module.padding, str) or not all(isinstance(p, int) for p in module.padding):
                raise ValueError(f"{name} has padding={module.padding!r}: a ConvTranspose2d's padding must be "
                                 "integers (torch accepts no 'same' or 'valid' there)")
            return ConvTranspose2d(weight, bias, stride, _pair(module.padding, "padding", module),
                                   output_padding=_pair(module.output_padding, "output_padding", module),
                                   dilation=dilation, groups=groups, algorithm=algorithm, backend=backend)
        return Conv2d(weight, bias, stride, _conv_padding(module), dilation=dilation, groups=groups,
                      algorithm=algorithm, backend=backend)

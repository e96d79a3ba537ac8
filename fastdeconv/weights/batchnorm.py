"""Folding an inference-mode BatchNorm into the (transposed) convolution before it."""

from __future__ import annotations

import numpy as np

from .. import _params
from .layouts import four_d, transposed_by_group

__all__ = ["fold_batchnorm"]


def fold_batchnorm(weight, bias, gamma, beta, mean, var, eps, *, transposed: bool, groups: int = 1):
    """(weight, bias) of a (transposed) convolution followed by inference-mode BatchNorm, in our layouts.

    Per output channel c: ``scale[c] = gamma[c] / sqrt(var[c] + eps)``, ``bias'[c] = beta[c] +
    (bias[c] − mean[c])·scale[c]`` (bias = 0 when None), and every weight feeding output channel c is
    multiplied by scale[c] -- Apple's formula too (``I = gamma / sqrt(variance + epsilon), J = beta - ( I *
    mean )``, ``W = w * I``, ``B = b * I + J``, MPSCNNConvolutionDescriptor
    setBatchNormalizationParametersForInference).

    * convolution, weight (C_out, kH, kW, C_in/g): ``weight'[c] = weight[c]·scale[c]``;
    * transposed, weight (C_in, kH, kW, Cog) with Cig = C_in/groups: output channel g·Cog + o scales
      ``weight[g·Cig:(g+1)·Cig, :, :, o]``.

    ``eps`` is explicit (MXNet's default 1e-3, torch's and ONNX's 1e-5). Computed in float64; the weight
    keeps its floating dtype (float32 for other inputs) and the bias has the same dtype.

    Examples
    --------
    The folded layer computes what the layer followed by the BatchNorm computes:

    >>> import numpy as np, fastdeconv
    >>> from fastdeconv import weights
    >>> rng = np.random.default_rng(0)
    >>> w, b = rng.standard_normal((4, 3, 3, 2)), rng.standard_normal(2)       # (C_in, kH, kW, C_out)
    >>> gamma, beta, mean, var = rng.random(2) + 0.5, rng.standard_normal(2), rng.standard_normal(2), rng.random(2)
    >>> wf, bf = weights.fold_batchnorm(w, b, gamma, beta, mean, var, eps=1e-5, transposed=True)
    >>> x = rng.standard_normal((1, 5, 5, 4))
    >>> y = fastdeconv.conv_transpose2d(x, w, b, stride=2)
    >>> bn = (y - mean) / np.sqrt(var + 1e-5) * gamma + beta
    >>> bool(np.allclose(fastdeconv.conv_transpose2d(x, wf, bf, stride=2), bn))
    True
    """
    weight = four_d(weight)
    if transposed:
        by_group = transposed_by_group(weight, groups)
        out_channels = groups * by_group.shape[-1]
    else:
        _params.check_groups(groups)
        out_channels = weight.shape[0]
    dtype = weight.dtype if weight.dtype.kind == "f" else np.dtype(np.float32)
    vectors = {}
    for name, value in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var), ("bias", bias)):
        if value is None and name == "bias":
            value = np.zeros(out_channels)
        array = np.asarray(value, dtype=np.float64)
        if array.shape != (out_channels,):
            raise ValueError(f"{name} must have shape (C_out,) = ({out_channels},) for weight {weight.shape} "
                             f"(transposed={transposed}, groups={groups}), got shape {array.shape}")
        vectors[name] = array
    if not np.isscalar(eps) or not eps >= 0:
        raise ValueError(f"eps must be a number >= 0, got eps={eps!r}")
    if np.any(vectors["var"] + eps <= 0):
        raise ValueError(f"var + eps must be > 0 in every channel, got min(var)={vectors['var'].min()!r}, eps={eps!r}")
    scale = vectors["gamma"] / np.sqrt(vectors["var"] + eps)
    folded_bias = vectors["beta"] + (vectors["bias"] - vectors["mean"]) * scale
    if transposed:
        # Output channel g·Cog + o is column o of group g's block.
        folded = by_group.astype(np.float64) * scale.reshape(groups, 1, 1, 1, -1)
    else:
        folded = weight.astype(np.float64) * scale[:, None, None, None]
    return folded.reshape(weight.shape).astype(dtype), folded_bias.astype(dtype)

"""onnx.reference, corrected where it departs from the ONNX spec (see :mod:`.verify`): Conv (SAME
auto_pad on odd sizes), ConvTranspose (groups, output_shape, SAME auto_pad) and inference-mode
BatchNormalization. Used by the graph reader
(shapes inference cannot find) and by the verification; it imports neither."""

from __future__ import annotations

import numpy as np

__all__ = ["reference_ops"]


def _spec_conv_transpose(run, X, W, B=None, auto_pad=None, dilations=None, group=None, kernel_shape=None,
                         output_padding=None, output_shape=None, pads=None, strides=None):
    """ConvTranspose per the ONNX spec through ``run`` (onnx.reference's ungrouped implementation)."""
    spatial = X.ndim - 2
    group = int(group or 1)
    strides = list(strides or [1] * spatial)
    dilations = list(dilations or [1] * spatial)
    output_padding = list(output_padding or [0] * spatial)
    kernel = W.shape[2:]
    auto_pad = auto_pad or "NOTSET"
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # total_padding = s·(in − 1) + output_padding + ((k − 1)·d + 1) − output_shape (output_shape = in·s
        # for SAME); SAME_UPPER: begin = total // 2, otherwise begin = total − total // 2. A negative
        # total (a larger output) adds rows at the end, as onnxruntime does.
        target = list(output_shape)[-spatial:] if output_shape is not None else \
            [X.shape[i + 2] * strides[i] for i in range(spatial)]
        begins, ends = [], []
        for i in range(spatial):
            total = (strides[i] * (X.shape[i + 2] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
                     - int(target[i]))
            if total >= 0:
                begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
                begins.append(begin)
                ends.append(total - begin)
            else:
                begins.append(0)
                ends.append(0)
                output_padding[i] -= total
        pads = begins + ends
    elif auto_pad == "VALID" or pads is None:
        pads = [0] * (2 * spatial)
    arguments = dict(auto_pad="NOTSET", dilations=dilations, kernel_shape=list(kernel),
                     output_padding=output_padding, output_shape=None, pads=list(pads), strides=strides)
    if group == 1:
        return run(X, W, B, group=1, **arguments)[0]
    in_per_group, out_per_group = X.shape[1] // group, W.shape[1]
    parts = [run(X[:, g * in_per_group:(g + 1) * in_per_group], W[g * in_per_group:(g + 1) * in_per_group],
                 None if B is None else B[g * out_per_group:(g + 1) * out_per_group], group=1, **arguments)[0]
             for g in range(group)]
    return np.concatenate(parts, axis=1)


def _same_pads(X, W, auto_pad, dilations, strides) -> list:
    """Conv's SAME_UPPER / SAME_LOWER pads per the spec: out = ceil(in / s), total = max((out − 1)·s +
    (k − 1)·d + 1 − in, 0); SAME_UPPER puts the odd one at the end. (onnx.reference 1.21 gets odd sizes
    wrong: a 27-wide input with stride 2 gives 13 columns, not 14.)"""
    spatial = X.ndim - 2
    strides = list(strides or [1] * spatial)
    dilations = list(dilations or [1] * spatial)
    begins, ends = [], []
    for i in range(spatial):
        size = X.shape[i + 2]
        out = -(-size // strides[i])
        total = max((out - 1) * strides[i] + (W.shape[i + 2] - 1) * dilations[i] + 1 - size, 0)
        begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        begins.append(begin)
        ends.append(total - begin)
    return begins + ends


def reference_ops() -> list:
    """``new_ops`` for onnx.reference.ReferenceEvaluator: Conv (SAME padding), ConvTranspose and
    BatchNormalization per the ONNX spec (see the module docstring), in that order."""
    from onnx.reference.op_run import OpRun
    from onnx.reference.ops.op_conv import Conv as _BuiltinConv
    from onnx.reference.ops.op_conv_transpose import ConvTranspose as _Builtin

    class Conv(_BuiltinConv):
        op_domain = ""

        def _run(self, X, W, B=None, auto_pad=None, dilations=None, group=None, kernel_shape=None, pads=None,
                 strides=None):
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                pads, auto_pad = _same_pads(X, W, auto_pad, dilations, strides), "NOTSET"
            return super()._run(X, W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                                kernel_shape=kernel_shape, pads=pads, strides=strides)

    class ConvTranspose(_Builtin):
        op_domain = ""

        def _run(self, X, W, B=None, **attributes):
            return (_spec_conv_transpose(super()._run, X, W, B, **attributes).astype(X.dtype),)

    class BatchNormalization(OpRun):
        op_domain = ""

        def _run(self, x, scale, bias, mean, var, **attributes):
            outputs = [name for name in self.onnx_node.output if name]
            if len(outputs) > 1 or attributes.get("training_mode"):
                raise NotImplementedError(f"BatchNormalization {self.onnx_node.name!r} in training mode")
            epsilon = attributes.get("epsilon")
            epsilon = 1e-5 if epsilon is None else epsilon
            shape = (-1,) + (1,) * (x.ndim - 2)
            y = (scale.reshape(shape) * (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon)
                 + bias.reshape(shape))
            return (y.astype(x.dtype),)

    return [Conv, ConvTranspose, BatchNormalization]

"""Write fastdeconv/convert/default_decoder.onnx: the small DCGAN-like decoder that `python -m fastdeconv convert
OUTDIR` converts when no model is given.

    z (N, 16, 1, 1)
    deconv1  ConvTranspose 16 -> 32, k4, s1            + BatchNormalization (eps 1e-5) + Relu   1x1 -> 4x4
    deconv2  ConvTranspose 32 -> 16, k4, s2, p1, g2    + BatchNormalization (eps 1e-3) + Relu   4x4 -> 8x8
    deconv3  ConvTranspose 16 -> 8, k3, s2, dilation 2, pads (top 1, left 2, bottom 3, right 2),
             output_padding 1, g2                      + BatchNormalization (eps 1e-5) + Relu   8x8 -> 16x16
    deconv4  ConvTranspose 8 -> 3, k4, s2, p1, bias    + Tanh                                   16x16 -> 32x32

Random weights and BatchNorm statistics from a fixed seed; every grouped layer keeps 8 input and 4 or 8
output channels per group, so MPSCNNConvolutionTranspose can run all four layers.

    python scripts/make_default_model.py [OUTPUT]   (default: fastdeconv/convert/default_decoder.onnx)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 20240611
LATENT = 16
# name, C_in, C_out, kernel, attributes, BatchNorm epsilon (None: no BN, the layer has a bias), activation
LAYERS = [
    ("deconv1", 16, 32, 4, {"strides": [1, 1]}, 1e-5, "Relu"),
    ("deconv2", 32, 16, 4, {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2}, 1e-3, "Relu"),
    ("deconv3", 16, 8, 3, {"strides": [2, 2], "dilations": [2, 2], "pads": [1, 2, 3, 2],
                           "output_padding": [1, 1], "group": 2}, 1e-5, "Relu"),
    ("deconv4", 8, 3, 4, {"strides": [2, 2], "pads": [1, 1, 1, 1]}, None, "Tanh"),
]


def build_model() -> onnx.ModelProto:
    rng = np.random.default_rng(SEED)
    nodes, initializers = [], []

    def add(name, array):
        initializers.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), name))
        return name

    current = "z"
    for name, cin, cout, k, attributes, epsilon, activation in LAYERS:
        groups = attributes.get("group", 1)
        fan_in = cin // groups * k * k
        inputs = [current, add(f"{name}.weight", rng.standard_normal((cin, cout // groups, k, k)) / np.sqrt(fan_in))]
        if epsilon is None:
            inputs.append(add(f"{name}.bias", 0.1 * rng.standard_normal(cout)))
        nodes.append(helper.make_node("ConvTranspose", inputs, [f"{name}.out"], name=name,
                                      kernel_shape=[k, k], **attributes))
        current = f"{name}.out"
        if epsilon is not None:
            bn = f"{name}.bn"
            nodes.append(helper.make_node(
                "BatchNormalization",
                [current,
                 add(f"{bn}.gamma", rng.uniform(0.5, 1.5, cout)), add(f"{bn}.beta", 0.1 * rng.standard_normal(cout)),
                 add(f"{bn}.mean", 0.1 * rng.standard_normal(cout)), add(f"{bn}.var", rng.uniform(0.5, 1.5, cout))],
                [f"{bn}.out"], name=bn, epsilon=epsilon))
            current = f"{bn}.out"
        nodes.append(helper.make_node(activation, [current], [f"{name}.act"], name=f"{name}.{activation.lower()}"))
        current = f"{name}.act"

    graph = helper.make_graph(
        nodes, "default_decoder",
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", LATENT, 1, 1])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, ["N", 3, 32, 32])],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="fastdeconv scripts/make_default_model.py")
    model.ir_version = 8   # readable by older onnx / onnxruntime too
    onnx.checker.check_model(model)
    return model


def main(argv) -> int:
    output = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "fastdeconv" / "convert" / "default_decoder.onnx"
    model = build_model()
    onnx.save(model, str(output))
    print(f"wrote {output} ({output.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

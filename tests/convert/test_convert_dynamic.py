"""fastdeconv convert on what exporters write: symbolic input sizes (the default size search and
--input-shape), paddle2onnx-style graphs (weights in Constant nodes, a conv's bias as a separate Add,
BatchNormalization after ConvTranspose + Add), tf2onnx-style graphs (NHWC inputs with Transpose pairs,
weights behind a Transpose), and names kept exactly, with a network check that fails when they do not
match."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fastdeconv.convert import ConversionError, verify_directory
from fastdeconv.convert.graph import DEFAULT_SIZES, OnnxGraph, parse_input_shape

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_helpers import f32, read_manifest, run_convert, save_model  # noqa: E402


def _constant(name, value):
    """A Constant node, as paddle2onnx stores every weight."""
    return helper.make_node("Constant", [], [name], name=f"const_{name}",
                            value=numpy_helper.from_array(np.asarray(value, np.float32), name))


def _odd_size_model(path, batch="n"):
    """Conv k3 s2 (no padding) then ConvTranspose k3 s2 gives back H only for odd H; the Concat with the
    input needs that, so shape inference refuses 64 and accepts 65."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["down"], name="down", strides=[2, 2]),
             helper.make_node("ConvTranspose", ["down", "w2"], ["up"], name="up", strides=[2, 2]),
             helper.make_node("Concat", ["up", "x"], ["cat"], name="cat", axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"], name="head", pads=[1, 1, 1, 1])]
    init = {"w1": f32(rng, 4, 3, 3, 3), "w2": f32(rng, 4, 3, 3, 3), "w3": f32(rng, 2, 6, 3, 3)}
    return save_model(path, nodes, init, {"x": [batch, 3, "height", "width"]}, {"y": [batch, 2, "height", "width"]})


# ------------------------------------------------------------------------------------ dynamic sizes

def test_symbolic_height_and_width_take_the_first_size_inference_accepts(tmp_path, capsys):
    model = _odd_size_model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    assert run_convert(model, out) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert "note: graph input 'x' ?x3x?x? is converted and verified at ?x3x65x65 (default size)" in captured.err
    summary = captured.out.splitlines()[-1]
    assert summary.startswith("converted 3 layers (0 BatchNorm folded); skipped 1 node: Concat×1; ")
    assert "(passed); input 'x' at ?x3x65x65 (default size; the model declares ?x3x?x?); wrote" in summary
    manifest = read_manifest(out)
    assert manifest["graph_inputs"] == [{"name": "x", "shape": [None, 3, 65, 65],
                                         "declared_shape": [None, 3, None, None], "shape_source": "default size"}]
    assert manifest["verification"]["network"]["inputs"] == {"x": [1, 3, 65, 65]}
    assert [layer["input_shape_nhwc"] for layer in manifest["layers"]] == [[1, 65, 65, 3], [1, 32, 32, 4],
                                                                           [1, 65, 65, 6]]
    # verify_directory reads the size back from the manifest
    assert verify_directory(model, out).status == "passed"


def test_a_size_too_small_for_the_kernel_is_passed_over(tmp_path, capsys):
    """A dilated 3x3 kernel spans 101 pixels: shape inference gives negative sizes below that."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="wide", dilations=[50, 50])]
    model = save_model(tmp_path / "m.onnx", nodes, {"w": f32(rng, 2, 2, 3, 3)}, {"x": [1, 2, "h", "w"]},
                  {"y": [1, 2, "h2", "w2"]})
    assert run_convert(model, tmp_path / "out") == 0, capsys.readouterr().err
    assert "input 'x' at 1x2x101x101 (default size" in capsys.readouterr().out
    assert 101 in DEFAULT_SIZES


def test_input_shape_fixes_the_size_and_the_batch(tmp_path, capsys):
    model = _odd_size_model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    assert run_convert("--input-shape", "x:2,3,41,47", model, out) == 0, capsys.readouterr().err
    manifest = read_manifest(out)
    assert manifest["graph_inputs"][0]["shape"] == [2, 3, 41, 47]
    assert manifest["graph_inputs"][0]["shape_source"] == "--input-shape"
    assert manifest["verification"]["network"]["inputs"] == {"x": [2, 3, 41, 47]}
    assert "input 'x' at 2x3x41x47 (--input-shape; the model declares ?x3x?x?)" in capsys.readouterr().out
    assert verify_directory(model, out).inputs == {"x": (2, 3, 41, 47)}


def test_no_accepted_size_names_the_option(tmp_path, capsys):
    """An Add with a constant 5x5 map accepts only H = W = 5, which is not a default size."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "map"], ["y"], name="add_map")]
    init = {"w": f32(rng, 2, 2, 3, 3), "map": f32(rng, 1, 2, 5, 5)}
    model = save_model(tmp_path / "m.onnx", nodes, init, {"x": [1, 2, "h", "w"]}, {"y": [1, 2, "h", "w"]})
    assert run_convert(model, tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert "shape inference accepts none of the sizes 64..1024 for the symbolic height and width of x 1x2x?x?" in err
    assert "give the size with --input-shape NAME:N,C,H,W" in err
    assert run_convert("--input-shape", "x:1,2,5,5", model, tmp_path / "out") == 0, capsys.readouterr().err


@pytest.mark.parametrize("argument, message", [
    ("y:1,3,65,65", "m.onnx has no graph input 'y'; its inputs are x ?x3x?x?"),
    ("x:1,3,65", "the model declares rank 4 (?x3x?x?), got 3 sizes"),
    ("x:1,4,65,65", "axis 1 is 3 in the model (?x3x?x?); only symbolic dimensions can be given"),
    ("x:1,3,0,65", "every size must be >= 1"),
    ("x:1,3,64,64", "cannot read"),   # the Concat needs an odd size
])
def test_bad_input_shapes_exit_1_and_say_why(tmp_path, capsys, argument, message):
    model = _odd_size_model(tmp_path / "m.onnx")
    assert run_convert("--input-shape", argument, model, tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("arguments", [["x=1,3,65,65"], ["x:1,3,a,65"], [":1,3,65,65"],
                                       ["x:1,3,65,65", "x:1,3,67,67"]])
def test_malformed_input_shape_is_a_usage_error(tmp_path, capsys, arguments):
    model = _odd_size_model(tmp_path / "m.onnx")
    options = [a for text in arguments for a in ("--input-shape", text)]
    assert run_convert(*options, model, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --input-shape") and ("NAME:N,C,H,W" in err or "given twice" in err)


def test_parse_input_shape_splits_at_the_last_colon():
    assert parse_input_shape("encoder:input:0:1,3,8,8") == ("encoder:input:0", (1, 3, 8, 8))
    with pytest.raises(ValueError, match="expected NAME:N,C,H,W"):
        parse_input_shape("1,3,8,8")


def test_static_model_is_unchanged(tmp_path):
    model = _odd_size_model(tmp_path / "m.onnx")
    graph = OnnxGraph.load(model, {"x": (1, 3, 9, 9)})
    assert graph.input_shapes["x"] == {"declared": (None, 3, None, None), "shape": (1, 3, 9, 9),
                                       "source": "--input-shape"}
    with pytest.raises(ConversionError, match="has no graph input 'z'"):
        OnnxGraph.load(model, {"z": (1, 3, 9, 9)})


# ------------------------------------------------------------------------------- exporters' habits

def _paddle_style_model(path, rng):
    """As paddle2onnx writes a detector (IR 8, opset 12, dynamic H/W): weights in Constant nodes; each
    Conv without bias, then an Add of a (1, C, 1, 1) bias, then BatchNormalization; a squeeze-excite
    gate (GlobalAveragePool, Conv, HardSigmoid, Mul); Clip with its bounds as Constant inputs; Resize;
    Concat; ConvTranspose + bias Add + BatchNormalization + Sigmoid."""
    bn = {}
    for prefix, channels in (("bn1", 8), ("bn4", 2)):
        for key, value in (("gamma", rng.uniform(0.5, 1.5, channels)), ("beta", rng.standard_normal(channels)),
                           ("mean", rng.standard_normal(channels)), ("var", rng.uniform(0.5, 1.5, channels))):
            bn[f"{prefix}.{key}"] = value
    weights = {"w1": f32(rng, 8, 3, 3, 3), "b1": f32(rng, 1, 8, 1, 1), "w2": f32(rng, 8, 8, 1, 1),
               "b2": f32(rng, 8), "w3": f32(rng, 8, 8, 3, 3), "b3": f32(rng, 1, 8, 1, 1),
               "w4": f32(rng, 16, 2, 2, 2), "b4": f32(rng, 1, 2, 1, 1), "clip_min": np.float32(0),
               "clip_max": np.float32(6), "roi": np.array([0, 0, 0, 0, 1, 1, 1, 1], np.float32),
               "scales": np.array([1, 1, 2, 2], np.float32), **bn}
    nodes = [_constant(name, value) for name, value in weights.items()] + [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv2d_0", strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c1", "b1"], ["a1"], name="elementwise_add_0"),
        helper.make_node("BatchNormalization", ["a1", "bn1.gamma", "bn1.beta", "bn1.mean", "bn1.var"], ["n1"],
                         name="batch_norm_0", epsilon=1e-5),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu_0"),
        helper.make_node("GlobalAveragePool", ["r1"], ["g"], name="pool2d_0"),
        helper.make_node("Conv", ["g", "w2", "b2"], ["s"], name="conv2d_1"),
        helper.make_node("HardSigmoid", ["s"], ["h"], name="hard_sigmoid_0", alpha=0.2, beta=0.5),
        helper.make_node("Mul", ["r1", "h"], ["m"], name="elementwise_mul_0"),
        helper.make_node("Conv", ["m", "w3"], ["c3"], name="conv2d_2", strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c3", "b3"], ["a3"], name="elementwise_add_1"),
        helper.make_node("Clip", ["a3", "clip_min", "clip_max"], ["k3"], name="clip_0"),
        helper.make_node("Resize", ["k3", "roi", "scales"], ["up"], name="nearest_interp_v2_0", mode="nearest"),
        helper.make_node("Concat", ["up", "m"], ["cat"], name="concat_0", axis=1),
        helper.make_node("ConvTranspose", ["cat", "w4"], ["t"], name="conv2d_transpose_0", strides=[2, 2]),
        helper.make_node("Add", ["t", "b4"], ["a4"], name="elementwise_add_2"),
        helper.make_node("BatchNormalization", ["a4", "bn4.gamma", "bn4.beta", "bn4.mean", "bn4.var"], ["n4"],
                         name="batch_norm_1", epsilon=1e-5),
        helper.make_node("Sigmoid", ["n4"], ["y"], name="sigmoid_0"),
    ]
    dynamic = ["p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1", "p2o.DynamicDimension.2"]
    return save_model(path, nodes, {}, {"x": dynamic}, {"y": ["p2o.DynamicDimension.0", 2, "p2o.DynamicDimension.3",
                                                           "p2o.DynamicDimension.4"]}, opset=12, ir_version=8)


def test_paddle2onnx_style_graph_converts_every_conv_and_folds_every_bias_and_batchnorm(tmp_path, capsys):
    model = _paddle_style_model(tmp_path / "det.onnx", np.random.default_rng(5))
    out = tmp_path / "out"
    assert run_convert("--verify-model", model, out) == 0, capsys.readouterr().err
    summary = capsys.readouterr().out.splitlines()[-1]
    assert summary.startswith("converted 4 layers (2 BatchNorm, 3 Add/Sub/Mul/Div folded); skipped 4 nodes: ")
    assert "input 'x' at ?x3x64x64 (default size" in summary
    manifest = read_manifest(out)
    layers = {layer["onnx_node"]: layer for layer in manifest["layers"]}
    assert [e["op"] for e in layers["conv2d_0"]["folded"]] == ["Add", "BatchNormalization"]
    assert [e["op"] for e in layers["conv2d_transpose_0"]["folded"]] == ["Add", "BatchNormalization"]
    assert [e["op"] for e in layers["conv2d_2"]["folded"]] == ["Add"]
    assert layers["conv2d_2"]["activation"]["op"] == "Clip" and layers["conv2d_2"]["activation"]["max"] == 6.0
    assert layers["conv2d_1"]["activation"]["op"] == "HardSigmoid"
    assert sorted(s["op"] for s in manifest["skipped"]) == ["Concat", "GlobalAveragePool", "Mul", "Resize"]
    assert layers["conv2d_0"]["activation"]["op"] == "Relu"
    network = manifest["verification"]["network"]
    assert network["status"] == "passed" and network["inputs"] == {"x": [1, 3, 64, 64]}


def _tf_style_model(path, rng):
    """As tf2onnx writes a Keras decoder: an NHWC input (dynamic H/W), a Transpose to NCHW, weights
    stored HWIO / (kH, kW, C_out, C_in) behind Transpose nodes, the bias in the Conv, a Mul by a scalar
    (a Rescaling layer), and a Transpose back to NHWC."""
    init = {"w1_hwio": f32(rng, 3, 3, 3, 8), "b1": f32(rng, 8), "w2_hwoi": f32(rng, 4, 4, 4, 8),
            "b2": f32(rng, 4), "half": np.float32(0.5)}
    nodes = [
        helper.make_node("Transpose", ["x"], ["x_nchw"], name="conv2d__6", perm=[0, 3, 1, 2]),
        helper.make_node("Transpose", ["w1_hwio"], ["w1"], name="conv2d/kernel__transpose", perm=[3, 2, 0, 1]),
        helper.make_node("Conv", ["x_nchw", "w1", "b1"], ["c1"], name="model/conv2d/BiasAdd", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="model/conv2d/Relu"),
        # conv2d_transpose's (kH, kW, C_out, C_in) -> ONNX (C_in, C_out, kH, kW)
        helper.make_node("Transpose", ["w2_hwoi"], ["w2"], name="conv2d_transpose/kernel__t", perm=[3, 2, 0, 1]),
        helper.make_node("ConvTranspose", ["r1", "w2", "b2"], ["t"], name="model/conv2d_transpose/BiasAdd",
                         strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["t", "half"], ["scaled"], name="model/rescaling/mul"),
        helper.make_node("Tanh", ["scaled"], ["tanh"], name="model/activation/Tanh"),
        helper.make_node("Transpose", ["tanh"], ["y"], name="model/out__transpose", perm=[0, 2, 3, 1]),
    ]
    return save_model(path, nodes, init, {"x": ["unk__1", "unk__2", "unk__3", 3]}, {"y": ["unk__1", "unk__4", "unk__5", 4]},
                 opset=13)


def test_tf2onnx_style_nhwc_graph_converts(tmp_path, capsys):
    model = _tf_style_model(tmp_path / "keras.onnx", np.random.default_rng(6))
    out = tmp_path / "out"
    assert run_convert("--verify-model", model, out) == 0, capsys.readouterr().err
    summary = capsys.readouterr().out.splitlines()[-1]
    assert summary.startswith("converted 2 layers (0 BatchNorm, 1 Add/Sub/Mul/Div folded); skipped 2 nodes: "
                              "Transpose×2; ")
    assert "input 'x' at ?x64x64x3 (default size; the model declares ?x?x?x3)" in summary
    layers = read_manifest(out)["layers"]
    assert [layer["weight_source"] for layer in layers] == ["w1_hwio", "w2_hwoi"]
    assert layers[1]["activation"]["op"] == "Tanh" and layers[1]["folded"][0]["node"] == "model/rescaling/mul"


# ----------------------------------------------------------------------------------- names, exactly

def test_odd_node_and_tensor_names_round_trip_and_a_foreign_manifest_fails(tmp_path, capsys):
    """Names with brackets and runs of spaces are written as they are, so the network check finds its
    layers; a manifest whose names do not match the model fails the check instead of comparing the
    model with itself."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Conv", ["x", "w"], ["t[3,   4]"], name="n[3,   4]", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["t[3,   4]"], ["y"], name="relu  [0]")]
    model = save_model(tmp_path / "m.onnx", nodes, {"w": f32(rng, 2, 2, 3, 3)}, {"x": [1, 2, 6, 6]}, {"y": [1, 2, 6, 6]})
    out = tmp_path / "out"
    assert run_convert(model, out) == 0, capsys.readouterr().err
    layer = read_manifest(out)["layers"][0]
    assert (layer["onnx_node"], layer["onnx_conv_output"], layer["onnx_output_before_activation"]) == \
        ("n[3,   4]", "t[3,   4]", "t[3,   4]")
    assert layer["activation"]["node"] == "relu  [0]"
    assert verify_directory(model, out).status == "passed"

    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["layers"][0]["onnx_conv_output"] = manifest["layers"][0]["onnx_output_before_activation"] = "t[3, 4]"
    manifest_path.write_text(json.dumps(manifest))
    check = verify_directory(model, out)
    assert check.status == "failed"
    assert "substituted 0 of the 1 converted layers into the network; not in the model: n_3____4" in check.reason


# ------------------------------------------------------------------- a real paddle2onnx export

PADDLE_CLASSIFIER = __import__("pathlib").Path(__file__).with_name("data") / "ch_ppocr_mobile_v2.0_cls_infer.onnx"


@pytest.mark.parametrize("options, size", [([], [64, 64]), (["--input-shape", "x:2,3,48,192"], [48, 192])])
def test_paddle2onnx_export_of_a_trained_classifier_converts_completely(tmp_path, capsys, options, size):
    """PaddleOCR's direction classifier (see data/README.md): a batch written as -1, symbolic H/W,
    every conv's BatchNormalization and hard-swish pieces in the graph."""
    out = tmp_path / "out"
    assert run_convert(*options, PADDLE_CLASSIFIER, out) == 0, capsys.readouterr().err
    summary = capsys.readouterr().out.splitlines()[-1]
    model = onnx.load(str(PADDLE_CLASSIFIER))
    convs = sum(n.op_type == "Conv" for n in model.graph.node)
    batchnorms = sum(n.op_type == "BatchNormalization" for n in model.graph.node)
    assert (convs, batchnorms) == (53, 35)
    assert summary.startswith(f"converted {convs} layers ({batchnorms} BatchNorm, ")
    manifest = read_manifest(out)
    assert manifest["graph_inputs"][0]["declared_shape"] == [None, 3, None, None]
    assert manifest["graph_inputs"][0]["shape"][2:] == size
    assert manifest["verification"]["network"]["status"] == "passed"
    assert "BatchNormalization" not in {s["op"] for s in manifest["skipped"]}


def test_conv_after_a_computed_reshape_gets_its_shape_from_a_run(tmp_path, capsys):
    """Shape -> Cast to float -> Mul -> Cast back -> Reshape, as transformer blocks compute shapes:
    shape inference loses the size, one run of the model finds it, and the second conv converts."""
    rng = np.random.default_rng(9)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["c1"], ["s"], name="shape"),
             helper.make_node("Cast", ["s"], ["s_float"], name="to_float", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["s_float", "one"], ["s_scaled"], name="scale"),
             helper.make_node("Cast", ["s_scaled"], ["s_int"], name="to_int", to=TensorProto.INT64),
             helper.make_node("Reshape", ["c1", "s_int"], ["r"], name="reshape"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    init = {"w1": f32(rng, 4, 2, 3, 3), "w2": f32(rng, 2, 4, 3, 3), "one": np.ones(4, np.float32)}
    model = save_model(tmp_path / "m.onnx", nodes, init, {"x": [1, 2, "h", "w"]}, {"y": [1, 2, "h", "w"]})
    assert OnnxGraph.load(model).shapes["r"] == (1, 4, 64, 64)   # (None, None, None, None) from inference
    assert run_convert(model, tmp_path / "out") == 0, capsys.readouterr().err
    assert [layer["onnx_node"] for layer in read_manifest(tmp_path / "out")["layers"]] == ["conv1", "conv2"]

"""fastdeconv convert on ONNX graphs built here with onnx.helper (no torch): weights through Identity,
Cast, Reshape and Constant; tied weights; BatchNormalizations that cannot be folded; skip connections;
--strict; the whole-network check (on, off, not runnable, and failing on a corrupted file); and the
corrected onnx.reference ops against onnxruntime."""

from __future__ import annotations


import numpy as np
import pytest

from fastdeconv.convert import converter as convert_module

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_helpers import f32, read_manifest, run_convert, save_model  # noqa: E402


def _bn_init(prefix, channels, rng):
    return {f"{prefix}.{k}": v.astype(np.float32) for k, v in (
        ("gamma", rng.uniform(0.5, 1.5, channels)), ("beta", rng.standard_normal(channels)),
        ("mean", rng.standard_normal(channels)), ("var", rng.uniform(0.5, 1.5, channels)))}


def _bn_inputs(prefix):
    return [f"{prefix}.{k}" for k in ("gamma", "beta", "mean", "var")]


# ------------------------------------------------------------------------------------ constant weights

@pytest.fixture
def constant_paths(tmp_path):
    """Five 4->4 3x3 convolutions whose weights are: Identity(Identity(w1)); Cast(float16); Reshape of a
    (4, 36) initializer by [0, -1, 3, 3] (0 copies the input's dimension); a Constant node (bias: Constant
    value_floats); Identity(w1) again
    (tied with the first)."""
    rng = np.random.default_rng(1)
    w1 = f32(rng, 4, 4, 3, 3)
    init = {"w1": w1, "w2_half": f32(rng, 4, 4, 3, 3).astype(np.float16), "w3_flat": f32(rng, 4, 36),
            "shape3": np.array([0, -1, 3, 3], np.int64)}
    w4 = f32(rng, 4, 4, 3, 3)
    nodes = [
        helper.make_node("Identity", ["w1"], ["w1_a"], name="tie_a"),
        helper.make_node("Identity", ["w1_a"], ["w1_b"], name="tie_b"),
        helper.make_node("Conv", ["x", "w1_b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["w2_half"], ["w2"], name="cast_w2", to=TensorProto.FLOAT),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["w3_flat", "shape3"], ["w3"], name="reshape_w3"),
        helper.make_node("Conv", ["c2", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("Constant", [], ["w4"], name="const_w4", value=numpy_helper.from_array(w4)),
        helper.make_node("Constant", [], ["b4"], name="const_b4", value_floats=[0.5, -0.5, 1.0, 2.0]),
        helper.make_node("Conv", ["c3", "w4", "b4"], ["c4"], name="conv4", pads=[1, 1, 1, 1]),
        helper.make_node("Identity", ["w1"], ["w5"], name="tie_5"),
        helper.make_node("Conv", ["c4", "w5"], ["y"], name="conv5", pads=[1, 1, 1, 1]),
    ]
    model = save_model(tmp_path / "constants.onnx", nodes, init, {"x": [1, 4, 6, 6]}, {"y": [1, 4, 6, 6]})
    return model, init, w4


def test_weights_through_identity_cast_reshape_and_constant(constant_paths, tmp_path, capsys):
    model, init, w4 = constant_paths
    out = tmp_path / "out"
    assert run_convert(model, out) == 0, capsys.readouterr().err
    summary = capsys.readouterr().out.splitlines()[-1]
    assert summary.startswith("converted 5 layers (0 BatchNorm folded); skipped 0 nodes; ")
    manifest = read_manifest(out)
    layers = {layer["name"]: layer for layer in manifest["layers"]}
    assert list(layers) == ["conv1", "conv2", "conv3", "conv4", "conv5"] and manifest["skipped"] == []
    assert layers["conv1"]["weight_source"] == layers["conv5"]["weight_source"] == "w1"
    assert layers["conv1"]["shares_weight_with"] == ["conv5"] and layers["conv5"]["shares_weight_with"] == ["conv1"]
    assert manifest["shared_weights"] == {"w1": ["conv1", "conv5"]}
    assert layers["conv1"]["onnx_weight"] == "w1_b" and layers["conv2"]["weight_source"] == "w2_half"

    def weight(name):
        return np.fromfile(out / layers[name]["files"]["weight"], "<f4").reshape(layers[name]["weight_shape"])

    np.testing.assert_array_equal(weight("conv1"), init["w1"].transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(weight("conv5"), weight("conv1"))   # each layer has its own files
    np.testing.assert_array_equal(weight("conv2"), init["w2_half"].astype(np.float32).transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(weight("conv3"), init["w3_flat"].reshape(4, 4, 3, 3).transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(weight("conv4"), w4.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(np.fromfile(out / "conv4_bias.dat", "<f4"), [0.5, -0.5, 1.0, 2.0])
    assert manifest["verification"]["network"]["status"] == "passed"


def test_a_weight_that_is_not_constant_is_skipped(tmp_path, capsys):
    """A conv whose weight is a graph input is left to the app (noted), the other is converted; --strict
    refuses the model before writing anything (exit 2)."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w_in"], ["c1"], name="dynamic_conv"),
             helper.make_node("Conv", ["c1", "w2"], ["y"], name="static_conv")]
    model = save_model(tmp_path / "m.onnx", nodes, {"w2": f32(rng, 2, 3, 1, 1)},
                  {"x": [1, 3, 5, 5], "w_in": [3, 3, 3, 3]}, {"y": [1, 2, 3, 3]})
    out = tmp_path / "out"
    assert run_convert("--strict", model, out) == 2
    error = capsys.readouterr().err
    assert "--strict: 1 node(s)" in error and "'dynamic_conv' (Conv): its weight 'w_in' is not constant" in error
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["m.onnx"]
    assert run_convert(model, out) == 0
    captured = capsys.readouterr()
    assert "note: skipped node 'dynamic_conv' (Conv): its weight 'w_in' is not constant" in captured.err
    manifest = read_manifest(out)
    assert [layer["name"] for layer in manifest["layers"]] == ["static_conv"]
    assert manifest["skipped"][0]["op"] == "Conv" and manifest["verification"]["network"]["status"] == "passed"
    assert captured.out.splitlines()[-1].startswith("converted 1 layer (0 BatchNorm folded); skipped 1 node: Conv×1;")


def test_no_convertible_layer_is_an_error(tmp_path, capsys):
    nodes = [helper.make_node("Conv", ["x", "w_in"], ["y"], name="dynamic_conv")]
    model = save_model(tmp_path / "m.onnx", nodes, {}, {"x": [1, 3, 5, 5], "w_in": [3, 3, 3, 3]}, {"y": [1, 3, 3, 3]})
    assert run_convert(model, tmp_path / "out") == 1
    error = capsys.readouterr().err
    assert "has no convertible Conv or ConvTranspose node (node 'dynamic_conv' (Conv): its weight" in error


# ------------------------------------------------------------------------------------- BatchNormalization

def test_batchnorm_parameters_through_identity_are_folded(tmp_path, capsys):
    """torch's opset-11 exports name equal BatchNorm parameters (scale = var = ones) through Identity."""
    rng = np.random.default_rng(11)
    ones = np.ones(3, np.float32)
    init = {"w": f32(rng, 3, 2, 3, 3), "bn.var": ones, "bn.beta": f32(rng, 3), "bn.mean": f32(rng, 3)}
    nodes = [helper.make_node("Identity", ["bn.var"], ["bn.gamma"], name="Identity_4"),
             helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", *_bn_inputs("bn")], ["y"], name="bn", epsilon=0.5)]
    model = save_model(tmp_path / "m.onnx", nodes, init, {"x": [1, 2, 5, 5]}, {"y": [1, 3, 3, 3]}, opset=11)
    assert run_convert(model, tmp_path / "out") == 0
    manifest = read_manifest(tmp_path / "out")
    assert manifest["skipped"] == [] and manifest["layers"][0]["batchnorm"]["node"] == "bn"
    bias = np.fromfile(tmp_path / "out" / "conv_bias.dat", "<f4")
    np.testing.assert_allclose(bias, init["bn.beta"] - init["bn.mean"] / np.sqrt(1.5), rtol=1e-6)
    assert manifest["verification"]["network"]["status"] == "passed"


def test_batchnorm_on_a_graph_input_is_skipped(tmp_path, capsys):
    rng = np.random.default_rng(3)
    init = {"w": f32(rng, 4, 3, 3, 3), **_bn_init("bn", 3, rng)}
    nodes = [helper.make_node("BatchNormalization", ["x", *_bn_inputs("bn")], ["n"], name="input_bn"),
             helper.make_node("Conv", ["n", "w"], ["y"], name="conv")]
    model = save_model(tmp_path / "m.onnx", nodes, init, {"x": [1, 3, 5, 5]}, {"y": [1, 4, 3, 3]})
    assert run_convert(model, tmp_path / "out") == 0
    (skipped,) = read_manifest(tmp_path / "out")["skipped"]
    assert skipped["reason"] == ("BatchNormalization not folded: its input 'x' is a graph input, not a "
                                 "convolution's output")
    assert read_manifest(tmp_path / "out")["verification"]["network"]["status"] == "passed"


def test_batchnorm_after_a_conv_whose_output_is_also_read_elsewhere(tmp_path, capsys):
    """Folding would change what the Add reads: not folded, with the reason; the network still matches."""
    rng = np.random.default_rng(4)
    init = {"w": f32(rng, 3, 3, 3, 3), **_bn_init("bn", 3, rng)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", *_bn_inputs("bn")], ["n"], name="bn"),
             helper.make_node("Add", ["c", "n"], ["y"], name="add")]
    model = save_model(tmp_path / "m.onnx", nodes, init, {"x": [1, 3, 5, 5]}, {"y": [1, 3, 5, 5]})
    assert run_convert(model, tmp_path / "out") == 0
    manifest = read_manifest(tmp_path / "out")
    reasons = {s["node"]: s["reason"] for s in manifest["skipped"]}
    assert reasons["bn"] == ("BatchNormalization not folded: the output of node 'conv' (Conv) is also read by "
                             "1 other node(s) or is a graph output, which must not see the BatchNormalization")
    assert manifest["layers"][0]["batchnorm"] is None and manifest["layers"][0]["onnx_output"] == "c"
    assert manifest["verification"]["network"]["status"] == "passed"


def test_training_mode_batchnorm_is_skipped_and_the_network_check_says_why_it_did_not_run(tmp_path, capsys):
    """onnx.reference (corrected here) does not run a training-mode BatchNormalization: by default a note
    and exit 0 on the per-layer checks; --verify-model makes that an error (exit 1, nothing written)."""
    rng = np.random.default_rng(5)
    init = {"w": f32(rng, 3, 3, 3, 3), **_bn_init("bn", 3, rng)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", *_bn_inputs("bn")], ["y", "running_mean", "running_var"],
                              name="bn", training_mode=1)]
    model = save_model(tmp_path / "m.onnx", nodes, init, {"x": [1, 3, 5, 5]}, {"y": [1, 3, 3, 3]})
    assert run_convert("--verify-model", model, tmp_path / "out") == 1
    error = capsys.readouterr().err
    assert "error: --verify-model: onnx.reference cannot run this model (NotImplementedError: " \
           "BatchNormalization 'bn' in training mode)" in error and not (tmp_path / "out").exists()
    assert run_convert(model, tmp_path / "out") == 0
    captured = capsys.readouterr()
    assert "whole-network verification not run: onnx.reference cannot run this model" in captured.out
    manifest = read_manifest(tmp_path / "out")
    assert manifest["skipped"][0]["reason"] == ("BatchNormalization not folded: training_mode=1 (only an "
                                                "inference-mode BatchNormalization can be folded)")
    assert manifest["verification"]["network"]["status"] == "not run"
    assert "whole network not verified" in manifest["summary"]


def test_an_op_onnx_reference_lacks(tmp_path, capsys):
    """A custom-domain node: building the evaluator fails, so the whole-network check is noted as not
    run and the per-layer checks decide."""
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("MyOp", ["c"], ["y"], name="custom", domain="com.example")]
    model = save_model(tmp_path / "m.onnx", nodes, {"w": f32(rng, 2, 2, 3, 3)}, {"x": [1, 2, 4, 4]},
                  {"y": [1, 2, 4, 4]}, domains=["com.example"])
    assert run_convert(model, tmp_path / "out") == 0
    network = read_manifest(tmp_path / "out")["verification"]["network"]
    assert network["status"] == "not run" and "'MyOp' from domain 'com.example'" in network["reason"]
    assert read_manifest(tmp_path / "out")["skipped"][0]["reason"] == \
        "MyOp of domain 'com.example' is not a convolution of the ONNX domain"


# ---------------------------------------------------------------------------------------- skip connections

def test_skip_connections_are_wired_by_tensor_name(tmp_path, capsys):
    """conv1 -> Relu -> conv2; Add(relu, conv2); Concat(add, relu) -> ConvTranspose: the manifest names
    every layer's input and output tensor and the skipped Add/Concat with theirs."""
    rng = np.random.default_rng(7)
    init = {"w1": f32(rng, 4, 3, 3, 3), "w2": f32(rng, 4, 4, 3, 3), "b2": f32(rng, 4),
            "w3": f32(rng, 8, 2, 4, 4)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["r1", "c2"], ["s"], name="skip_add"),
             helper.make_node("Concat", ["s", "r1"], ["cat"], name="skip_concat", axis=1),
             helper.make_node("ConvTranspose", ["cat", "w3"], ["y"], name="up", strides=[2, 2], pads=[1, 1, 1, 1])]
    model = save_model(tmp_path / "m.onnx", nodes, init, {"x": [1, 3, 5, 5]}, {"y": [1, 2, 10, 10]})
    assert run_convert("--strict", model, tmp_path / "strict") == 2
    assert run_convert(model, tmp_path / "out") == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "converted 3 layers (0 BatchNorm folded); skipped 2 nodes: Add×1, Concat×1; max layer error ")
    manifest = read_manifest(tmp_path / "out")
    wiring = [(layer["name"], layer["onnx_input"], layer["onnx_output"]) for layer in manifest["layers"]]
    assert wiring == [("conv1", "x", "r1"), ("conv2", "r1", "c2"), ("up", "cat", "y")]
    assert manifest["layers"][0]["activation"]["op"] == "Relu"
    assert [(s["node"], s["inputs"], s["outputs"]) for s in manifest["skipped"]] == \
        [("skip_add", ["r1", "c2"], ["s"]), ("skip_concat", ["s", "r1"], ["cat"])]
    assert manifest["graph_inputs"] == [{"name": "x", "shape": [1, 3, 5, 5], "declared_shape": [1, 3, 5, 5],
                                         "shape_source": "model"}]
    assert manifest["graph_outputs"] == [{"name": "y", "shape": [1, 2, 10, 10]}]
    assert manifest["verification"]["network"]["status"] == "passed"


# ---------------------------------------------------------------------------------- the whole-network check

@pytest.fixture
def converted(tmp_path, capsys):
    """The embedded model converted into tmp_path/out."""
    out = tmp_path / "out"
    assert run_convert(out) == 0
    capsys.readouterr()
    return convert_module.DEFAULT_MODEL, out


def test_whole_network_check_reads_the_files(converted):
    model, out = converted
    assert convert_module.verify_directory(model, out).status == "passed"
    manifest = read_manifest(out)
    layer = manifest["layers"][2]
    path = out / layer["files"]["weight"]
    weight = np.fromfile(path, "<f4")
    weight[weight.size // 2] += 0.5      # one weight of one layer
    weight.tofile(path)
    check = convert_module.verify_directory(model, out)
    assert check.status == "failed" and not check.ok
    errors = check.outputs[0]["max_error"]
    assert errors["fastdeconv vs onnx.reference"] > check.outputs[0]["tolerance"]
    # deconv3 runs on the MPSCNN model from its own (untouched) file in the second run
    assert errors["mpscnn_model vs onnx.reference"] <= check.outputs[0]["tolerance"]
    path.write_bytes(path.read_bytes()[:-4])
    check = convert_module.verify_directory(model, out)
    assert check.status == "failed" and f"{path} has {path.stat().st_size} bytes" in check.reason


def test_corrupted_mpscnn_file_fails_the_mpscnn_run(converted):
    model, out = converted
    layer = read_manifest(out)["layers"][0]
    path = out / layer["files"]["mpscnn_weight"]
    np.zeros(path.stat().st_size // 4, "<f4").tofile(path)
    check = convert_module.verify_directory(model, out)
    errors = check.outputs[0]["max_error"]
    assert check.status == "failed" and errors["fastdeconv vs onnx.reference"] <= check.outputs[0]["tolerance"]
    assert errors["mpscnn_model vs onnx.reference"] > check.outputs[0]["tolerance"]


def test_a_corrupted_file_during_conversion_writes_nothing(tmp_path, capsys, monkeypatch):
    real = convert_module._verify_network

    def corrupting(graph, manifest, directory):
        path = directory / manifest["layers"][-1]["files"]["bias"]
        (np.fromfile(path, "<f4") + 0.01).astype("<f4").tofile(path)
        return real(graph, manifest, directory)

    monkeypatch.setattr(convert_module, "_verify_network", corrupting)
    out = tmp_path / "out"
    assert run_convert(out) == 1
    captured = capsys.readouterr()
    assert "-> MISMATCH" in captured.out and "error: the whole network does not match" in captured.err
    assert list(tmp_path.iterdir()) == []


def test_no_verify_model(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_convert("--no-verify-model", out) == 0
    summary = capsys.readouterr().out.splitlines()[-1]
    assert "whole network not verified (--no-verify-model)" in summary
    assert read_manifest(out)["verification"] == {"layers": "passed", "network": None, "onnxruntime_rejection": None}


# ------------------------------------------------------------------------- the corrected onnx.reference ops

@pytest.mark.parametrize("attributes", [
    {"group": 2, "strides": [2, 2]},
    {"group": 4, "strides": [2, 3], "output_shape": [7, 12]},
    {"strides": [2, 2], "output_shape": [6, 8], "pads": [2, 2, 2, 2]},   # output_shape wins over pads
    {"group": 2, "strides": [2, 2], "auto_pad": "SAME_LOWER", "dilations": [2, 1]},
])
def test_reference_conv_transpose_matches_onnxruntime(attributes):
    ort = pytest.importorskip("onnxruntime")
    from onnx.reference import ReferenceEvaluator

    from fastdeconv.convert.verify import reference_ops

    rng = np.random.default_rng(9)
    group = attributes.get("group", 1)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attributes)]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(f32(rng, 8, 8 // group * 2, 3, 3), "w"),
                               numpy_helper.from_array(f32(rng, 2 * 8), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = f32(rng, 1, 8, 3, 4, scale=1.0)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    got = ReferenceEvaluator(model, new_ops=reference_ops()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("auto_pad, strides, dilations, hw", [
    ("SAME_UPPER", [2, 2], [1, 1], (31, 27)),
    ("SAME_LOWER", [3, 2], [1, 1], (17, 21)),   # onnxruntime: no dilation with SAME
    ("SAME_UPPER", [1, 1], [1, 1], (6, 5)),
])
def test_reference_conv_same_padding_matches_onnxruntime(auto_pad, strides, dilations, hw):
    """onnx.reference 1.21 gives a 27-wide input with stride 2 and SAME_UPPER 13 columns; the spec 14."""
    ort = pytest.importorskip("onnxruntime")
    from onnx.reference import ReferenceEvaluator

    from fastdeconv.convert.verify import reference_ops

    rng = np.random.default_rng(10)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad=auto_pad, strides=strides, dilations=dilations)]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, *hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(f32(rng, 3, 2, 3, 3), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = f32(rng, 1, 2, *hw, scale=1.0)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    got = ReferenceEvaluator(model, new_ops=reference_ops()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("opset", [9, 11, 15])
def test_reference_batchnorm_with_momentum_matches_onnxruntime(opset):
    """torch exports momentum=0.9 at opsets < 14; onnx.reference's BatchNormalization-9 then mixes in the
    batch statistics. Inference mode (one output) uses the given mean and variance."""
    ort = pytest.importorskip("onnxruntime")
    from onnx.reference import ReferenceEvaluator

    from fastdeconv.convert.verify import reference_ops

    rng = np.random.default_rng(10)
    init = _bn_init("bn", 3, rng)
    nodes = [helper.make_node("BatchNormalization", ["x", *_bn_inputs("bn")], ["y"], epsilon=1e-3, momentum=0.9)]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in init.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    x = f32(rng, 2, 3, 4, 4, scale=2.0)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    np.testing.assert_allclose(ReferenceEvaluator(model, new_ops=reference_ops()).run(None, {"x": x})[0],
                               expected, atol=1e-5)


def test_without_onnxruntime_the_network_is_compared_with_onnx_reference_only(converted, monkeypatch):
    model, out = converted
    monkeypatch.setitem(__import__("sys").modules, "onnxruntime", None)
    check = convert_module.verify_directory(model, out)
    assert check.status == "passed" and "onnxruntime is not installed" in check.notes[-1]
    assert sorted(check.outputs[0]["max_error"]) == ["fastdeconv vs onnx.reference", "mpscnn_model vs onnx.reference"]

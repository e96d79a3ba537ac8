"""python -m fastdeconv convert: the embedded model, a model built here, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fastdeconv
from fastdeconv import weights
from fastdeconv.metal import mpscnn_model
from fastdeconv.__main__ import main

REPO = Path(__file__).resolve().parents[2]


def _convert(*args):
    return main(["convert", *map(str, args)])


def _build_model(path, nodes, initializers, input_shape):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes, "test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, ["n", "c", "h", "w"])],
        [numpy_helper.from_array(np.asarray(v, dtype=np.int64 if k.startswith("shape") else np.float32), k)
         for k, v in initializers.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _bn(prefix, channels, rng):
    return {f"{prefix}.gamma": rng.uniform(0.5, 1.5, channels), f"{prefix}.beta": rng.standard_normal(channels),
            f"{prefix}.mean": rng.standard_normal(channels), f"{prefix}.var": rng.uniform(0.5, 1.5, channels)}


def _bn_inputs(prefix):
    return [f"{prefix}.{k}" for k in ("gamma", "beta", "mean", "var")]


@pytest.fixture
def mixed_model(tmp_path):
    """Conv SAME_LOWER + BN + LeakyRelu; depthwise dilated Conv with asymmetric pads + Clip; a grouped
    ConvTranspose with output_shape (4 groups of 2 -> 1: not expressible by MPSCNN) + BN + Sigmoid; a
    ConvTranspose with auto_pad SAME_UPPER and a bias."""
    pytest.importorskip("onnx")
    from onnx import helper

    rng = np.random.default_rng(3)
    init = {"a.w": rng.standard_normal((8, 8, 3, 3)) / 5, "b.w": rng.standard_normal((8, 1, 3, 2)),
            "b.bias": rng.standard_normal(8), "c.w": rng.standard_normal((8, 1, 3, 3)),
            "d.w": rng.standard_normal((4, 4, 3, 3)), "d.bias": rng.standard_normal(4),
            "clip.min": 0.0, "clip.max": 6.0, **_bn("a.bn", 8, rng), **_bn("c.bn", 4, rng)}
    nodes = [
        helper.make_node("Conv", ["x", "a.w"], ["a"], name="conv_a", strides=[2, 2], auto_pad="SAME_LOWER"),
        helper.make_node("BatchNormalization", ["a", *_bn_inputs("a.bn")], ["a_bn"], name="conv_a_bn", epsilon=1e-3),
        helper.make_node("LeakyRelu", ["a_bn"], ["a_act"], name="conv_a_act", alpha=0.2),
        helper.make_node("Conv", ["a_act", "b.w", "b.bias"], ["b"], name="conv_b/depthwise", group=8,
                         pads=[0, 1, 2, 1], dilations=[2, 1]),
        helper.make_node("Clip", ["b", "clip.min", "clip.max"], ["b_act"], name="conv_b_clip"),
        helper.make_node("ConvTranspose", ["b_act", "c.w"], ["c"], name="deconv_c", group=4, strides=[2, 2],
                         output_shape=[8, 9]),
        helper.make_node("BatchNormalization", ["c", *_bn_inputs("c.bn")], ["c_bn"], name="deconv_c_bn"),
        helper.make_node("Sigmoid", ["c_bn"], ["c_act"], name="deconv_c_act"),
        helper.make_node("ConvTranspose", ["c_act", "d.w", "d.bias"], ["d"], name="deconv_d", strides=[2, 3],
                         auto_pad="SAME_UPPER", dilations=[1, 2]),
    ]
    return _build_model(tmp_path / "mixed.onnx", nodes, init, [1, 8, 9, 8])


# ---------------------------------------------------------------------------------------- success

def test_embedded_model(tmp_path, capsys):
    pytest.importorskip("onnx")
    out = tmp_path / "out"
    assert _convert(out) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    table = lines[:5]
    assert table[0].split()[:2] == ["layer", "kind"] and not lines[5].startswith("deconv")
    assert lines[5].startswith("network output 'deconv4.act' 1x3x32x32") and lines[5].endswith("-> ok")
    assert lines[-1].startswith("converted 4 layers (3 BatchNorm folded); skipped 0 nodes; max layer error ")
    assert "(passed); wrote " in lines[-1] and lines[-1].endswith(str(out))
    assert all(line.split()[1] == "conv_transpose2d" and line.rstrip().endswith("ok") for line in table[1:])
    assert "[4/4] deconv4" in captured.err
    manifest = json.loads((out / "manifest.json").read_text())
    layers = {layer["name"]: layer for layer in manifest["layers"]}
    assert list(layers) == ["deconv1", "deconv2", "deconv3", "deconv4"]
    assert layers["deconv2"]["groups"] == 2 and layers["deconv3"]["dilation"] == [2, 2]
    assert layers["deconv3"]["padding"] == [[1, 3], [2, 2]] and layers["deconv3"]["output_padding"] == [1, 1]
    assert layers["deconv2"]["batchnorm"]["epsilon"] == pytest.approx(1e-3)
    assert layers["deconv4"]["batchnorm"] is None and layers["deconv4"]["activation"]["op"] == "Tanh"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary directory left behind"
    # The files alone reproduce each layer: fastdeconv with the weight, the MPSCNN model with the MPSCNN weight.
    rng = np.random.default_rng(0)
    for layer in layers.values():
        settings = layer["mpscnn"]
        assert settings is not None
        w, b = weights.load_mps(out, layer["name"], layer["weight_shape"])
        w_mps, _ = weights.load_mps(out, f"{layer['name']}_mpscnn", settings["weight_shape"])
        x = rng.standard_normal(layer["input_shape_nhwc"]).astype(np.float32)
        expected = fastdeconv.conv_transpose2d(x, w, b, layer["stride"], layer["padding"],
                                               output_padding=layer["output_padding"], dilation=layer["dilation"],
                                               groups=layer["groups"])
        assert list(expected.shape) == layer["output_shape_nhwc"]
        params = weights.MPSCNNTransposeParams(**{k: v for k, v in settings.items()
                                                  if k not in ("class", "weight_shape", "weight_file")})
        np.testing.assert_allclose(mpscnn_model.convolution_transpose(x, w_mps, params, b), expected, atol=1e-4)


def test_model_built_here(mixed_model, tmp_path, capsys):
    out = tmp_path / "out"
    assert _convert(mixed_model, out) == 0, capsys.readouterr().err
    table = capsys.readouterr().out
    assert "conv_b_depthwise" in table and "n/a (see manifest)" in table
    layers = {layer["name"]: layer for layer in json.loads((out / "manifest.json").read_text())["layers"]}
    a, b, c, d = (layers[n] for n in ("conv_a", "conv_b_depthwise", "deconv_c", "deconv_d"))
    assert a["kind"] == "conv2d" and a["output_shape_nhwc"] == [1, 5, 4, 8]
    # SAME_LOWER, stride 2, k3: H 9 -> 5 needs 2 rows (1 + 1), W 8 -> 4 needs 1 column, at the beginning.
    assert a["padding"] == [[1, 1], [1, 0]]
    assert a["activation"] == {"op": "LeakyRelu", "node": "conv_a_act", "alpha": pytest.approx(0.2), "output": "a_act"}
    assert (a["onnx_input"], a["onnx_conv_output"], a["onnx_output_before_activation"], a["onnx_output"]) == \
        ("x", "a", "a_bn", "a_act")
    assert b["padding"] == [[0, 2], [1, 1]] and b["mpscnn"]["depthwise"] is True
    assert b["activation"]["min"] == 0.0 and b["activation"]["max"] == 6.0
    assert c["output_shape_nhwc"][1:3] == [8, 9] and c["mpscnn"] is None
    assert c["padding"] == [[0, 0], [1, 1]] and c["output_padding"] == [1, 0]   # from output_shape, per the spec
    assert "multiple of 4" in c["mpscnn_unsupported_reason"] and c["max_error"]["mpscnn_model"] is None
    # no MPSCNN file is written or named where MPSCNN cannot run the layer
    assert not (out / "deconv_c_mpscnn_weight.dat").exists() and set(c["files"]) == {"weight", "bias"}
    assert c["file_shapes"] == {"weight": [8, 3, 3, 1], "bias": [4]}
    assert d["file_shapes"]["mpscnn_weight"] == d["mpscnn"]["weight_shape"] == [4, 3, 3, 4]
    assert (out / d["files"]["mpscnn_weight"]).stat().st_size == 4 * 4 * 3 * 3 * 4
    assert d["output_shape_nhwc"][1:3] == [c["output_shape_nhwc"][1] * 2, c["output_shape_nhwc"][2] * 3]
    assert d["mpscnn"]["kernel_offset_y"] == (3 >> 1) - 2 + d["padding"][0][0]
    assert (out / "conv_a_weight.dat").stat().st_size == 4 * 8 * 3 * 3 * 8
    assert "files" in a and "mpscnn_weight" not in a["files"]


def test_subprocess_module_entry_point(tmp_path):
    pytest.importorskip("onnx")
    result = subprocess.run([sys.executable, "-m", "fastdeconv", "convert", str(tmp_path / "o")],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "deconv3" in result.stdout and "[1/4]" in result.stderr


# ---------------------------------------------------------------------------------------- failures

def test_a_mismatch_fails_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """The verification can fail: a folding that ignores eps is caught, and OUTDIR is not created."""
    pytest.importorskip("onnx")
    real = weights.fold_batchnorm
    monkeypatch.setattr(weights, "fold_batchnorm", lambda *a, **k: real(*a, **{**k, "eps": 0.5}))
    out = tmp_path / "out"
    assert _convert(out) == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out and "nothing was written" in captured.err
    assert "whole network not verified (a layer does not match)" in captured.out.splitlines()[-1]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_unsupported_op_between_conv_and_batchnorm_is_skipped(tmp_path, capsys):
    """Conv -> Mul by a spatial map (not per channel) -> BatchNormalization: the conv is converted, the
    Mul and the BatchNormalization are skipped with accurate reasons, and the whole network (which runs
    them) still matches."""
    pytest.importorskip("onnx")
    from onnx import helper

    rng = np.random.default_rng(0)
    init = {"w": rng.standard_normal((4, 2, 3, 3)), "k": rng.standard_normal((1, 1, 3, 3)), **_bn("bn", 4, rng)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv1"),
             helper.make_node("Mul", ["y", "k"], ["scaled"], name="scale_mul"),
             helper.make_node("BatchNormalization", ["scaled", *_bn_inputs("bn")], ["z"], name="bn1")]
    model = _build_model(tmp_path / "m.onnx", nodes, init, [1, 2, 5, 5])
    assert _convert(model, tmp_path / "out") == 0
    captured = capsys.readouterr()
    assert "note: skipped node 'bn1' (BatchNormalization): BatchNormalization not folded: its input comes " \
           "from node 'scale_mul' (Mul), not from a Conv/ConvTranspose" in captured.err
    assert captured.out.splitlines()[-1].startswith(
        "converted 1 layer (0 BatchNorm folded); skipped 2 nodes: BatchNormalization×1, Mul×1; ")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [(s["node"], s["op"], s["inputs"][0], s["outputs"]) for s in manifest["skipped"]] == \
        [("scale_mul", "Mul", "y", ["scaled"]), ("bn1", "BatchNormalization", "scaled", ["z"])]
    assert manifest["verification"]["network"]["status"] == "passed"


@pytest.mark.parametrize("transposed", [False, True])
def test_per_channel_affine_nodes_fold_in_order(tmp_path, capsys, transposed):
    """Conv -> Mul by a scalar -> BatchNormalization -> constant − y (per channel) -> y / constant ->
    Relu: all four fold into the layer, in order (Sub and Div keep their operand order), the Relu is
    recorded, and both checks pass; the manifest lists the folded nodes."""
    pytest.importorskip("onnx")
    from onnx import helper

    rng = np.random.default_rng(1)
    weight = rng.standard_normal((2, 2, 3, 3) if transposed else (4, 2, 3, 3))   # 4 output channels
    init = {"w": weight, "b": rng.standard_normal(4), "k": np.float32(-1.5), **_bn("bn", 4, rng),
            "shift": rng.standard_normal((4, 1, 1)), "div": rng.uniform(0.5, 2, (1, 4, 1, 1))}
    nodes = [helper.make_node("ConvTranspose" if transposed else "Conv", ["x", "w", "b"], ["y"], name="conv1",
                              group=2 if transposed else 1),
             helper.make_node("Mul", ["k", "y"], ["scaled"], name="scale"),
             helper.make_node("BatchNormalization", ["scaled", *_bn_inputs("bn")], ["normed"], name="bn1"),
             helper.make_node("Sub", ["shift", "normed"], ["flipped"], name="flip"),
             helper.make_node("Div", ["flipped", "div"], ["divided"], name="divide"),
             helper.make_node("Relu", ["divided"], ["z"], name="relu")]
    model = _build_model(tmp_path / "m.onnx", nodes, init, [1, 2, 5, 5] if not transposed else [1, 2, 5, 5])
    assert _convert(model, tmp_path / "out") == 0
    captured = capsys.readouterr()
    assert "(Conv" in captured.err or "(ConvTranspose" in captured.err
    assert " + Mul + BatchNormalization + Sub + Div): converting" in captured.err
    assert captured.out.splitlines()[-1].startswith(
        "converted 1 layer (1 BatchNorm, 3 Add/Sub/Mul/Div folded); skipped 0 nodes; ")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    layer = manifest["layers"][0]
    assert [(e["node"], e["op"], e["output"]) for e in layer["folded"]] == [
        ("scale", "Mul", "scaled"), ("bn1", "BatchNormalization", "normed"), ("flip", "Sub", "flipped"),
        ("divide", "Div", "divided")]
    assert layer["batchnorm"]["node"] == "bn1" and layer["onnx_output_before_activation"] == "divided"
    assert layer["activation"]["op"] == "Relu" and layer["onnx_output"] == "z"
    assert manifest["verification"]["network"]["status"] == "passed"


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")   # onnx.reference's y / 0
@pytest.mark.parametrize("constant, why", [
    (np.zeros((1, 4, 1, 1)), "a division by zero"),
    (np.ones((4, 5, 5)), "a constant that varies over the image"),
    (np.ones((2, 1, 1)), "a constant of the wrong channel count"),
])
def test_constants_that_are_not_per_channel_do_not_fold(tmp_path, capsys, constant, why):
    pytest.importorskip("onnx")
    from onnx import helper

    init = {"w": np.ones((4, 2, 3, 3)), "k": constant}
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Div" if "zero" in why else "Add", ["y", "k"], ["z"], name="op")]
    model = _build_model(tmp_path / "m.onnx", nodes, init, [1, 2, 5, 5])
    code = _convert(model, tmp_path / "out")
    captured = capsys.readouterr()
    if "wrong channel count" in why:   # shape inference refuses the model itself
        assert code == 1 and "cannot read" in captured.err
        return
    assert code == 0, why
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["layers"][0]["folded"] == [] and [s["node"] for s in manifest["skipped"]] == ["op"]


def test_unreachable_output_shape_names_the_node(tmp_path, capsys):
    pytest.importorskip("onnx")
    from onnx import helper

    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up1", strides=[2, 2], output_shape=[9, 7])]
    model = _build_model(tmp_path / "m.onnx", nodes, {"w": np.ones((2, 2, 3, 3))}, [1, 2, 3, 3])
    assert _convert(model, tmp_path / "out") == 1
    error = capsys.readouterr().err
    assert "error: node 'up1' (ConvTranspose): output_padding must be smaller than" in error
    assert "output_padding=(2, 0), stride=(2, 2)" in error and not (tmp_path / "out").exists()


def test_missing_and_corrupt_files(tmp_path, capsys):
    pytest.importorskip("onnx")
    assert _convert(tmp_path / "nope.onnx", tmp_path / "out") == 1
    assert f"model file {tmp_path / 'nope.onnx'} does not exist" in capsys.readouterr().err
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07garbage\xff\xfe" * 10)
    assert _convert(corrupt, tmp_path / "out") == 1
    error = capsys.readouterr().err
    assert f"cannot read {corrupt} as an ONNX model" in error and "Traceback" not in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corrupt.onnx"]


def test_existing_outdir_needs_force(tmp_path, capsys):
    pytest.importorskip("onnx")
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("keep me")
    assert _convert(out) == 1
    assert "already exists; pass --force" in capsys.readouterr().err
    assert (out / "old.txt").read_text() == "keep me"
    assert main(["convert", "--force", str(out)]) == 1   # old.txt is not the converter's
    assert "holds files it did not write (old.txt)" in capsys.readouterr().err
    (out / "old.txt").unlink()
    assert main(["convert", "--force", str(out)]) == 0    # an empty folder
    assert main(["convert", "--force", str(out)]) == 0    # the converter's own output
    assert (out / "manifest.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_usage_error(tmp_path, capsys):
    pytest.importorskip("onnx")
    assert _convert("a.onnx", "b", "c") == 2
    assert "takes [MODEL.onnx] OUTDIR" in capsys.readouterr().err


_WITHOUT_ONNX = "import sys; sys.modules['onnx'] = None; "


def test_without_onnx(tmp_path):
    """Importing fastdeconv (and these modules) needs no onnx; the command explains how to get it, exit 2."""
    code = (_WITHOUT_ONNX + "import fastdeconv, fastdeconv.weights, fastdeconv.mpscnn_model, fastdeconv.convert; "
            "from fastdeconv.__main__ import main; sys.exit(main(['convert', sys.argv[1]]))")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], capture_output=True, text=True,
                            cwd=REPO, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 2, result.stderr
    assert 'pip install "onnx>=1.21"' in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("attributes", [
    {"strides": [2, 2], "output_shape": [8, 9], "group": 2},                          # NOTSET: pads from the spec
    {"strides": [2, 3], "output_shape": [6, 14], "auto_pad": "SAME_UPPER"},
    {"strides": [2, 2], "auto_pad": "SAME_LOWER", "output_padding": [1, 0], "dilations": [1, 2]},
])
def test_output_shape_and_auto_pad_against_onnxruntime(tmp_path, attributes):
    """output_shape is rewritten for onnx's reference evaluator, so check the mapping against onnxruntime."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper

    rng = np.random.default_rng(7)
    groups = attributes.get("group", 1)
    init = {"w": rng.standard_normal((8, 8 // groups, 3, 3)), "b": rng.standard_normal(8)}
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="up", **attributes)]
    model = _build_model(tmp_path / "m.onnx", nodes, init, [1, 8, 3, 5])
    out = tmp_path / "out"
    assert _convert(model, out) == 0
    layer = json.loads((out / "manifest.json").read_text())["layers"][0]
    x = rng.standard_normal((1, 8, 3, 5)).astype(np.float32)
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    w, b = weights.load_mps(out, "up", layer["weight_shape"])
    got = fastdeconv.conv_transpose2d(x.transpose(0, 2, 3, 1), w, b, layer["stride"], layer["padding"],
                                      output_padding=layer["output_padding"], dilation=layer["dilation"],
                                      groups=layer["groups"])
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2), expected, atol=1e-4)

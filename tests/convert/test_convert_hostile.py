"""fastdeconv convert on hostile input: every failure is one ``error:`` line with its exit code, and
nothing is left behind or deleted that the converter did not write."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from fastdeconv.convert import verify_directory

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_helpers import f32, read_manifest, run_convert, save_model  # noqa: E402

from fastdeconv.convert.graph import SMALL_EXTERNAL_BYTES  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _save(path, nodes, initializers, opset=17, elem=TensorProto.FLOAT):
    """A model with input x and the last node's output, both (1, 2, 6, 6)."""
    return save_model(path, nodes, initializers, {"x": [1, 2, 6, 6]}, {nodes[-1].output[0]: [1, 2, 6, 6]},
                      opset=opset, elem_type=elem)


def _conv(name="conv", output="y"):
    return helper.make_node("Conv", ["x", "w"], [output], name=name, pads=[1, 1, 1, 1])


def _weight(dtype=np.float32):
    return np.random.default_rng(0).standard_normal((2, 2, 3, 3)).astype(dtype)


@pytest.fixture
def model(tmp_path):
    return _save(tmp_path / "m.onnx", [_conv()], {"w": _weight()})


def _one_error_line(capsys):
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith(("[", "note:", "whole"))]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def _hidden(folder):
    return sorted(p.name for p in Path(folder).iterdir() if p.name.startswith("."))


# ------------------------------------------------------------------------------------- odd models

def test_a_300_character_node_name_gets_a_short_file_name(tmp_path, capsys):
    long_name = "block." * 50
    model = _save(tmp_path / "m.onnx", [_conv(name=long_name)], {"w": _weight()})
    assert run_convert(model, tmp_path / "out") == 0, capsys.readouterr().err
    layer = json.loads((tmp_path / "out" / "manifest.json").read_text())["layers"][0]
    assert layer["onnx_node"] == long_name and len(layer["files"]["weight"]) < 200


def test_400_chained_identity_nodes_resolve_without_recursion(tmp_path, capsys):
    nodes = [helper.make_node("Identity", ["w"], ["w0"])]
    nodes += [helper.make_node("Identity", [f"w{i}"], [f"w{i + 1}"]) for i in range(400)]
    nodes.append(helper.make_node("Conv", ["x", "w400"], ["y"], name="conv", pads=[1, 1, 1, 1]))
    model = _save(tmp_path / "m.onnx", nodes, {"w": _weight()})
    assert run_convert(model, tmp_path / "out") == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["layers"][0]["weight_source"] == "w"


def test_clip_with_a_two_element_min_is_skipped_with_the_reason(tmp_path, capsys):
    nodes = [_conv(output="c"), helper.make_node("Clip", ["c", "low", "high"], ["y"], name="clip")]
    model = _save(tmp_path / "m.onnx", nodes, {"w": _weight(), "low": np.zeros(2, np.float32),
                                               "high": np.float32(6)})
    assert run_convert(model, tmp_path / "out") == 0
    skipped = json.loads((tmp_path / "out" / "manifest.json").read_text())["skipped"]
    assert [(s["node"], s["reason"]) for s in skipped] == \
        [("clip", "activation not recorded: its bounds are not constant scalars")]


@pytest.mark.parametrize("kind", ["opset999", "int64 weights"])
def test_a_model_onnxruntime_refuses_is_reported_and_strict_fails(tmp_path, capsys, kind):
    pytest.importorskip("onnxruntime")
    if kind == "opset999":
        model = _save(tmp_path / "m.onnx", [_conv()], {"w": _weight()}, opset=999)
    else:
        model = _save(tmp_path / "m.onnx", [_conv()], {"w": _weight(np.int64)}, elem=TensorProto.INT64)
    assert run_convert("--strict", model, tmp_path / "out") == 2
    line = _one_error_line(capsys)
    assert line.startswith("error: --strict: onnxruntime refuses to load") and line.endswith("nothing was written")
    assert not (tmp_path / "out").exists()
    assert run_convert(model, tmp_path / "out") == 0
    captured = capsys.readouterr()
    assert "warning: onnxruntime refuses to load" in captured.err
    assert "; onnxruntime refuses to load the model; wrote" in captured.out.splitlines()[-1]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["verification"]["onnxruntime_rejection"]


# ------------------------------------------------------------------------------------ output folders

def test_a_dangling_symlink_outdir_is_refused(tmp_path, capsys, model):
    (tmp_path / "link").symlink_to(tmp_path / "missing")
    assert run_convert(model, tmp_path / "link") == 1
    assert "is a symbolic link (to " in _one_error_line(capsys)
    assert (tmp_path / "link").is_symlink() and not (tmp_path / "missing").exists()


def test_force_never_replaces_the_current_directory(tmp_path, capsys, model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_convert("--force", model, ".") == 1
    assert "which is the current directory or holds it" in _one_error_line(capsys)
    assert run_convert("--force", model, "..") == 1
    assert "which is the current directory or holds it" in _one_error_line(capsys)
    assert model.exists()


def test_force_never_replaces_the_model_s_folder(tmp_path, capsys, model):
    assert run_convert("--force", model, tmp_path) == 1
    assert f"which holds the model {model}" in _one_error_line(capsys)
    assert model.exists()


def test_force_replaces_only_what_the_converter_wrote(tmp_path, capsys, model):
    out = tmp_path / "out"
    assert run_convert(model, out) == 0
    assert run_convert("--force", model, out) == 0   # its own output: replaced
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert run_convert("--force", model, out) == 1
    assert "holds files it did not write (notes.txt)" in _one_error_line(capsys)
    assert (out / "notes.txt").read_text() == "mine" and (out / "manifest.json").exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "manifest.json").write_text('{"converter": "someone else"}')
    assert run_convert("--force", model, foreign) == 1
    assert "holds files it did not write (manifest.json)" in _one_error_line(capsys)


@pytest.mark.skipif(os.name == "nt", reason="a stale folder is left on Windows (os.kill would end the process)")
def test_a_killed_conversion_s_staging_folder_is_removed_by_the_next_run(tmp_path, capsys, model):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".out.partial-{dead.pid}-abc123"
    stale.mkdir()
    (stale / "conv_weight.dat").write_bytes(b"half")
    alive = tmp_path / f".out.partial-{os.getppid()}-def456"   # a live process's: kept
    alive.mkdir()
    assert run_convert(model, tmp_path / "out") == 0
    assert _hidden(tmp_path) == [alive.name]


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
@pytest.mark.parametrize("signum", [signal.SIGTERM, getattr(signal, "SIGHUP", signal.SIGTERM)])
def test_sigterm_and_sighup_remove_the_staging_folder(tmp_path, model, signum):
    """The conversion is held in the whole-network check (a seam that waits for a file) while the
    signal arrives; the process exits 128 + signal and leaves nothing beside OUTDIR."""
    script = textwrap.dedent(f"""
        import pathlib, sys, time
        from fastdeconv.convert import converter
        def waiting(graph, manifest, directory):
            pathlib.Path({str(tmp_path / 'ready')!r}).write_text("")
            time.sleep(60)
        converter._verify_network = waiting
        sys.exit(converter.main([{str(model)!r}, {str(tmp_path / 'out')!r}]))
    """)
    process = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stderr=subprocess.PIPE)
    for _ in range(600):
        if (tmp_path / "ready").exists() or process.poll() is not None:
            break
        time.sleep(0.1)
    assert (tmp_path / "ready").exists(), process.communicate()[1]
    assert [name for name in _hidden(tmp_path) if name.startswith(".out.partial-")]
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, err
    assert _hidden(tmp_path) == [] and not (tmp_path / "out").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
def test_a_failed_write_is_one_error_line_and_leaves_nothing(tmp_path, model):
    """A file size limit (as a full disk would) makes the weight file's write fail."""
    script = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        from fastdeconv.__main__ import main
        sys.exit(main(["convert", {str(model)!r}, {str(tmp_path / 'out')!r}]))
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    errors = [line for line in result.stderr.splitlines() if line.startswith(("error", "Traceback"))]
    assert result.returncode == 1 and len(errors) == 1, result.stderr
    assert "File too large" in errors[0] and errors[0].endswith(f"nothing was written to {tmp_path / 'out'}")
    assert _hidden(tmp_path) == [] and not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------- verify_directory

@pytest.mark.parametrize("name", ["../outside.dat", "/etc/hostname", "link.dat"])
def test_verify_directory_refuses_files_outside_its_folder(tmp_path, model, capsys, name):
    out = tmp_path / "out"
    assert run_convert(model, out) == 0
    (tmp_path / "outside.dat").write_bytes((out / "conv_weight.dat").read_bytes())
    (out / "link.dat").symlink_to(tmp_path / "outside.dat")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["layers"][0]["files"]["weight"] = name
    (out / "manifest.json").write_text(json.dumps(manifest))
    check = verify_directory(model, out)
    assert check.status == "failed"
    assert f"the manifest names {name!r}, which is not a file name inside {out}" in check.reason


# ------------------------------------------------------------------------------------- external data

def _external_model(folder, location="weights.bin", offset=0, length=None, data=None):
    """A one-conv model whose weight is stored as external data at ``location``."""
    from onnx.external_data_helper import set_external_data

    folder.mkdir(exist_ok=True)
    weight = numpy_helper.from_array(_weight(), "w")
    payload = _weight().tobytes() if data is None else data
    if location == "weights.bin":
        (folder / "weights.bin").write_bytes(payload)
    set_external_data(weight, location=location, offset=offset, length=length)
    weight.ClearField("raw_data")
    graph = helper.make_graph(
        [_conv()], "test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(folder / "m.onnx"))
    return folder / "m.onnx"


def test_external_data_inside_the_folder_converts(tmp_path, capsys):
    model = _external_model(tmp_path / "model")
    assert run_convert(model, tmp_path / "out") == 0, capsys.readouterr().err
    saved = np.fromfile(tmp_path / "out" / "conv_weight.dat", "<f4")
    assert np.array_equal(saved, _weight().transpose(0, 2, 3, 1).ravel())


def test_all_tensors_external_with_dynamic_sizes_convert(tmp_path, capsys):
    """Every tensor in one external file, the Reshape's shape included, a weight over the 1 MiB that is
    read in before shape inference: the model is checked and shape-inferred without its large weights
    (a model with them may be over protobuf's 2 GiB), and converts and verifies with them."""
    rng = np.random.default_rng(3)
    big, small = f32(rng, 128, 128, 5, 5, scale=0.05), f32(rng, 4, 128, 3, 3)
    nodes = [helper.make_node("Conv", ["x", "big"], ["a"], name="big_conv", pads=[2, 2, 2, 2]),
             helper.make_node("Reshape", ["a", "shape"], ["b"], name="reshape"),
             helper.make_node("Conv", ["b", "small"], ["y"], name="small_conv", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "h", "w"])],
        [numpy_helper.from_array(big, "big"), numpy_helper.from_array(small, "small"),
         numpy_helper.from_array(np.array([1, 128, 0, -1], np.int64), "shape")])
    model = tmp_path / "model" / "m.onnx"
    model.parent.mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model),
              save_as_external_data=True, all_tensors_to_one_file=True, location="data.bin", size_threshold=0)
    assert big.nbytes > SMALL_EXTERNAL_BYTES
    assert run_convert(model, tmp_path / "out") == 0, capsys.readouterr().err
    manifest = read_manifest(tmp_path / "out")
    assert [layer["name"] for layer in manifest["layers"]] == ["big_conv", "small_conv"]
    assert manifest["verification"]["network"]["status"] == "passed"
    saved = np.fromfile(tmp_path / "out" / manifest["layers"][0]["files"]["weight"], "<f4")
    assert np.array_equal(saved, big.transpose(0, 2, 3, 1).ravel())


@pytest.mark.parametrize("case, message", [
    ("symlink", "is a symbolic link; only files inside the model's folder are read"),
    ("symlinked folder", "is a symbolic link; only files inside the model's folder are read"),
    ("dotdot", "which is not a file name inside the model's folder"),
    ("absolute", "which is not a file name inside the model's folder"),
    ("hard link", "which has 2 hard links"),
    ("short file", "144 bytes needed, the file has 100"),
    ("wrong length", "with length 100, but its shape [2, 2, 3, 3] needs 144 bytes"),
    ("past the end", "at offset 64: 144 bytes needed, the file has 144"),
])
def test_external_data_outside_the_folder_or_the_file_is_refused(tmp_path, capsys, case, message):
    """A model must not read a file it was not shipped with (a secret beside it, /etc/passwd through a
    link) into the weights, nor read past a file's end."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(_weight().tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    arguments = {}
    if case == "symlink":
        (folder / "link.bin").symlink_to(secret)
        arguments["location"] = "link.bin"
    elif case == "symlinked folder":
        (folder / "sub").symlink_to(tmp_path)
        arguments["location"] = "sub/secret.bin"
    elif case == "dotdot":
        arguments["location"] = "../secret.bin"
    elif case == "absolute":
        arguments["location"] = str(secret)
    elif case == "hard link":
        os.link(secret, folder / "linked.bin")
        arguments["location"] = "linked.bin"
    elif case == "short file":
        arguments["data"] = b"\0" * 100
    elif case == "wrong length":
        arguments["length"] = 100
    else:
        arguments["offset"] = 64
    model = _external_model(folder, **arguments)
    assert run_convert(model, tmp_path / "out") == 1
    line = _one_error_line(capsys)
    assert message in line and "tensor 'w' stores its data in" in line, line
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------- verification budget

def _layer_model(path, node, weight, input_shape, output_shape):
    return save_model(path, [node], {"w": weight}, {"x": input_shape}, {"y": output_shape or ["n", "c", "h", "w"]})


def test_a_huge_declared_input_is_verified_small_and_the_network_not_run(tmp_path, capsys):
    """(1, 4, 30000, 30000) would need 14 GB of float32 per tensor: the layer is verified on a smaller
    input and the whole network is not run, with the budget named."""
    weight = np.random.default_rng(1).standard_normal((4, 4, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])
    model = _layer_model(tmp_path / "m.onnx", node, weight, [1, 4, 30000, 30000], [1, 4, 30000, 30000])
    out = tmp_path / "out"
    assert run_convert(model, out) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert "note: conv is verified on a " in captured.err and "--max-verify-elements" in captured.err
    manifest = json.loads((out / "manifest.json").read_text())
    layer = manifest["layers"][0]
    assert layer["input_shape_nhwc"] == [1, 30000, 30000, 4]
    assert 4 * layer["verified_input_hw"][0] * layer["verified_input_hw"][1] <= 2 ** 22
    network = manifest["verification"]["network"]
    assert network["status"] == "not run" and "over the verification budget of 4,194,304" in network["reason"]
    assert run_convert("--force", "--verify-model", model, out) == 1
    assert "--verify-model: tensor 'x' would have 3,600,000,000 elements" in _one_error_line(capsys)


@pytest.mark.parametrize("op, attributes", [
    ("ConvTranspose", {"strides": [2, 2], "output_shape": [37, 41]}),
    ("ConvTranspose", {"strides": [2, 3], "auto_pad": "SAME_UPPER"}),
    ("ConvTranspose", {"strides": [3, 2], "pads": [1, 0, 2, 1], "output_padding": [1, 1]}),
    ("Conv", {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("Conv", {"strides": [3, 1], "auto_pad": "SAME_LOWER", "dilations": [2, 2]}),
    ("Conv", {"strides": [2, 2], "pads": [0, 1, 2, 0]}),
])
def test_a_layer_verified_on_a_smaller_input_keeps_its_padding_and_crop(tmp_path, capsys, op, attributes):
    """SAME padding, explicit pads and output_shape mean the same layer on the smaller input."""
    transposed = op == "ConvTranspose"
    weight = np.random.default_rng(2).standard_normal((2, 3, 3, 3) if transposed else (3, 2, 3, 3)).astype(np.float32)
    node = helper.make_node(op, ["x", "w"], ["y"], name="layer", **attributes)
    input_hw = [19, 21] if transposed else [31, 27]
    model = _layer_model(tmp_path / "m.onnx", node, weight, [1, 2, *input_hw], None)
    out = tmp_path / "out"
    assert run_convert("--max-verify-elements", "400" if transposed else "300", model, out) == 0, \
        capsys.readouterr().err
    layer = json.loads((out / "manifest.json").read_text())["layers"][0]
    assert layer["verified_input_hw"] != input_hw and layer["max_error"]["fastdeconv"] <= layer["max_error"]["tolerance"]


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_max_verify_elements_must_be_a_positive_integer(tmp_path, model, capsys, value):
    with pytest.raises(SystemExit) as exit_info:
        run_convert("--max-verify-elements", value, model, tmp_path / "out")
    assert exit_info.value.code == 2
    assert f"--max-verify-elements must be a whole number > 0, got {value!r}" in capsys.readouterr().err


# ------------------------------------------------------------------------- STRING tensors, unexpected errors

def test_a_string_weight_is_skipped_with_its_type_named(tmp_path, capsys):
    weight = helper.make_tensor("w", TensorProto.STRING, [2, 2, 3, 3], [b"x"] * 36)
    graph = helper.make_graph([_conv()], "test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])], [weight])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    assert run_convert(model, tmp_path / "out") == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("warning: onnxruntime refuses to load") and "tensor(string)" in err[0], err
    assert len(err) == 2 and err[1].startswith("error: "), err
    assert "node 'conv' (Conv): its weight 'w' holds STRING values, not numbers" in err[1], err
    assert not (tmp_path / "out").exists()


def test_a_string_output_is_compared_exactly(tmp_path, capsys):
    """A model that also returns labels (a STRING tensor): the network check compares them for equality
    instead of converting them to float."""
    labels = helper.make_tensor("labels", TensorProto.STRING, [2], [b"cat", b"dog"])
    nodes = [_conv(), helper.make_node("Identity", ["labels"], ["names"], name="names")]
    graph = helper.make_graph(
        nodes, "test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6]),
         helper.make_tensor_value_info("names", TensorProto.STRING, [2])],
        [numpy_helper.from_array(_weight(), "w"), labels])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    assert run_convert(model, tmp_path / "out") == 0, capsys.readouterr().err
    outputs = read_manifest(tmp_path / "out")["verification"]["network"]["outputs"]
    names = next(o for o in outputs if o["name"] == "names")
    assert names["tolerance"] == 0.0 and set(names["max_error"].values()) == {0.0}


@pytest.mark.parametrize("raised, code, words", [
    (RuntimeError("boom\nsecond line"), 1, ["failed unexpectedly (RuntimeError: boom)", "--traceback",
                                            "nothing was written"]),
    (MemoryError(), 1, ["failed unexpectedly (MemoryError)"]),
    (KeyboardInterrupt(), 130, ["interrupted; nothing was written"]),
])
def test_an_unexpected_error_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch, raised, code, words):
    """An exception the converter does not expect (a bug, memory exhausted, Ctrl-C) while a layer is
    being written: one error line, the staging folder removed; --traceback re-raises a bug's."""
    from fastdeconv.convert import converter

    model = save_model(tmp_path / "m.onnx", [_conv()], {"w": _weight()}, {"x": [1, 2, 6, 6]}, {"y": [1, 2, 6, 6]})

    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(converter, "_fold", fail)
    assert run_convert(model, tmp_path / "out") == code
    line = _one_error_line(capsys)
    assert all(word in line for word in words), line
    assert "second line" not in line
    assert not (tmp_path / "out").exists() and _hidden(tmp_path) == []
    if code == 1:
        with pytest.raises(type(raised)):
            run_convert("--traceback", model, tmp_path / "out")
        assert not (tmp_path / "out").exists() and _hidden(tmp_path) == []

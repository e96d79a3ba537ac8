"""fastdeconv convert on real architectures exported from torch: DCGAN, a pix2pix U-Net (Concat skips),
an FCN with two tied bilinear upsamplers (Identity-shared weights), a WGAN-GP generator (Linear ->
BatchNorm1d -> reshape -> deconvs: a BatchNormalization after no conv), a MobileNet-style depthwise
decoder and a VAE decoder with ESPCN (PixelShuffle), at opsets 11 and 17 (TorchScript exporter) and 18
(dynamo exporter, when onnxscript is installed). Small sizes: each conversion takes well under a second."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from fastdeconv.convert import converter as convert_module
from fastdeconv.__main__ import main

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
nn = torch.nn


def _bilinear_kernel(channels, size):
    """FCN's fixed bilinear upsampling weight (C, C, k, k): one bilinear filter per channel."""
    factor = (size + 1) // 2
    center = factor - 1 if size % 2 == 1 else factor - 0.5
    og = np.ogrid[:size, :size]
    filt = (1 - abs(og[0] - center) / factor) * (1 - abs(og[1] - center) / factor)
    weight = np.zeros((channels, channels, size, size), dtype=np.float32)
    weight[range(channels), range(channels)] = filt
    return torch.from_numpy(weight)


def _randomize_batchnorms(module, seed):
    """Non-trivial running statistics, so that folding them is actually checked."""
    generator = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            n = m.num_features
            m.running_mean.copy_(0.1 * torch.randn(n, generator=generator))
            m.running_var.copy_(0.5 + torch.rand(n, generator=generator))
            m.weight.data.copy_(0.5 + torch.rand(n, generator=generator))
            m.bias.data.copy_(0.1 * torch.randn(n, generator=generator))
    return module


class DCGAN(nn.Module):
    def __init__(self, z=16, f=8):
        super().__init__()

        def up(cin, cout, stride, pad):
            return [nn.ConvTranspose2d(cin, cout, 4, stride, pad, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True)]

        self.net = nn.Sequential(*up(z, f * 4, 1, 0), *up(f * 4, f * 2, 2, 1), *up(f * 2, f, 2, 1),
                                 nn.ConvTranspose2d(f, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.net(z)


class UNet(nn.Module):
    """pix2pix's U-Net, three levels: Conv-BN-LeakyReLU down, ReLU-ConvTranspose-BN up, Concat skips."""

    def __init__(self, f=8):
        super().__init__()
        self.down1 = nn.Conv2d(3, f, 4, 2, 1)
        self.down2 = nn.Sequential(nn.LeakyReLU(0.2), nn.Conv2d(f, f * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(f * 2))
        self.inner = nn.Sequential(nn.LeakyReLU(0.2), nn.Conv2d(f * 2, f * 4, 4, 2, 1), nn.ReLU(),
                                   nn.ConvTranspose2d(f * 4, f * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(f * 2))
        self.up2 = nn.Sequential(nn.ReLU(), nn.ConvTranspose2d(f * 4, f, 4, 2, 1, bias=False), nn.BatchNorm2d(f))
        self.up1 = nn.Sequential(nn.ReLU(), nn.ConvTranspose2d(f * 2, 3, 4, 2, 1), nn.Tanh())

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(d1)
        u2 = torch.cat([d2, self.inner(d2)], 1)
        u1 = torch.cat([d1, self.up2(u2)], 1)
        return self.up1(u1)


class FCN(nn.Module):
    """FCN-8s in small: VGG-like features, score layers, two upsamplers with the same fixed bilinear
    weight (the exporter stores it once and names the second use through an Identity), Add skips."""

    def __init__(self, f=8, classes=4):
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(3, f, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.block2 = nn.Sequential(nn.Conv2d(f, f * 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.block3 = nn.Sequential(nn.Conv2d(f * 2, f * 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.score = nn.Conv2d(f * 2, classes, 1)
        self.score_pool2 = nn.Conv2d(f * 2, classes, 1)
        self.score_pool1 = nn.Conv2d(f, classes, 1)
        self.upscore2 = nn.ConvTranspose2d(classes, classes, 4, 2, 1, bias=False)
        self.upscore_pool4 = nn.ConvTranspose2d(classes, classes, 4, 2, 1, bias=False)
        self.upscore8 = nn.ConvTranspose2d(classes, classes, 4, 2, 1, bias=False)
        kernel = _bilinear_kernel(classes, 4)
        for layer in (self.upscore2, self.upscore_pool4, self.upscore8):
            layer.weight.data.copy_(kernel)

    def forward(self, x):
        p1 = self.block1(x)
        p2 = self.block2(p1)
        p3 = self.block3(p2)
        fuse2 = self.upscore2(self.score(p3)) + self.score_pool2(p2)
        fuse1 = self.upscore_pool4(fuse2) + self.score_pool1(p1)
        return self.upscore8(fuse1)


class WGANGP(nn.Module):
    """Linear -> BatchNorm1d -> ReLU -> reshape -> ConvTranspose-BN-ReLU ... -> Tanh."""

    def __init__(self, z=16, f=8):
        super().__init__()
        self.f = f
        self.fc = nn.Sequential(nn.Linear(z, f * 4 * 4 * 4), nn.BatchNorm1d(f * 4 * 4 * 4), nn.ReLU(True))
        self.net = nn.Sequential(nn.ConvTranspose2d(f * 4, f * 2, 4, 2, 1), nn.BatchNorm2d(f * 2), nn.ReLU(True),
                                 nn.ConvTranspose2d(f * 2, f, 4, 2, 1), nn.BatchNorm2d(f), nn.ReLU(True),
                                 nn.ConvTranspose2d(f, 3, 4, 2, 1), nn.Tanh())

    def forward(self, z):
        return self.net(self.fc(z).view(-1, self.f * 4, 4, 4))


class DepthwiseDecoder(nn.Module):
    """MobileNet-style: depthwise ConvTranspose upsampling, pointwise Conv, BN, ReLU6."""

    def __init__(self, f=8):
        super().__init__()
        layers = [nn.Conv2d(4, f * 2, 1, bias=False), nn.BatchNorm2d(f * 2), nn.ReLU6()]
        channels = f * 2
        for out in (f * 2, f):
            layers += [nn.ConvTranspose2d(channels, channels, 4, 2, 1, groups=channels, bias=False),
                       nn.BatchNorm2d(channels), nn.ReLU6(),
                       nn.Conv2d(channels, out, 1, bias=False), nn.BatchNorm2d(out), nn.ReLU6()]
            channels = out
        layers += [nn.Conv2d(channels, channels, 3, padding=1, groups=channels), nn.Conv2d(channels, 3, 1),
                   nn.Sigmoid()]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class VAEDecoderESPCN(nn.Module):
    """A VAE decoder ending in ESPCN: Linear -> reshape -> ConvTranspose -> Conv -> PixelShuffle."""

    def __init__(self, z=8, f=8):
        super().__init__()
        self.f = f
        self.fc = nn.Linear(z, f * 4 * 4)
        self.up = nn.Sequential(nn.ConvTranspose2d(f, f, 4, 2, 1), nn.ReLU())
        self.espcn = nn.Sequential(nn.Conv2d(f, f, 5, padding=2), nn.Tanh(), nn.Conv2d(f, f // 2, 3, padding=1),
                                   nn.Tanh(), nn.Conv2d(f // 2, 3 * 2 ** 2, 3, padding=1), nn.PixelShuffle(2),
                                   nn.Sigmoid())

    def forward(self, z):
        return self.espcn(self.up(self.fc(z).view(-1, self.f, 4, 4)))


ARCHITECTURES = {
    "dcgan": (DCGAN, (1, 16, 1, 1)),
    "pix2pix_unet": (UNet, (1, 3, 16, 16)),
    "fcn8s": (FCN, (1, 3, 16, 16)),
    "wgan_gp": (WGANGP, (1, 16)),
    "depthwise_decoder": (DepthwiseDecoder, (1, 4, 4, 4)),
    "vae_espcn": (VAEDecoderESPCN, (1, 8)),
}
EXPORTS = [pytest.param(11, False, id="opset11"), pytest.param(17, False, id="opset17"),
           pytest.param(18, True, id="opset18-dynamo")]


def _conv_modules(model):
    return [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d))]


def export(name, path, opset, dynamo):
    """(the torch module, the exported model's path) for one architecture."""
    if dynamo:
        pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
    builder, input_shape = ARCHITECTURES[name]
    torch.manual_seed(0)
    model = _randomize_batchnorms(builder(), seed=1).eval()
    example = torch.randn(*input_shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(model, (example,), str(path), dynamo=True, opset_version=opset, verbose=False)
        else:
            torch.onnx.export(model, (example,), str(path), dynamo=False, opset_version=opset,
                              input_names=["input"], output_names=["output"])
    return model, path


@pytest.mark.parametrize("opset, dynamo", EXPORTS)
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_real_architecture_converts_and_verifies(name, opset, dynamo, tmp_path, capsys):
    model, path = export(name, tmp_path / f"{name}.onnx", opset, dynamo)
    out = tmp_path / "out"
    assert main(["convert", "--verify-model", str(path), str(out)]) == 0, capsys.readouterr().err
    stdout = capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    layers = manifest["layers"]
    assert len(layers) == len(_conv_modules(model)), [layer["onnx_node"] for layer in layers]
    network = manifest["verification"]["network"]
    assert network["status"] == "passed"
    for output in network["outputs"]:
        assert output["max_error"]["fastdeconv vs onnx.reference"] <= output["tolerance"]
        assert all(e is not None and e <= output["tolerance"] for e in output["max_error"].values())
    assert stdout.splitlines()[-1].startswith(f"converted {len(layers)} layers")
    # The layers are wired by tensor name: every layer input is a graph input or some node's output.
    produced = {i["name"] for i in manifest["graph_inputs"]} | {t for s in manifest["skipped"] for t in s["outputs"]}
    produced |= {layer["onnx_output"] for layer in layers}
    graph = onnx.load(str(path)).graph
    produced |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    produced |= {i.name for i in graph.initializer}
    for layer in layers:
        assert layer["onnx_input"] in produced or any(layer["onnx_input"] in n.output for n in graph.node)


def test_fcn_tied_upsamplers_share_one_initializer(tmp_path, capsys):
    """torch stores the equal bilinear weights once: upscore_pool4's and upscore8's weights are Identity
    outputs of upscore2's; each layer still gets its own files, and the manifest says who shares."""
    _, path = export("fcn8s", tmp_path / "fcn.onnx", 17, False)
    graph = onnx.load(str(path)).graph
    assert any(n.op_type == "Identity" for n in graph.node), "the exporter no longer ties equal weights"
    out = tmp_path / "out"
    assert main(["convert", str(path), str(out)]) == 0, capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    ups = [layer for layer in manifest["layers"] if layer["kind"] == "conv_transpose2d"]
    assert len(ups) == 3 and len({layer["weight_source"] for layer in ups}) == 1
    names = sorted(layer["name"] for layer in ups)
    assert sorted(manifest["shared_weights"][ups[0]["weight_source"]]) == names
    for layer in ups:
        assert sorted(layer["shares_weight_with"] + [layer["name"]]) == names
        assert (out / layer["files"]["weight"]).read_bytes() == (out / ups[0]["files"]["weight"]).read_bytes()
    skipped = {s["op"] for s in manifest["skipped"]}
    assert skipped == {"Add", "MaxPool"}   # each Relu follows its Conv: recorded as the layer's activation


def test_wgan_gp_stray_batchnorm_is_skipped_with_an_accurate_reason(tmp_path, capsys):
    _, path = export("wgan_gp", tmp_path / "wgan.onnx", 11, False)
    out = tmp_path / "out"
    assert main(["convert", str(path), str(out)]) == 0
    captured = capsys.readouterr()
    manifest = json.loads((out / "manifest.json").read_text())
    (stray,) = [s for s in manifest["skipped"] if s["op"] == "BatchNormalization"]
    assert "not from a Conv/ConvTranspose" in stray["reason"] and "(Gemm)" in stray["reason"]
    assert "between the convolution" not in captured.err
    assert sum(layer["batchnorm"] is not None for layer in manifest["layers"]) == 2
    assert "BatchNormalization×1" in captured.out.splitlines()[-1] or "BatchNormalization" in captured.out


def test_unet_skip_connections_are_listed_for_the_app(tmp_path, capsys):
    _, path = export("pix2pix_unet", tmp_path / "unet.onnx", 17, False)
    out = tmp_path / "out"
    assert main(["convert", str(path), str(out)]) == 0
    summary = capsys.readouterr().out.splitlines()[-1]
    # torch's exporter folds a BatchNorm after a Conv2d itself; the ones after ConvTranspose are ours
    batchnorms = sum(n.op_type == "BatchNormalization" for n in onnx.load(str(path)).graph.node)
    assert batchnorms == 2
    assert summary.startswith("converted 6 layers (2 BatchNorm folded); "
                              "skipped 6 nodes: Concat×2, LeakyRelu×2, Relu×2")
    manifest = json.loads((out / "manifest.json").read_text())
    layers = {layer["onnx_output"]: layer for layer in manifest["layers"]}
    for concat in (s for s in manifest["skipped"] if s["op"] == "Concat"):
        # each Concat reads a layer's output (the skip) and the decoder's output: both named in the manifest
        assert all(name in layers for name in concat["inputs"]), concat


def test_strict_refuses_a_real_model_before_writing(tmp_path, capsys):
    _, path = export("pix2pix_unet", tmp_path / "unet.onnx", 17, False)
    out = tmp_path / "out"
    assert main(["convert", "--strict", str(path), str(out)]) == 2
    error = capsys.readouterr().err
    assert "--strict" in error and "Concat" in error and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unet.onnx"]


def test_network_check_uses_the_written_files(tmp_path, capsys, monkeypatch):
    """Corrupt one .dat file between the per-layer checks and the whole-network check: it fails, exit 1,
    nothing written (the per-layer checks alone would have passed)."""
    _, path = export("dcgan", tmp_path / "dcgan.onnx", 17, False)
    real = convert_module._verify_network

    def corrupting(graph, manifest, directory):
        layer = manifest["layers"][1]
        weight = np.fromfile(directory / layer["files"]["weight"], dtype="<f4")
        (weight * 1.01).astype("<f4").tofile(directory / layer["files"]["weight"])
        return real(graph, manifest, directory)

    monkeypatch.setattr(convert_module, "_verify_network", corrupting)
    out = tmp_path / "out"
    assert main(["convert", str(path), str(out)]) == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out and "the whole network does not match" in captured.err
    assert not out.exists()


@pytest.mark.parametrize("name, opset, dynamo", [
    pytest.param("pix2pix_unet", 13, False, id="unet-torchscript-opset13"),
    pytest.param("fcn8s", 17, False, id="fcn-torchscript-opset17"),
    pytest.param("pix2pix_unet", 18, True, id="unet-dynamo-opset18"),
])
def test_dynamic_height_and_width_convert_at_the_default_size(name, opset, dynamo, tmp_path, capsys):
    """Exported with a symbolic batch, height and width (dynamic_axes / dynamic_shapes): every conv
    converts, the network is verified at the smallest default size the strides accept (64, a
    multiple of 8), and an --input-shape of another size works too."""
    if dynamo:
        pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
    builder, input_shape = ARCHITECTURES[name]
    torch.manual_seed(0)
    model = _randomize_batchnorms(builder(), seed=1).eval()
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            dim = torch.export.Dim
            size = dim("size", min=1, max=128)
            torch.onnx.export(model, (torch.randn(*input_shape),), str(path), dynamo=True, opset_version=opset,
                              dynamic_shapes=({2: 8 * size, 3: 8 * size},), verbose=False)
        else:
            torch.onnx.export(model, (torch.randn(*input_shape),), str(path), dynamo=False, opset_version=opset,
                              input_names=["input"], output_names=["output"],
                              dynamic_axes={"input": {0: "n", 2: "h", 3: "w"}, "output": {0: "n", 2: "h", 3: "w"}})
    declared = [d.dim_value or None for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim]
    assert declared[2] is None and declared[3] is None, declared
    out = tmp_path / "out"
    assert main(["convert", "--verify-model", str(path), str(out)]) == 0, capsys.readouterr().err
    summary = capsys.readouterr().out.splitlines()[-1]
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["layers"]) == len(_conv_modules(model))
    (graph_input,) = manifest["graph_inputs"]
    assert graph_input["shape"][2:] == [64, 64] and graph_input["shape_source"] == "default size"
    assert "(default size; the model declares" in summary
    assert manifest["verification"]["network"]["status"] == "passed"
    name_in_model = graph_input["name"]
    assert main(["convert", "--force", "--input-shape", f"{name_in_model}:1,3,40,56", str(path), str(out)]) == 0
    assert json.loads((out / "manifest.json").read_text())["verification"]["network"]["inputs"] == \
        {name_in_model: [1, 3, 40, 56]}

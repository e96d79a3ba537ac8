"""fastdeconv.from_torch: random torch ConvTranspose2d / Conv2d modules give layers whose results equal the
modules' own forward; everything else is refused with a clear error; torch is never imported by fastdeconv."""

from __future__ import annotations

import doctest
import subprocess
import sys

import numpy as np
import pytest

import fastdeconv

torch = pytest.importorskip("torch")


def _random_module(rng, transposed):
    groups = int(rng.integers(1, 4))
    c_in, c_out = groups * int(rng.integers(1, 4)), groups * int(rng.integers(1, 4))
    kernel = tuple(int(k) for k in rng.integers(1, 5, size=2))
    stride = tuple(int(s) for s in rng.integers(1, 4, size=2))
    dilation = tuple(int(d) for d in rng.integers(1, 3, size=2))
    padding = tuple(int(p) for p in rng.integers(0, 3, size=2))
    bias = bool(rng.integers(0, 2))
    if transposed:
        output_padding = tuple(int(rng.integers(0, max(s, d))) for s, d in zip(stride, dilation))
        return torch.nn.ConvTranspose2d(c_in, c_out, kernel, stride, padding, output_padding, groups, bias, dilation)
    return torch.nn.Conv2d(c_in, c_out, kernel, stride, padding, dilation, groups, bias)


def _compare(module, x_nhwc, rtol=1e-5):
    layer = fastdeconv.from_torch(module)
    with torch.no_grad():
        expected = module(torch.from_numpy(x_nhwc).permute(0, 3, 1, 2)).permute(0, 2, 3, 1).numpy()
    y = layer(x_nhwc)
    assert y.shape == expected.shape and y.dtype == expected.dtype
    scale = max(float(np.max(np.abs(expected))), 1e-30)
    assert float(np.max(np.abs(y - expected))) <= rtol * scale, (module, float(np.max(np.abs(y - expected))))
    return layer


@pytest.mark.parametrize("transposed", [True, False], ids=["ConvTranspose2d", "Conv2d"])
@pytest.mark.parametrize("seed", range(25))
def test_random_modules_match_torch_forward(seed, transposed):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    module = _random_module(rng, transposed)
    h, w = (int(v) for v in rng.integers(6, 12, size=2))
    x = rng.standard_normal((int(rng.integers(1, 3)), h, w, module.in_channels), dtype=np.float32)
    layer = _compare(module, x)
    expected_type = fastdeconv.ConvTranspose2d if transposed else fastdeconv.Conv2d
    assert type(layer) is expected_type
    assert layer.weight.shape == (module.weight.shape[0], *module.weight.shape[2:], module.weight.shape[1])
    assert (layer.bias is None) == (module.bias is None)


def test_float64_module_and_the_copy_is_independent():
    torch.manual_seed(1)
    module = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2).double()
    x = np.random.default_rng(1).standard_normal((2, 5, 7, 4))
    layer = _compare(module, x, rtol=1e-12)
    assert layer.weight.dtype == np.float64
    before = layer(x)
    with torch.no_grad():
        module.weight.zero_()
    np.testing.assert_array_equal(layer(x), before)


@pytest.mark.parametrize("kernel, dilation", [(3, 1), (4, 1), ((2, 5), (3, 1)), (1, 1)])
def test_conv_string_padding(kernel, dilation):
    torch.manual_seed(2)
    x = np.random.default_rng(2).standard_normal((1, 9, 8, 3), dtype=np.float32)
    same = torch.nn.Conv2d(3, 5, kernel, padding="same", dilation=dilation)
    layer = _compare(same, x)
    assert layer(x).shape[1:3] == (9, 8)
    valid = torch.nn.Conv2d(3, 5, kernel, padding="valid", dilation=dilation)
    assert fastdeconv.from_torch(valid)._kwargs["padding"] == 0
    _compare(valid, x)


def test_subclass_counts_as_its_base():
    class Mine(torch.nn.ConvTranspose2d):
        pass

    torch.manual_seed(3)
    _compare(Mine(2, 3, 4, stride=2, padding=1), np.ones((1, 3, 3, 2), np.float32))


@pytest.mark.parametrize("thing, name", [
    (lambda: torch.nn.Conv1d(2, 2, 3), "torch.nn.modules.conv.Conv1d"),
    (lambda: torch.nn.Conv3d(2, 2, 3), "torch.nn.modules.conv.Conv3d"),
    (lambda: torch.nn.Sequential(torch.nn.Conv2d(2, 2, 3)), "torch.nn.modules.container.Sequential"),
    (lambda: np.ones((2, 2, 3, 3)), "numpy.ndarray"),
    (lambda: "conv", "builtins.str"),
])
def test_other_types_are_a_type_error_naming_the_type(thing, name):
    with pytest.raises(TypeError, match=f"torch.nn.ConvTranspose2d or torch.nn.Conv2d, got {name}$"):
        fastdeconv.from_torch(thing())


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_padding_mode_other_than_zeros_is_a_value_error(mode):
    with pytest.raises(ValueError, match=f"padding_mode='{mode}'"):
        fastdeconv.from_torch(torch.nn.Conv2d(2, 2, 3, padding=1, padding_mode=mode))


def test_transposed_with_string_padding_and_lazy_modules_are_value_errors():
    with pytest.raises(ValueError, match="padding must be integers"):
        fastdeconv.from_torch(torch.nn.ConvTranspose2d(2, 2, 3, padding="same"))
    with pytest.raises(ValueError, match="lazy module"):
        fastdeconv.from_torch(torch.nn.LazyConv2d(4, 3))


def test_algorithm_and_backend_are_passed_on():
    module = torch.nn.ConvTranspose2d(4, 4, 3, stride=1, padding=1)
    layer = fastdeconv.from_torch(module, backend="reference")
    assert layer.backend == "reference"
    _compare(module, np.ones((1, 4, 4, 4), np.float32))


def test_importing_fastdeconv_does_not_import_torch():
    code = "import sys, fastdeconv; fastdeconv.from_torch; assert 'torch' not in sys.modules, 'torch imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_docstring_examples_run():
    from fastdeconv import _torch

    failures, tried = doctest.testmod(_torch, raise_on_error=False, optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0

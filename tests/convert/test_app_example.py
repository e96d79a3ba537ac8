"""The README's "Using the files in an app" Python example, run as written on the default decoder's
converted folder: its output must be the ONNX model's (onnx.reference on the same input)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx_helpers import run_convert  # noqa: E402

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    if not README.is_file():
        pytest.skip("needs the source tree (README.md)")
    found = re.search(r"<!-- app-example -->\n```python\n(.*?)```\n<!-- /app-example -->",
                      README.read_text(encoding="utf-8"), re.S)
    assert found, "the README's app example (between <!-- app-example --> markers) is missing"
    return found.group(1)


def test_the_readme_app_example_reproduces_the_model(tmp_path, monkeypatch, capsys):
    from onnx.reference import ReferenceEvaluator

    from fastdeconv.convert.converter import DEFAULT_MODEL
    from fastdeconv.convert.oracle import reference_ops

    monkeypatch.chdir(tmp_path)
    assert run_convert("decoder_mps") == 0, capsys.readouterr().err
    namespace = {}
    exec(compile(_example(), "README.md app example", "exec"), namespace)
    expected = ReferenceEvaluator(str(DEFAULT_MODEL), new_ops=reference_ops()).run(None, {"z": namespace["z"]})[0]
    assert namespace["image"].shape == expected.shape
    np.testing.assert_allclose(namespace["image"], expected, rtol=0, atol=1e-5)

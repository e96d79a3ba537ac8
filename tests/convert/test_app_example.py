"""The docs' "Using the files in an app" Python example (docs/guide/conversion.rst), run as written on the default decoder's
converted folder: its output must be the ONNX model's (onnx.reference on the same input)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx_helpers import run_convert  # noqa: E402

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "conversion.rst"


def _example() -> str:
    if not PAGE.is_file():
        pytest.skip("needs the source tree (docs/guide/conversion.rst)")
    found = re.search(r"\n\.\. app-example:[^\n]*\n\n\.\. code-block:: python\n\n(.*?)\n\.\. /app-example\n",
                      PAGE.read_text(encoding="utf-8"), re.S)
    assert found, "the docs' app example (between the '.. app-example:' and '.. /app-example' comments) is missing"
    return textwrap.dedent(found.group(1))


def test_the_docs_app_example_reproduces_the_model(tmp_path, monkeypatch, capsys):
    from onnx.reference import ReferenceEvaluator

    from fastdeconv.convert.converter import DEFAULT_MODEL
    from fastdeconv.convert.oracle import reference_ops

    monkeypatch.chdir(tmp_path)
    assert run_convert("decoder_mps") == 0, capsys.readouterr().err
    namespace = {}
    exec(compile(_example(), "docs/guide/conversion.rst app example", "exec"), namespace)
    expected = ReferenceEvaluator(str(DEFAULT_MODEL), new_ops=reference_ops()).run(None, {"z": namespace["z"]})[0]
    assert namespace["image"].shape == expected.shape
    np.testing.assert_allclose(namespace["image"], expected, rtol=0, atol=1e-5)

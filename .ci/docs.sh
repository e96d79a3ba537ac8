#!/usr/bin/env bash
# The documentation, as .ci/run's stage 11 checks it (run it in a virtual environment where fastdeconv is
# installed, editable from this checkout; .ci/run uses stage 1's):
#   1. the HTML built by Sphinx with warnings as errors (docs/_build/html; nothing fetched from the network:
#      no intersphinx, no linkcheck, formulas rendered to MathML at build time);
#   2. the doctests: the pages' ``.. doctest::`` blocks (Sphinx's doctest builder) and the public modules'
#      docstring Examples (pytest --doctest-modules; the root conftest.py skips an Example whose optional
#      package is missing: torch, onnx; fastdeconv/dask.py is named only where dask is installed);
#   3. headless Chromium (Debian's chromium) on the front page and an API page: any console error fails
#      (docs/browser_check.py, whose --selftest first shows that it catches a JavaScript error, a
#      console.error and a missing script); the screenshots are saved and their paths printed.
# Fails, never skips: sphinx and numpydoc are installed with pip, chromium with apt-get (as root) when
# absent; if they still are not there, the stage fails.
set -euo pipefail
cd "$(dirname "$0")/.."

python -c "import fastdeconv, sys; print('docs: documenting', fastdeconv.__version__, 'from', fastdeconv.__file__)"
pip install -q "sphinx>=7" "numpydoc>=1.6"
if ! command -v chromium >/dev/null; then
    echo "docs: installing chromium"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }
fi
command -v chromium >/dev/null || { echo "docs: chromium is missing" >&2; exit 1; }

rm -rf docs/_build docs/generated
started=$SECONDS
sphinx-build -W --keep-going -q -b html docs docs/_build/html
echo "docs: HTML built in $((SECONDS - started)) s (docs/_build/html)"

sphinx-build -W --keep-going -q -b doctest docs docs/_build/doctest
grep -A4 "^Doctest summary" docs/_build/doctest/output.txt

modules=(fastdeconv/_api.py fastdeconv/_layers.py fastdeconv/_config.py fastdeconv/_weight_cache.py
         fastdeconv/_backends/registry.py fastdeconv/_call.py fastdeconv/_params.py fastdeconv/reference.py
         fastdeconv/_bilinear.py fastdeconv/_torch.py fastdeconv/weights/ fastdeconv/convert/converter.py
         fastdeconv/convert/verify.py)
if python -c "import dask, distributed, zarr" 2>/dev/null; then modules+=(fastdeconv/dask.py); fi
python -m pytest -q -p no:cacheprovider -rs --doctest-modules "${modules[@]}"

python docs/browser_check.py --selftest docs/_build/browser-selftest
shots=$(pwd)/docs/_build/screenshots
python docs/browser_check.py "$shots" docs/_build/html/index.html docs/_build/html/generated/fastdeconv.conv_transpose2d.html
echo "docs: screenshots: $shots/index.png (front page), $shots/fastdeconv.conv_transpose2d.png (API page)"

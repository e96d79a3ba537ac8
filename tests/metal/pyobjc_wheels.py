"""PyObjC's own files from its macOS wheels on PyPI: pure-Python code and metadata, usable on any platform.

The wheels are the versions ``tests/metal/data/pyobjc_selectors.json`` was extracted from (its "pyobjc"
entry). They are found in ``$FASTDECONV_PYOBJC_WHEELS`` (a folder .ci/run fills before the tests) or
else in a cache folder (:data:`CACHE`), where pip downloads them on first use (about 7 MB). Where they
cannot be had, :func:`wheels_folder` skips the test with the reason, or fails it when the download was
expected: ``$CI`` set, or ``$FASTDECONV_PYOBJC_WHEELS`` naming a folder.

Nothing of the wheels' compiled code runs: only ``_metadata.py`` files (executed against a recording
``objc``) and ``objc/_transform.py``, ``objc/_informal_protocol.py`` and ``objc/_new.py``, loaded by
:mod:`pyobjc_runtime` over its stub of the C module. scripts/extract_pyobjc_selectors.py reads the
metadata through :func:`read_metadata` too.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

TABLE_PATH = Path(__file__).parent / "data" / "pyobjc_selectors.json"
WHEELS_ENV = "FASTDECONV_PYOBJC_WHEELS"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fastdeconv" / "pyobjc-wheels"
#: Any macOS wheel of a version holds the same pure-Python files; this platform and Python exist for all of them.
PLATFORM, PYTHON_VERSION = "macosx_11_0_arm64", "3.12"

#: (framework, PyPI package), in the order importing the frameworks registers their metadata (``import Metal``
#: imports Foundation first; pyobjc_layer imports Metal before MetalPerformanceShaders). PyObjC keeps the last
#: registration of a (class, selector) (pyobjc-core Modules/objc/registry.m, PyObjC_AddToRegistry:
#: "if so replace that registration").
METADATA_ORDER = (("Foundation", "pyobjc-framework-Cocoa"), ("Metal", "pyobjc-framework-Metal"),
                  ("MetalPerformanceShaders", "pyobjc-framework-MetalPerformanceShaders"),
                  ("MetalPerformanceShadersGraph", "pyobjc-framework-MetalPerformanceShadersGraph"))
CORE = "pyobjc-core"


def pinned_versions(table: dict | None = None) -> dict[str, str]:
    """{PyPI package: version} of the wheels the table was extracted from."""
    table = table or json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    return {package: wheel.split("-")[1] for package, wheel in table["pyobjc"].items()}


def normal_name(package: str) -> str:
    """A package's name as its wheel file spells it (pyobjc-framework-Metal → pyobjc_framework_metal)."""
    return package.lower().replace("-", "_")


def wheel_path(folder: Path, package: str, version: str | None = None) -> Path | None:
    found = sorted(Path(folder).glob(f"{normal_name(package)}-{version or '*'}-*.whl"))
    return found[-1] if found else None


def download(folder: Path, versions: dict[str, str]) -> str | None:
    """pip-download the macOS wheels of ``versions`` into ``folder``; None, or why it failed."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform", PLATFORM,
               "--python-version", PYTHON_VERSION, "--retries", "0", "--timeout", "15", "-d", str(folder),
               *(f"{package}=={version}" for package, version in sorted(versions.items()))]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(command)}: {exc}"
    if result.returncode:
        return f"{' '.join(command)} failed:\n{result.stderr.strip()[-2000:]}"
    return None


@functools.lru_cache(maxsize=None)
def _locate() -> tuple[Path | None, str]:
    """(the folder with every pinned wheel, "") or (None, why not)."""
    versions = pinned_versions()
    named = os.environ.get(WHEELS_ENV)
    folder = Path(named) if named else CACHE
    missing = {p: v for p, v in versions.items() if wheel_path(folder, p, v) is None}
    if missing and named:
        return None, f"${WHEELS_ENV}={named} lacks the wheels of {missing} (.ci/run downloads them there)"
    if missing:
        failure = download(folder, missing)
        if failure:
            return None, f"PyObjC's macOS wheels could not be downloaded from PyPI: {failure}"
    return folder, ""


def wheels_folder() -> Path:
    """The folder holding the pinned wheels; skips the calling test when they cannot be had, or fails it
    where they were expected ($CI, or $FASTDECONV_PYOBJC_WHEELS set)."""
    import pytest  # noqa: PLC0415 - scripts/extract_pyobjc_selectors.py uses this module without pytest

    folder, why = _locate()
    if folder is None:
        if os.environ.get(WHEELS_ENV) or os.environ.get("CI"):
            pytest.fail(f"{why} (required here: $CI or ${WHEELS_ENV} is set)", pytrace=False)
        pytest.skip(f"needs PyObjC's macOS wheels: {why}")
    return folder


def read_from_wheel(folder: Path, package: str, member: str) -> str:
    with zipfile.ZipFile(wheel_path(folder, package)) as wheel:
        return wheel.read(member).decode("utf-8")


@functools.lru_cache(maxsize=None)
def compiled_from_wheel(folder: Path, package: str, member: str):
    """The code of a Python file of a wheel, compiled once per process (the file name says where it is from)."""
    return compile(read_from_wheel(folder, package, member), f"{wheel_path(folder, package).name}:{member}", "exec")


@contextlib.contextmanager
def modules_replaced(replacements: dict):
    """``sys.modules`` with ``replacements`` inside the block (the real PyObjC, on a Mac, is put back)."""
    saved = {name: sys.modules.get(name) for name in replacements}
    sys.modules.update(replacements)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


class _Absorb:
    """Whatever a _metadata.py asks of objc that no test reads (struct types, keyword maps, ...)."""

    def __call__(self, *args, **kwargs):
        return _Absorb()

    def __getattr__(self, name):
        return _Absorb()


def execute_metadata(folder: Path, register, arch: str = "arm64", **objc_attributes):
    """Run every framework's ``_metadata.py`` of :data:`METADATA_ORDER`, in that order, calling
    ``register(framework, class_name, selector, metadata)`` (str, bytes, bytes, dict) for each
    ``objc.registerMetaDataForSelector``. ``objc_attributes``: more of objc's API for the files to use
    (``selector`` and ``informal_protocol``, for the informal protocols Foundation declares)."""
    objc = types.ModuleType("objc")
    objc.arch = arch
    objc.__dict__.update(objc_attributes)
    objc.__getattr__ = lambda name: _Absorb()
    with modules_replaced({"objc": objc}):
        for framework, package in METADATA_ORDER:
            objc.registerMetaDataForSelector = functools.partial(register, framework)
            code = compiled_from_wheel(folder, package, f"{framework}/_metadata.py")
            exec(code, {"__name__": f"{framework}._metadata"})


def read_metadata(folder: Path) -> dict[str, dict]:
    """{framework: {(class, selector): metadata}} of each framework's registrations, bytes decoded
    (what scripts/extract_pyobjc_selectors.py writes into the table)."""
    found = {framework: {} for framework, _ in METADATA_ORDER}

    def register(framework, class_name, selector, metadata):
        found[framework][(class_name.decode(), selector.decode())] = jsonable(metadata)

    execute_metadata(folder, register)
    return found


def jsonable(value):
    """Metadata as JSON holds it: bytes as str, keys as str."""
    if isinstance(value, bytes):
        return value.decode("ascii")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def main(argv=None) -> int:
    """``python tests/metal/pyobjc_wheels.py FOLDER``: download the pinned wheels into FOLDER (.ci/run)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python tests/metal/pyobjc_wheels.py FOLDER (then export FASTDECONV_PYOBJC_WHEELS=FOLDER)",
              file=sys.stderr)
        return 2
    failure = download(Path(argv[0]), pinned_versions())
    if failure:
        print(failure, file=sys.stderr)
        return 1
    print(f"PyObjC's macOS wheels in {argv[0]}: {', '.join(p.name for p in sorted(Path(argv[0]).glob('*.whl')))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

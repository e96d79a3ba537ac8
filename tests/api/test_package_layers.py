"""The package's layers, read from its source with ast: imports run one way, down.

Every import statement of every module under fastdeconv/ counts, those inside functions too (a lazy
import is still an arrow). An arrow goes to the module named: ``from .. import _params`` is an arrow
to ``fastdeconv._params``; ``from . import status`` (a name defined in a package's ``__init__``) is
one to that package. The C sources under src/ are checked the same way by their ``#include`` lines.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import fastdeconv

PACKAGE = Path(fastdeconv.__file__).resolve().parent
SRC = Path(__file__).resolve().parents[2] / "src"

TOOLS = ("fastdeconv.convert", "fastdeconv.bench", "fastdeconv.selftest", "fastdeconv.__main__")
API = ("fastdeconv", "fastdeconv._api", "fastdeconv._layers", "fastdeconv._weight_cache")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, modules) -> str | None:
    """The fastdeconv module an imported dotted name refers to (a name inside a module: that module)."""
    while name and name not in modules:
        if name == "fastdeconv._cpu":   # the compiled extension: a leaf
            return name
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, modules) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    arrows = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                root = ".".join(base + ([node.module] if node.module else []))
            else:
                root = node.module or ""
            targets = [f"{root}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target == "fastdeconv" or target.startswith("fastdeconv."):
                resolved = _resolve(target, modules)
                if resolved and resolved != module:
                    arrows.add(resolved)
    return arrows


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {module: _imports(module, path, modules) for module, path in modules.items()}


def _within(module: str, prefixes) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def _cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_reader_sees_the_arrows_it_must():
    """The checks below can fail: the reader finds known arrows of each kind."""
    graph = _graph()
    assert "fastdeconv._params" in graph["fastdeconv._call"]             # from ._params import
    assert "fastdeconv.dask" in graph["fastdeconv._api"]                 # a lazy import in a function
    assert "fastdeconv.metal" in graph["fastdeconv.metal.engine"]        # from . import status
    assert "fastdeconv.convert.converter" in graph["fastdeconv.__main__"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    assert _cycles(_graph()) == []


def test_the_library_never_imports_the_tools():
    wrong = {(module, target) for module, targets in _graph().items() if not _within(module, TOOLS)
             for target in targets if _within(target, TOOLS)}
    assert not wrong, f"library modules import the tools (convert, bench, __main__): {sorted(wrong)}"


def test_the_dask_adapter_imports_no_api_module():
    wrong = {target for target in _graph()["fastdeconv.dask"] if target in API}
    assert not wrong, f"fastdeconv.dask imports {sorted(wrong)}"


def test_the_backends_import_neither_the_api_nor_the_dask_adapter():
    wrong = {(module, target) for module, targets in _graph().items() if _within(module, ("fastdeconv._backends",))
             for target in targets if target in API or target == "fastdeconv.dask"}
    assert not wrong, f"backends import a higher layer: {sorted(wrong)}"


def test_the_metal_engine_imports_no_backend():
    wrong = {(module, target) for module, targets in _graph().items() if _within(module, ("fastdeconv.metal",))
             and module != "fastdeconv.metal.backend"   # the compatibility path, which re-exports the engine
             for target in targets if _within(target, ("fastdeconv._backends",)) or target in API}
    assert not wrong, f"the Metal engine imports a higher layer: {sorted(wrong)}"


# ----------------------------------------------------------------------------------------------
# src/: C only, in role folders, includes running down (algorithms -> kernels -> runtime)

ROLES = ("algorithms", "kernels", "runtime", "third_party")
# a role may include its own files and those of the roles after it in this order
LAYER = {"algorithms": 0, "kernels": 1, "runtime": 2, "third_party": 3}
needs_source = pytest.mark.skipif(not SRC.is_dir(), reason="needs the source tree (src/)")


@needs_source
def test_src_holds_c_only_in_role_folders():
    files = [path.relative_to(SRC) for path in SRC.rglob("*") if path.is_file()]
    assert files
    misplaced = [str(f) for f in files if f.parts[0] not in ROLES or len(f.parts) < 2]
    assert not misplaced, f"files outside the role folders {ROLES}: {misplaced}"
    not_c = [str(f) for f in files if f.parts[0] != "third_party" and f.suffix not in (".c", ".h")]
    assert not not_c, f"src/ holds C sources and headers only: {not_c}"


@needs_source
def test_src_includes_run_down():
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
    wrong = []
    for path in SRC.rglob("*"):
        if path.suffix not in (".c", ".h") or path.relative_to(SRC).parts[0] == "third_party":
            continue
        role = path.relative_to(SRC).parts[0]
        for name in include.findall(path.read_text(encoding="utf-8")):
            target = name.split("/")[0] if "/" in name else role
            if target not in LAYER or LAYER[target] < LAYER[role]:
                wrong.append(f"{path.relative_to(SRC)} includes {name}")
    assert not wrong, wrong

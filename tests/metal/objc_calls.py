"""A static scan of fastdeconv/metal/ for its Objective-C calls (ast only: no PyObjC, any platform).

Used by tests/test_metal_selectors.py, which checks every call against the committed table
tests/data/pyobjc_selectors.json, and by scripts/extract_pyobjc_selectors.py, which writes that table.

What counts as Objective-C (PyObjC spells the selector ``a:b:`` as ``a_b_``, one argument per colon):

* in every module: an attribute call whose name ends in ``_`` (not a dunder) — a selector that takes
  arguments, ``obj.setOffset_(…)``;
* in :data:`OBJC_MODULES` (the modules that hold PyObjC objects), every other attribute call as well —
  a selector without arguments (``commandBuffer.commit()``, ``Class.alloc()``) or, when the name is
  Apple's C-function style (``MTLCreateSystemDefaultDevice``), a framework function — unless it is
  Python: a call on an imported Python module (``np.…``, ``struct.…``), on PyObjC's own API
  (``objc.…``), a method defined in a Python class of fastdeconv/metal/ (``ctx.buffer``), or one of
  :data:`PYTHON_METHODS`;
* the string argument of ``respondsToSelector_`` (a selector named, not called); calls of that
  selector inside the ``if obj.respondsToSelector_("sel:")`` body are *guarded*: they run only where
  the selector exists, so its macOS version is not bounded by the backend's gate;
* the methods of a class derived from ``NSObject`` (the MPSCNN data source): selectors *implemented*;
* framework classes named in OBJC_MODULES (``MPS.MPSImage``), the class names a descriptor passes as a
  ``…_class=`` keyword (``kernel_class="MPSCNNConvolutionTranspose"``, looked up with ``getattr``), and
  protocols named with ``objc.protocolNamed``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

#: The modules that hold PyObjC objects; the others may not call a selector or import a framework.
OBJC_MODULES = ("pyobjc_layer.py", "__init__.py")

#: Apple's frameworks as PyObjC names them (imports of these are frameworks, not Python modules).
FRAMEWORK_MODULES = frozenset({"Foundation", "Metal", "MetalPerformanceShaders", "MetalPerformanceShadersGraph",
                               "CoreFoundation", "AppKit", "Cocoa"})

#: Methods of Python objects called in OBJC_MODULES on receivers the scan cannot type (everything else
#: there is Objective-C). Keep it short: a selector spelled like one of these escapes the check.
PYTHON_METHODS = frozenset({
    "as_buffer",          # objc.varlist (what PyObjC returns for -[MTLBuffer contents]): a memoryview
    "read_text", "joinpath",                   # importlib.resources
    "reshape", "view", "copy",                 # numpy arrays
    "split", "lower", "strip", "join",         # str
    "items", "get",                            # dict
})

#: Methods of PyObjC's own ``objc.formal_protocol`` (what ``objc.protocolNamed`` returns): Python API, not
#: selectors sent to an Objective-C object.
PYOBJC_PROTOCOL_METHODS = frozenset({"descriptionForInstanceMethod_", "descriptionForClassMethod_",
                                     "instanceMethods", "classMethods", "conformsTo_"})

#: Apple's C functions and classes: a framework prefix, then a capital (MTLCreateSystemDefaultDevice,
#: MTLSizeMake; MPSImage, NSObject).
FUNCTION_NAME = CLASS_NAME = re.compile(r"^(MTL|MPS|NS|CF)[A-Z]\w*$")


@dataclass(frozen=True)
class ObjcUse:
    """One use of Objective-C in the source.

    ``kind``: "call" (a selector sent), "function" (a framework C function called), "implemented"
    (a selector defined on an NSObject subclass), "responds" (a selector named in respondsToSelector_),
    "class" (a framework class looked up by name: ``MPS.MPSImage``), "protocol" (a protocol looked up
    with ``objc.protocolNamed``). ``selector`` is the class or protocol name for those two.
    ``arguments``: the arguments passed (call, function), or the method's parameters less ``self``.
    ``scope``: the module-level function or class the use is in (what :data:`SCOPE_PATHS` maps).
    """

    module: str
    line: int
    kind: str
    python_name: str
    selector: str
    arguments: int
    scope: str
    guarded: bool = False
    keywords: bool = False

    def where(self) -> str:
        return f"fastdeconv/metal/{self.module}:{self.line} ({self.scope}: {self.python_name})"


def selector_of(python_name: str) -> str:
    """PyObjC's rule: every ``_`` of the Python name is a ``:`` of the selector."""
    return python_name.replace("_", ":")


def _root(node):
    """The Name at the root of an attribute/subscript/call chain, or None."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _chain_has_objc(node) -> bool:
    """True when the receiver is PyObjC's own module (``objc.…``, ``fw.objc.…``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.Attribute) and node.attr == "objc":
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return isinstance(node, ast.Name) and node.id == "objc"


def _is_nsobject_subclass(cls: ast.ClassDef) -> bool:
    return any((isinstance(b, ast.Attribute) and b.attr == "NSObject")
               or (isinstance(b, ast.Name) and b.id == "NSObject") for b in cls.bases)


def _responds_selector(test) -> str | None:
    """``"sel:"`` when ``test`` is ``obj.respondsToSelector_("sel:")``."""
    if (isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr == "respondsToSelector_"
            and len(test.args) == 1 and isinstance(test.args[0], ast.Constant) and isinstance(test.args[0].value, str)):
        return test.args[0].value
    return None


def _constants(node) -> list:
    """The string constants a keyword value can take (a constant, or a conditional of constants)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _constants(node.body) + _constants(node.orelse)
    return []


def _python_names(trees) -> tuple[set, set]:
    """(imported Python modules and names, methods/functions defined outside NSObject subclasses)."""
    modules, defined = set(), set()
    for tree in trees:
        objc_methods = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _is_nsobject_subclass(node):
                objc_methods |= {id(f) for f in node.body if isinstance(f, ast.FunctionDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] not in FRAMEWORK_MODULES and alias.name != "objc":
                        modules.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                if (node.module or "").split(".")[0] not in FRAMEWORK_MODULES:
                    modules |= {alias.asname or alias.name for alias in node.names}
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in objc_methods:
                defined.add(node.name)
    return modules, defined


class _Scanner(ast.NodeVisitor):
    def __init__(self, module, objc_module, python_modules, python_defined):
        self.module, self.objc_module = module, objc_module
        self.python_modules, self.python_defined = python_modules, python_defined
        self.uses: list[ObjcUse] = []
        self.scope = "<module>"
        self.guards: list[str] = []
        self.parent_call = None

    def _use(self, node, kind, python_name, selector, arguments, keywords=False):
        self.uses.append(ObjcUse(self.module, node.lineno, kind, python_name, selector, arguments, self.scope,
                                 guarded=selector in self.guards, keywords=keywords))

    def _scoped(self, node):
        outer = self.scope
        if outer == "<module>":
            self.scope = node.name
        self.generic_visit(node)
        self.scope = outer

    def visit_ClassDef(self, node):
        if _is_nsobject_subclass(node):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    outer, self.scope = self.scope, self.scope if self.scope != "<module>" else node.name
                    self._use(item, "implemented", item.name, selector_of(item.name), len(item.args.args) - 1)
                    self.scope = outer
        self._scoped(node)

    def visit_FunctionDef(self, node):
        self._scoped(node)

    def visit_If(self, node):
        guard = _responds_selector(node.test)
        self.visit(node.test)
        if guard is not None:
            self.guards.append(guard)
        for child in node.body:
            self.visit(child)
        if guard is not None:
            self.guards.pop()
        for child in node.orelse:
            self.visit(child)

    def visit_Attribute(self, node):
        self.generic_visit(node)
        value = node.value
        is_framework_namespace = (isinstance(value, ast.Attribute) and value.attr == "fw") or (
            isinstance(value, ast.Name) and value.id == "fw")      # fw.MPSGraph is the framework module
        if self.objc_module and CLASS_NAME.match(node.attr) and not is_framework_namespace and not (
                isinstance(self.parent_call, ast.Call) and self.parent_call.func is node):
            self._use(node, "class", node.attr, node.attr, 0)

    def visit_Call(self, node):
        outer, self.parent_call = self.parent_call, node
        self.visit(node.func)
        self.parent_call = outer
        for child in (*node.args, *node.keywords):
            self.visit(child)
        for keyword in node.keywords:           # descriptors name the classes pyobjc_layer looks up with getattr
            if keyword.arg and keyword.arg.endswith("_class"):
                for value in _constants(keyword.value):
                    self._use(keyword.value, "class", keyword.arg, value, 0)
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr.startswith("__"):
            return
        name, nargs, keywords = func.attr, len(node.args), bool(node.keywords)
        if name == "respondsToSelector_" and (guard := _responds_selector(node)) is not None:
            self._use(node, "responds", name, guard, guard.count(":"))
        if _chain_has_objc(func.value):
            if name == "protocolNamed" and node.args and isinstance(node.args[0], ast.Constant):
                self._use(node, "protocol", name, node.args[0].value, 0)
            return                                                   # PyObjC's API: objc.NULL, objc.protocolNamed
        if name in PYOBJC_PROTOCOL_METHODS:
            return
        if name.endswith("_"):
            self._use(node, "call", name, selector_of(name), nargs, keywords)
            return
        if not self.objc_module:
            return
        if FUNCTION_NAME.match(name):
            self._use(node, "function", name, name, nargs, keywords)
            return
        root = _root(func.value)
        if root in self.python_modules or name in self.python_defined or name in PYTHON_METHODS:
            return
        self._use(node, "call", name, selector_of(name), nargs, keywords)


def metal_sources(package_dir: Path | None = None) -> dict[str, str]:
    """{file name: source} of every .py file of fastdeconv/metal/ (the installed package by default)."""
    if package_dir is None:
        from importlib import resources

        package_dir = Path(str(resources.files("fastdeconv.metal")))
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(Path(package_dir).glob("*.py"))}


def scan(sources: dict[str, str]) -> list[ObjcUse]:
    """Every Objective-C use in ``sources`` ({module file name: source})."""
    trees = {name: ast.parse(text, filename=name) for name, text in sources.items()}
    python_modules, python_defined = _python_names(trees.values())
    uses = []
    for name, tree in trees.items():
        scanner = _Scanner(name, name in OBJC_MODULES, python_modules, python_defined)
        scanner.visit(tree)
        uses += scanner.uses
    return uses


def framework_imports(sources: dict[str, str]) -> list[tuple[str, int, str]]:
    """(module, line, imported name) for every import of an Apple framework or of objc."""
    found = []
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text, filename=name)):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            found += [(name, node.lineno, n) for n in names if n.split(".")[0] in FRAMEWORK_MODULES | {"objc"}]
    return found


#: Which backend runs the code in each module-level scope of the OBJC_MODULES: a selector used there
#: must be available on the gate (fastdeconv.metal._MIN_MACOS) of every backend listed.
SCOPE_PATHS = {
    ("pyobjc_layer.py", "MetalContext"): ("mps", "mps-cnn"),
    ("pyobjc_layer.py", "tensor_data"): ("mps",),
    ("pyobjc_layer.py", "Resident"): ("mps",),
    ("pyobjc_layer.py", "GraphRunner"): ("mps",),
    ("pyobjc_layer.py", "data_source_class"): ("mps-cnn",),
    ("pyobjc_layer.py", "make_data_source"): ("mps-cnn",),
    ("pyobjc_layer.py", "CnnRunner"): ("mps-cnn",),
    ("__init__.py", "status"): ("mps", "mps-cnn"),
    ("descriptors.py", "cnn_descriptor"): ("mps-cnn",),
}

"""Write tests/metal/data/pyobjc_selectors.json: what PyObjC says about every Objective-C name fastdeconv.metal uses.

For every selector the Metal layer calls or implements, every framework function, class and protocol it
names (found by scanning fastdeconv/metal/ statically: tests/metal/objc_calls.py), the table holds

* ``signature``: the Objective-C type encoding (return type, ``@:``, argument types) and per-argument
  types, from PyObjC's header scans (``metadata/raw/<arch>-<sdk>.fwinfo`` in the framework's sdist);
* ``pyobjc_metadata``: the PyObjC metadata registered for it (``<Framework>/_metadata.py`` in the
  macOS wheel: array flags, type modifiers, …), on the declaring class, its nearest superclass with a
  registration, or NSObject (where PyObjC registers protocol methods); null when PyObjC registers none
  and converts from the encoding alone;
* ``introduced``: the macOS version Apple's headers give (the header scan's ``introduced``), the
  largest over the receivers listed.

No PyObjC is needed (the metadata files are executed against a stub ``objc`` module) and this runs on
Linux. The inputs are PyPI's files for macOS, fetched with pip (``--download``):

* wheels: ``pip download --platform macosx_11_0_arm64 --only-binary=:all: --no-deps <package>``;
* sdists (the header scans): ``pip download --no-binary=:all: --no-deps <package>==<version>``. Off
  macOS, PyObjC's setup.py refuses to prepare the metadata, so pip stops after unpacking the sdist; with
  ``--no-clean`` and a private TMPDIR the unpacked tree stays and is read from there. On a Mac pip
  finishes and the .tar.gz is unpacked instead.

Usage::

    python scripts/extract_pyobjc_selectors.py --download --pyobjc-dir /tmp/pyobjc   # fetch, then write
    python scripts/extract_pyobjc_selectors.py --pyobjc-dir /tmp/pyobjc              # reuse the files
    python scripts/extract_pyobjc_selectors.py --pyobjc-dir /tmp/pyobjc --check      # compare, don't write
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "metal"))

import objc_calls as metal_objc_calls  # noqa: E402
import pyobjc_wheels  # noqa: E402

OUTPUT = ROOT / "tests" / "metal" / "data" / "pyobjc_selectors.json"

#: framework → (PyPI package with its wheel and sdist, folder of its header scans inside the sdist).
FRAMEWORKS = {
    "Metal": ("pyobjc-framework-Metal", "metadata/raw"),
    "MetalPerformanceShaders": ("pyobjc-framework-MetalPerformanceShaders", "metadata/raw"),
    "MetalPerformanceShadersGraph": ("pyobjc-framework-MetalPerformanceShadersGraph", "metadata/raw"),
    "Foundation": ("pyobjc-framework-Cocoa", "metadata/raw.Foundation"),
}
CORE = "pyobjc-core"
WHEEL_PLATFORM = "macosx_11_0_arm64"
#: The header scan read (x86_64: the Intel Macs, whose discrete GPUs are where managed storage matters;
#: the arm64 scan is compared and must agree on every value used).
ARCHES = ("x86_64", "arm64")

#: The class(es) or protocol(s) ("<Name>") each selector is sent to, where more than one framework
#: declaration carries the selector (the scan sees the selector, not the receiver's type).
RECEIVERS = {
    "alloc": ["NSObject"], "init": ["NSObject"], "respondsToSelector:": ["NSObject"],
    "commandBuffer": ["<MTLCommandQueue>"],
    "commit": ["<MTLCommandBuffer>"], "waitUntilCompleted": ["<MTLCommandBuffer>"], "error": ["<MTLCommandBuffer>"],
    "computeCommandEncoder": ["<MTLCommandBuffer>"], "setLabel:": ["<MTLCommandBuffer>"],
    "dispatchThreadgroups:threadsPerThreadgroup:": ["<MTLComputeCommandEncoder>"],
    "setBuffer:offset:atIndex:": ["<MTLComputeCommandEncoder>"],
    "setComputePipelineState:": ["<MTLComputeCommandEncoder>"],
    "endEncoding": ["<MTLCommandEncoder>"],
    "maxTotalThreadsPerThreadgroup": ["<MTLComputePipelineState>"],
    "name": ["<MTLDevice>"], "newBufferWithLength:options:": ["<MTLDevice>"],
    "storageMode": ["<MTLResource>"],
    "encodeBatchToCommandBuffer:sourceImages:destinationImages:": ["MPSCNNKernel"],
    "setOffset:": ["MPSCNNKernel"], "setEdgeMode:": ["MPSCNNKernel"],
    "initWithDevice:weights:": ["MPSCNNConvolution", "MPSCNNConvolutionTranspose"],
    "setAccumulatorPrecisionOption:": ["MPSCNNConvolution", "MPSCNNConvolutionTranspose"],
    "setKernelOffsetX:": ["MPSCNNConvolutionTranspose"], "setKernelOffsetY:": ["MPSCNNConvolutionTranspose"],
    "setGroups:": ["MPSCNNConvolutionDescriptor"],
    "initWithDevice:imageDescriptor:": ["MPSImage"], "synchronizeOnCommandBuffer:": ["MPSImage"],
    # implemented by fastdeconv's MPSCNNConvolutionDataSource
    **{sel: ["<MPSCNNConvolutionDataSource>"] for sel in (
        "dataType", "descriptor", "weights", "biasTerms", "load", "purge", "label", "weightsLayout")},
    "copyWithZone:": ["<NSCopying>"],
}

#: Declarations no header scan of these frameworks holds: NSObject's root methods come from the
#: Objective-C runtime's <objc/NSObject.h> (macOS 10.0); MTLSizeMake is a static inline function of
#: <Metal/MTLTypes.h>, as old as Metal (macOS 10.11), which PyObjC reimplements.
MANUAL_METHODS = {
    ("NSObject", "alloc"): {"class_method": True, "retval": {"typestr": "@"}, "args": [], "introduced": "10.0"},
    ("NSObject", "init"): {"class_method": False, "retval": {"typestr": "@"}, "args": [], "introduced": "10.0"},
    ("NSObject", "respondsToSelector:"): {"class_method": False, "retval": {"typestr": "Z"},
                                          "args": [{"name": "aSelector", "typestr": ":"}], "introduced": "10.0"},
}
MANUAL_FUNCTIONS = {
    "MTLSizeMake": {"retval": {"typestr": "{MTLSize=QQQ}"},
                    "args": [{"name": n, "typestr": "Q"} for n in ("width", "height", "depth")], "introduced": "10.11"},
}
MANUAL_CLASSES = {"NSObject": "10.0"}
MANUAL_SOURCE = "manual (not in PyObjC's header scans): see MANUAL_METHODS in scripts/extract_pyobjc_selectors.py"


# --------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------


def _pip(*args, env=None):
    command = [sys.executable, "-m", "pip", "download", "--no-deps", *args]
    print("+", " ".join(command), file=sys.stderr)
    return subprocess.run(command, env=env, capture_output=True, text=True)


def download(directory: Path) -> None:
    """Fetch the macOS wheels and the sdists of FRAMEWORKS (and pyobjc-core's wheel) into ``directory``."""
    wheels, sdists, tmp = directory / "wheels", directory / "sdists", directory / "tmp"
    for folder in (wheels, sdists, tmp):
        folder.mkdir(parents=True, exist_ok=True)
    packages = [CORE] + [package for package, _ in FRAMEWORKS.values()]
    result = _pip("--platform", WHEEL_PLATFORM, "--only-binary=:all:", "-d", str(wheels), *packages)
    if result.returncode:
        raise SystemExit(f"pip could not download the wheels:\n{result.stderr}")
    for package, _ in FRAMEWORKS.values():
        version = _wheel_version(wheels, package)
        target = sdists / f"{package}-{version}"
        if target.exists():
            continue
        # On Linux pip fails after unpacking (PyObjC's setup.py needs macOS); --no-clean keeps the tree.
        env = dict(os.environ, TMPDIR=str(tmp))
        _pip("--no-binary=:all:", "--no-clean", "-d", str(sdists), f"{package}=={version}", env=env)
        archives = glob.glob(str(sdists / f"{_normal(package)}-{version}.tar.gz"))
        unpacked = glob.glob(str(tmp / "pip-download-*" / f"{_normal(package).replace('_', '-')}_*"))
        if archives:
            with tarfile.open(archives[0]) as archive:
                # the "data" filter (no absolute paths, links out of the tree) where Python has it
                archive.extractall(sdists, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            (sdists / f"{_normal(package)}-{version}").rename(target)
        elif unpacked:
            Path(unpacked[0]).rename(target)
        else:
            raise SystemExit(f"pip left no sdist of {package}=={version} in {sdists} or {tmp}")


_normal = pyobjc_wheels.normal_name


def _wheel(wheels: Path, package: str) -> Path:
    found = pyobjc_wheels.wheel_path(wheels, package)
    if found is None:
        raise SystemExit(f"no wheel of {package} in {wheels} (run with --download)")
    return found


def _wheel_version(wheels: Path, package: str) -> str:
    return _wheel(wheels, package).name.split("-")[1]


def read_header_scan(sdists: Path, framework: str, package: str, arch: str) -> tuple[dict, str]:
    """(the parsed header scan of ``arch``, its file name) from the framework's sdist."""
    tree = next((p for p in sorted(sdists.glob(f"{package}-*")) if p.is_dir()), None) or next(
        (p for p in sorted(sdists.glob(f"{_normal(package)}-*")) if p.is_dir()), None)
    if tree is None:
        raise SystemExit(f"no unpacked sdist of {package} in {sdists} (run with --download)")
    folder = tree / FRAMEWORKS[framework][1]
    scans = sorted(folder.glob(f"{arch}-*.fwinfo"), key=lambda p: _version_key(p.stem.split("-", 1)[1]))
    if not scans:
        raise SystemExit(f"no {arch} header scan in {folder}")
    text = scans[-1].read_text(encoding="utf-8")
    return json.loads(text[text.index("{"):]), f"{package} sdist {tree.name}: {scans[-1].relative_to(tree)}"


def _version_key(version: str | None):
    return tuple(int(p) for p in re.findall(r"\d+", version or "0"))


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------


class Declarations:
    """Classes, protocols and functions of the frameworks' header scans for one arch."""

    def __init__(self, scans: dict):
        self.scans = scans
        self.classes, self.protocols, self.functions = {}, {}, {}
        for framework, scan in scans.items():
            defs = scan["definitions"]
            for name, cls in defs["classes"].items():
                self.classes.setdefault(name, (framework, cls))
            for name, proto in defs["formal_protocols"].items():
                self.protocols.setdefault(name, (framework, proto))
            for name, function in defs["functions"].items():
                self.functions.setdefault(name, (framework, function))

    def owners(self, selector: str) -> list[str]:
        found = [name for name, (_, cls) in self.classes.items()
                 if any(m["selector"] == selector for m in cls["methods"])]
        found += [f"<{name}>" for name, (_, p) in self.protocols.items()
                  if any(m["selector"] == selector for m in p["methods"])]
        return sorted(found)

    def method(self, owner: str, selector: str):
        """(framework, method dict, the class whose declaration was found) or None; walks superclasses."""
        if owner.startswith("<"):
            framework, proto = self.protocols.get(owner[1:-1], (None, None))
            method = next((m for m in (proto or {}).get("methods", []) if m["selector"] == selector), None)
            return None if method is None else (framework, method, owner)
        while owner in self.classes:
            framework, cls = self.classes[owner]
            method = next((m for m in cls["methods"] if m["selector"] == selector), None)
            if method is not None:
                return framework, method, owner
            owner = cls.get("super")
        return None

    def superclasses(self, name: str) -> list[str]:
        chain = []
        while name in self.classes:
            chain.append(name)
            name = self.classes[name][1].get("super")
        return chain + ["NSObject"] if chain and chain[-1] != "NSObject" else chain or [name]

    def class_introduced(self, name: str):
        """The earliest ``introduced`` among the class's own methods (PyObjC's scan records none per class)."""
        versions = [m.get("introduced") for m in self.classes[name][1]["methods"] if m.get("introduced")]
        return min(versions, key=_version_key) if versions else None


def _signature(method) -> str:
    return method["retval"]["typestr"] + "@:" + "".join(a["typestr"] for a in method["args"])


def _args(method):
    return [{"name": a.get("name"), "typestr": a["typestr"], **({"null_accepted": a["null_accepted"]}
                                                               if "null_accepted" in a else {})}
            for a in method["args"]]


def _registered(metadata: dict, decl: Declarations, owner: str, selector: str):
    """The registration PyObjC finds for ``selector`` sent to ``owner`` (PyObjC_FindInRegistry: the most
    specific registered superclass; protocol methods are registered on NSObject). Of several frameworks'
    registrations of one (class, selector) the last imported wins (registry.m, PyObjC_AddToRegistry:
    "if so replace that registration"): ``metadata`` is in import order (pyobjc_wheels.METADATA_ORDER)."""
    chain = ["NSObject"] if owner.startswith("<") else decl.superclasses(owner)
    for cls in chain:
        found = [framework_metadata[(cls, selector)] for framework_metadata in metadata.values()
                 if (cls, selector) in framework_metadata]
        if found:
            return {"registered_on": cls, **found[-1]}
    return None


def build_table(uses, metadata: dict, decls: dict, sources: dict, versions: dict) -> dict:
    main, other = decls[ARCHES[0]], decls[ARCHES[1]]
    selectors, functions, classes, protocols, problems = {}, {}, {}, {}, []
    for use in uses:
        name = use.selector
        if use.kind in ("call", "responds", "implemented") and name not in selectors:
            receivers = RECEIVERS.get(name) or main.owners(name)
            if len(receivers) != 1 and name not in RECEIVERS:
                problems.append(f"{name}: declared by {receivers or 'nothing'}; add the receiver to RECEIVERS "
                                f"(used at {use.where()})")
                continue
            entries = []
            for owner in receivers:
                if (owner, name) in MANUAL_METHODS:
                    entries.append(("objc", dict(MANUAL_METHODS[(owner, name)], selector=name), owner, MANUAL_SOURCE))
                    continue
                found, twin = main.method(owner, name), other.method(owner, name)
                if found is None:
                    problems.append(f"{name}: not declared by {owner} in the header scans (used at {use.where()})")
                    continue
                if twin is None or twin[1].get("introduced") != found[1].get("introduced") or \
                        _signature(twin[1]) != _signature(found[1]):
                    problems.append(f"{name} on {owner}: the {ARCHES[0]} and {ARCHES[1]} scans disagree")
                entries.append((found[0], found[1], found[2], sources[found[0]]))
            if not entries:
                continue
            signatures = {_signature(m) for _, m, _, _ in entries}
            if len(signatures) != 1:
                problems.append(f"{name}: the receivers {receivers} declare different signatures {signatures}")
            introduced = [m.get("introduced") for _, m, _, _ in entries]
            framework, method, owner, source = entries[0]
            selectors[name] = {
                "arguments": name.count(":"),
                "receivers": [{"declared_by": o, "framework": f, "introduced": m.get("introduced"),
                               "class_method": bool(m.get("class_method"))} for f, m, o, _ in entries],
                "signature": _signature(method),
                "retval": {"typestr": method["retval"]["typestr"]},
                "args": _args(method),
                "pyobjc_metadata": _registered(metadata, main, receivers[0], name),
                "introduced": None if None in introduced else max(introduced, key=_version_key),
                "source": sorted({s for _, _, _, s in entries}),
            }
            if receivers[0].startswith("<"):
                selectors[name]["required"] = bool(method.get("required"))
        elif use.kind == "function" and name not in functions:
            found = main.functions.get(name)
            if name in MANUAL_FUNCTIONS:
                framework, function, source = "Metal", MANUAL_FUNCTIONS[name], MANUAL_SOURCE
            elif found is None:
                problems.append(f"function {name}: not in the header scans (used at {use.where()})")
                continue
            else:
                (framework, function), source = found, sources[found[0]]
            params = [a for a in function["args"] if a["typestr"] != "v"]      # C's f(void): no parameter
            functions[name] = {"framework": framework, "arguments": len(params),
                               "signature": function["retval"]["typestr"] + "".join(a["typestr"] for a in params),
                               "introduced": function.get("introduced"), "source": [source]}
        elif use.kind == "class" and name not in classes:
            if name in MANUAL_CLASSES:
                classes[name] = {"framework": "objc", "introduced": MANUAL_CLASSES[name], "super": None,
                                 "introduced_from": MANUAL_SOURCE}
            elif name not in main.classes:
                problems.append(f"class {name}: not in the header scans (used at {use.where()})")
            else:
                classes[name] = {"framework": main.classes[name][0], "super": main.classes[name][1].get("super"),
                                 "introduced": main.class_introduced(name),
                                 "introduced_from": "the earliest 'introduced' among the class's methods "
                                                   "(the header scans record none per class)"}
        elif use.kind == "protocol" and name not in protocols:
            if name not in main.protocols:
                problems.append(f"protocol {name}: not in the header scans (used at {use.where()})")
                continue
            framework, proto = main.protocols[name]
            protocols[name] = {"framework": framework, "implements": proto.get("implements", []),
                               "required": sorted(m["selector"] for m in proto["methods"] if m.get("required")),
                               "optional": sorted(m["selector"] for m in proto["methods"] if not m.get("required")),
                               # what the runtime's protocol_copyMethodDescriptionList lists (tests/metal/
                               # pyobjc_runtime.py builds objc.protocolNamed's answer from it); BOOL is "Z"
                               "methods": [{"selector": m["selector"], "class_method": bool(m.get("class_method")),
                                            "required": bool(m.get("required")), "retval": m["retval"]["typestr"],
                                            "args": [a["typestr"] for a in m["args"]]} for m in proto["methods"]]}
    if problems:
        raise SystemExit("cannot build the table:\n  " + "\n  ".join(problems))
    return {
        "about": "What PyObjC's metadata says about every Objective-C name fastdeconv/metal/ uses. Written by "
                 "scripts/extract_pyobjc_selectors.py; checked against the source by "
                 "tests/metal/test_metal_selectors.py.",
        "pyobjc": versions,
        "header_scans": {fw: src for fw, src in sorted(sources.items())},
        "selectors": dict(sorted(selectors.items())),
        "functions": dict(sorted(functions.items())),
        "classes": dict(sorted(classes.items())),
        "protocols": dict(sorted(protocols.items())),
        "enums": {},
    }


#: Apple constants whose values the layer hard-codes (fastdeconv/metal/descriptors.py, pyobjc_layer.py):
#: recorded from the wheels' _metadata.py ``enums`` strings; tests/metal/test_metal_selectors.py compares them.
ENUMS = ("MTLResourceStorageModeShared", "MTLStorageModeManaged", "MPSDataTypeFloat32", "MPSDataTypeFloat16",
         "MPSGraphTensorNamedDataLayoutNHWC", "MPSGraphTensorNamedDataLayoutOIHW", "MPSGraphPaddingStyleExplicit",
         "MPSGraphPaddingModeConstant", "MPSImageFeatureChannelFormatFloat16", "MPSImageFeatureChannelFormatFloat32",
         "MPSDataLayoutHeightxWidthxFeatureChannels", "MPSImageEdgeModeZero", "MPSImageEdgeModeClamp",
         "MPSNNConvolutionAccumulatorPrecisionOptionFloat", "MPSCNNConvolutionWeightsLayoutOHWI")


def read_enums(wheels: Path) -> dict:
    values = {}
    for framework, (package, _) in FRAMEWORKS.items():
        with zipfile.ZipFile(_wheel(wheels, package)) as wheel:
            source = wheel.read(f"{framework}/_metadata.py").decode("utf-8")
        match = re.search(r'^enums = """(.*?)"""', source, re.M | re.S)
        for item in (match.group(1).strip("$").split("$") if match else []):
            name, _, value = item.partition("@")
            if name in ENUMS:
                values[name] = int(value)
    missing = set(ENUMS) - set(values)
    if missing:
        raise SystemExit(f"enums not found in the wheels' metadata: {sorted(missing)}")
    return dict(sorted(values.items()))


def _comparable(table: dict) -> dict:
    """The table without what names the PyObjC release read (versions, file names)."""
    def strip(entry):
        return {k: v for k, v in entry.items() if k not in ("source",)} if isinstance(entry, dict) else entry

    return {section: {name: strip(entry) for name, entry in table.get(section, {}).items()}
            for section in ("selectors", "functions", "classes", "protocols", "enums")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pyobjc-dir", type=Path, default=Path("/tmp/fastdeconv-pyobjc"),
                        help="where the wheels/ and sdists/ are (or go, with --download)")
    parser.add_argument("--download", action="store_true", help="fetch the wheels and sdists with pip first")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true", help="compare with --output instead of writing it")
    args = parser.parse_args(argv)
    if args.download:
        download(args.pyobjc_dir)
    wheels, sdists = args.pyobjc_dir / "wheels", args.pyobjc_dir / "sdists"
    metadata = pyobjc_wheels.read_metadata(wheels)
    decls, sources = {}, {}
    for arch in ARCHES:
        scans = {}
        for fw, (package, _) in FRAMEWORKS.items():
            scans[fw], source = read_header_scan(sdists, fw, package, arch)
            if arch == ARCHES[0]:
                sources[fw] = source
        decls[arch] = Declarations(scans)
    versions = {package: _wheel(wheels, package).name for package in [CORE] + [p for p, _ in FRAMEWORKS.values()]}
    uses = metal_objc_calls.scan(metal_objc_calls.metal_sources(ROOT / "fastdeconv" / "metal"))
    table = build_table(uses, metadata, decls, sources, versions)
    table["enums"] = read_enums(wheels)
    text = json.dumps(table, indent=1, sort_keys=False) + "\n"
    if args.check:
        current = json.loads(args.output.read_text(encoding="utf-8")) if args.output.exists() else {}
        if _comparable(current) != _comparable(table):
            old, new = _comparable(current), _comparable(table)
            for section in sorted(set(old) | set(new)):
                for name in sorted(set(old.get(section, {})) | set(new.get(section, {}))):
                    if old.get(section, {}).get(name) != new.get(section, {}).get(name):
                        print(f"{section}[{name!r}]:\n  committed: {old.get(section, {}).get(name)}\n"
                              f"  now:       {new.get(section, {}).get(name)}", file=sys.stderr)
            print(f"{args.output} differs from PyObjC {versions}: run scripts/extract_pyobjc_selectors.py",
                  file=sys.stderr)
            return 1
        print(f"{args.output} agrees with PyObjC {sorted(versions.values())} ({len(table['selectors'])} selectors)")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}: {len(table['selectors'])} selectors, {len(table['functions'])} functions, "
          f"{len(table['classes'])} classes, {len(table['protocols'])} protocols, {len(table['enums'])} enums")
    return 0


if __name__ == "__main__":
    sys.exit(main())

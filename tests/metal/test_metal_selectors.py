"""The static check of fastdeconv/metal/'s Objective-C: every selector it calls or implements, every
framework function, class and protocol it names, against PyObjC's own metadata (any platform, no PyObjC).

The table tests/data/pyobjc_selectors.json is written by scripts/extract_pyobjc_selectors.py from the
macOS wheels' ``_metadata.py`` and the sdists' header scans of pyobjc-framework-Metal,
-MetalPerformanceShaders, -MetalPerformanceShadersGraph and -Cocoa (Foundation). The source is
re-scanned here (tests/metal_objc_calls.py), so a misspelled selector, a wrong number of arguments,
or a selector newer than its backend's gate (fastdeconv.metal._MIN_MACOS) fails on Linux.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastdeconv import metal
from fastdeconv.metal import descriptors, pyobjc_layer
import pyobjc_wheels
from objc_calls import OBJC_MODULES, SCOPE_PATHS, framework_imports, metal_sources, scan

TABLE = json.loads((Path(__file__).parent / "data" / "pyobjc_selectors.json").read_text(encoding="utf-8"))


def _version(text: str) -> tuple[int, ...]:
    parts = tuple(int(p) for p in text.split("."))
    return parts + (0,) * (3 - len(parts))


def problems(sources: dict[str, str], table: dict, gates: dict) -> list[str]:
    """Every way the Objective-C uses in ``sources`` disagree with ``table`` and the backends' ``gates``."""
    found = []
    for use in scan(sources):
        where = use.where()
        if use.kind in ("call", "responds", "implemented"):
            entry = table["selectors"].get(use.selector)
            if entry is None:
                found.append(f"{where}: selector {use.selector!r} is not in PyObjC's metadata table (misspelled? a new "
                             f"call: run scripts/extract_pyobjc_selectors.py)")
                continue
            if use.keywords:
                found.append(f"{where}: keyword arguments to an Objective-C selector")
            if use.arguments != entry["arguments"]:
                found.append(f"{where}: {use.selector!r} takes {entry['arguments']} argument(s), "
                             f"{'defined with' if use.kind == 'implemented' else 'called with'} {use.arguments}")
            if use.kind == "implemented" and not all(r["declared_by"].startswith("<") for r in entry["receivers"]):
                found.append(f"{where}: implements {use.selector!r}, which no protocol declares")
        elif use.kind == "function":
            entry = table["functions"].get(use.selector)
            if entry is None:
                found.append(f"{where}: function {use.selector!r} is not in the table")
                continue
            if use.arguments != entry["arguments"]:
                found.append(f"{where}: {use.selector}() takes {entry['arguments']} argument(s), called with "
                             f"{use.arguments}")
        else:
            entry = table["classes" if use.kind == "class" else "protocols"].get(use.selector)
            if entry is None:
                found.append(f"{where}: {use.kind} {use.selector!r} is not in the table")
                continue
        # Availability: what runs on a backend must exist on its oldest macOS. Implemented methods are
        # called by MPS only where MPS knows them; a guarded call runs only where the selector exists.
        if use.kind in ("implemented", "responds", "protocol") or use.guarded:
            continue
        paths = SCOPE_PATHS.get((use.module, use.scope))
        if paths is None:
            found.append(f"{where}: the scope {use.scope!r} is not in SCOPE_PATHS (tests/metal_objc_calls.py): "
                         "say which backend runs it")
            continue
        if entry.get("introduced") is None:
            found.append(f"{where}: {use.selector!r} has no known macOS version")
            continue
        for path in paths:
            if _version(entry["introduced"]) > tuple(gates[path]) + (0,) * (3 - len(gates[path])):
                found.append(f"{where}: {use.selector!r} is macOS {entry['introduced']}+, but backend {path!r} "
                             f"is gated at macOS {'.'.join(map(str, gates[path]))}")
    return found


SOURCES = metal_sources()
USES = scan(SOURCES)


def test_every_objc_use_matches_pyobjc_metadata():
    assert USES, "the scan found no Objective-C in fastdeconv/metal/"
    found = problems(SOURCES, TABLE, metal._MIN_MACOS)
    assert not found, "\n".join(found)


def test_the_table_lists_only_what_is_used():
    """A selector dropped from the code is dropped from the table (re-run the script)."""
    used = {u.selector for u in USES}
    for section in ("selectors", "functions", "classes", "protocols"):
        stale = set(TABLE[section]) - used
        assert not stale, f"{section} in the table but not in fastdeconv/metal/: {sorted(stale)}"


def test_the_table_covers_the_layer():
    kinds = {u.kind for u in USES}
    assert kinds == {"call", "responds", "implemented", "function", "class", "protocol"}, kinds
    # spot checks that the scan sees what matters (zero-argument selectors included)
    selectors = {u.selector for u in USES if u.kind == "call"}
    assert {"commit", "waitUntilCompleted", "synchronizeOnCommandBuffer:", "castTensor:toType:name:",
            "encodeBatchToCommandBuffer:sourceImages:destinationImages:", "initWithDevice:weights:"} <= selectors


def test_data_source_implements_every_required_method():
    implemented = {u.selector for u in USES if u.kind == "implemented"}
    (protocol,) = {u.selector for u in USES if u.kind == "protocol"}
    missing = set(TABLE["protocols"][protocol]["required"]) - implemented
    assert not missing, f"the {protocol} data source lacks required methods {sorted(missing)}"


def test_only_the_pyobjc_modules_touch_objective_c():
    """The static check reads zero-argument selectors only in OBJC_MODULES; other modules may not call a
    selector or import a framework."""
    assert {module for module, _, _ in framework_imports(SOURCES)} <= {"pyobjc_layer.py"}
    outside = [u.where() for u in USES if u.module not in OBJC_MODULES and u.kind != "class"]
    assert not outside, outside


@pytest.mark.parametrize("path", ["mps", "mps-cnn"])
def test_gate_is_the_newest_selector_of_the_backend(path):
    """Each gate is exactly the newest macOS version among the unguarded selectors its backend uses (not
    higher either: the gate never refuses a macOS that has every selector)."""
    newest = max(_version(TABLE[section][u.selector]["introduced"])
                 for u in USES if not u.guarded and path in SCOPE_PATHS.get((u.module, u.scope), ())
                 for section in [{"call": "selectors", "function": "functions", "class": "classes"}.get(u.kind)]
                 if section)
    assert _version(".".join(map(str, metal._MIN_MACOS[path]))) == newest


def test_status_reason_names_the_selector_of_the_gate():
    for path, selector in metal._GATE_SELECTOR.items():
        gate = ".".join(map(str, metal._MIN_MACOS[path]))
        assert _version(TABLE["selectors"][selector]["introduced"]) == _version(gate)


def test_the_table_is_what_the_wheels_register():
    """Every ``pyobjc_metadata`` of the committed table is the registration PyObjC's wheels make for that
    (class, selector), the last in import order winning (PyObjC replaces a registration of the same key),
    and the protocol table lists the same selectors as its methods."""
    folder = pyobjc_wheels.wheels_folder()
    final = {}
    for registrations in pyobjc_wheels.read_metadata(folder).values():      # import order
        final.update(registrations)
    differ = []
    for selector, entry in TABLE["selectors"].items():
        recorded = entry["pyobjc_metadata"]
        if recorded is None:
            continue
        registered = final.get((recorded["registered_on"], selector))
        if registered != {k: v for k, v in recorded.items() if k != "registered_on"}:
            differ.append(f"{selector} on {recorded['registered_on']}: table {recorded}, wheels {registered}")
    assert not differ, "run scripts/extract_pyobjc_selectors.py:\n" + "\n".join(differ)
    for name, protocol in TABLE["protocols"].items():
        assert sorted(m["selector"] for m in protocol["methods"]) == sorted(protocol["required"] + protocol["optional"])


def test_enum_values_match_pyobjc():
    enums = TABLE["enums"]
    assert descriptors.MPS_DATA_TYPE[np.dtype(np.float32)] == enums["MPSDataTypeFloat32"]
    assert descriptors.MPS_DATA_TYPE[np.dtype(np.float16)] == enums["MPSDataTypeFloat16"]
    assert descriptors.IMAGE_FORMAT[np.dtype(np.float32)] == enums["MPSImageFeatureChannelFormatFloat32"]
    assert descriptors.IMAGE_FORMAT[np.dtype(np.float16)] == enums["MPSImageFeatureChannelFormatFloat16"]
    assert descriptors.GRAPH_LAYOUT_NHWC == enums["MPSGraphTensorNamedDataLayoutNHWC"]
    assert descriptors.GRAPH_LAYOUT_OIHW == enums["MPSGraphTensorNamedDataLayoutOIHW"]
    assert descriptors.GRAPH_PADDING_STYLE_EXPLICIT == enums["MPSGraphPaddingStyleExplicit"]
    assert descriptors.GRAPH_PADDING_MODE_CONSTANT == enums["MPSGraphPaddingModeConstant"]
    assert descriptors.IMAGE_LAYOUT_HWC == enums["MPSDataLayoutHeightxWidthxFeatureChannels"]
    assert descriptors.EDGE_MODES == {"zero": enums["MPSImageEdgeModeZero"], "clamp": enums["MPSImageEdgeModeClamp"]}
    assert descriptors.ACCUMULATOR_FLOAT == enums["MPSNNConvolutionAccumulatorPrecisionOptionFloat"]
    assert descriptors.CNN_WEIGHTS_OHWI == enums["MPSCNNConvolutionWeightsLayoutOHWI"]
    assert pyobjc_layer.STORAGE_MODE_SHARED == enums["MTLResourceStorageModeShared"]
    assert pyobjc_layer.MTL_STORAGE_MODE_MANAGED == enums["MTLStorageModeManaged"]


# --------------------------------------------------------------------------------------------------
# The check can fail: mutated copies of the source
# --------------------------------------------------------------------------------------------------


def _mutated(old: str, new: str, module: str = "pyobjc_layer.py") -> dict[str, str]:
    assert SOURCES[module].count(old) >= 1, old
    return dict(SOURCES, **{module: SOURCES[module].replace(old, new, 1)})


@pytest.mark.parametrize("old, new, expected", [
    # a misspelled selector with arguments, and one without (a zero-argument selector)
    ("image.synchronizeOnCommandBuffer_(command_buffer)", "image.synchronizeOnComandBuffer_(command_buffer)",
     "'synchronizeOnComandBuffer:' is not in PyObjC's metadata table"),
    ("command_buffer.commit()", "command_buffer.comit()", "'comit' is not in PyObjC's metadata table"),
    # an argument too few
    ("kernel.setOffset_((stage.offset_x, stage.offset_y, 0))", "kernel.setOffset_()",
     "'setOffset:' takes 1 argument(s), called with 0"),
    # a Python-style trailing underscore lost: selector spelled without its last colon
    ("encodeBatchToCommandBuffer_sourceImages_destinationImages_(",
     "encodeBatchToCommandBuffer_sourceImages_destinationImages(",
     "'encodeBatchToCommandBuffer:sourceImages:destinationImages' is not in PyObjC's metadata table"),
    # a data-source method misspelled (MPS would never call it)
    ("def biasTerms(self):", "def biasTerm(self):", "'biasTerm' is not in PyObjC's metadata table"),
])
def test_check_fails_on_a_bad_call(old, new, expected):
    found = problems(_mutated(old, new), TABLE, metal._MIN_MACOS)
    assert any(expected in p for p in found), found


def test_a_guarded_call_is_exempt_from_the_gate():
    """setAccumulatorPrecisionOption: (10.13.4) runs only under respondsToSelector_: under a 10.13 gate
    it passes guarded and fails once moved out of its guard."""
    gates = dict(metal._MIN_MACOS, **{"mps-cnn": (10, 13)})
    selector = "'setAccumulatorPrecisionOption:' is macOS 10.13.4+"
    assert not any(selector in p for p in problems(SOURCES, TABLE, gates))
    unguarded = _mutated("        if kernel.respondsToSelector_(\"setAccumulatorPrecisionOption:\"):\n"
                         "            kernel.setAccumulatorPrecisionOption_(stage.accumulator_precision)",
                         "        kernel.setAccumulatorPrecisionOption_(stage.accumulator_precision)")
    assert any(selector in p for p in problems(unguarded, TABLE, gates))


def test_check_fails_when_a_gate_is_too_low():
    found = problems(SOURCES, TABLE, dict(metal._MIN_MACOS, **{"mps": (11, 0), "mps-cnn": (10, 13)}))
    assert any("'castTensor:toType:name:' is macOS 12.0+, but backend 'mps' is gated at macOS 11.0" in p for p in found)
    assert any("'encodeBatchToCommandBuffer:sourceImages:destinationImages:' is macOS 10.13.4+, but backend "
               "'mps-cnn' is gated at macOS 10.13" in p for p in found)
    assert any("'synchronizeOnCommandBuffer:' is macOS 10.13.4+" in p for p in found)


def test_check_fails_on_an_unmapped_scope():
    source = SOURCES["pyobjc_layer.py"] + "\n\ndef new_helper(queue):\n    return queue.commandBuffer()\n"
    found = problems(dict(SOURCES, **{"pyobjc_layer.py": source}), TABLE, metal._MIN_MACOS)
    assert any("the scope 'new_helper' is not in SCOPE_PATHS" in p for p in found), found

"""Import paths users and earlier releases rely on keep working after the package's layout changed."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import fastdeconv

PATHS = {
    "fastdeconv": ["conv_transpose2d", "conv2d", "ConvTranspose2d", "Conv2d", "set_weight_cache_size",
                   "clear_weight_cache", "backends", "conv_transpose2d_output_shape", "conv2d_output_shape",
                   "show_config", "set_num_threads", "get_num_threads", "reference", "__version__"],
    "fastdeconv.reference": ["conv_transpose2d", "conv2d", "conv_transpose2d_geometry", "conv2d_geometry"],
    "fastdeconv.weights": ["fold_batchnorm", "load_mps", "save_mps", "from_torch", "to_torch", "from_tf"],
    "fastdeconv.mpscnn_model": ["convolution_transpose", "convolution"],
    "fastdeconv.metal": ["status", "mps_min_flops", "set_mps_min_flops", "DEFAULT_MPS_MIN_FLOPS"],
    "fastdeconv.metal.backend": ["simulated", "MetalBackend", "MPS", "MPS_CNN", "MetalLayer", "engine",
                                 "graph_runner", "GRAPH_CACHE_SIZE"],
    "fastdeconv.metal.descriptors": [], "fastdeconv.metal.executors": [], "fastdeconv.metal.pyobjc_layer": [],
    "fastdeconv.convert": ["main", "convert", "verify_directory", "Conversion", "ConversionError",
                           "StrictModeError", "LayerResult", "NetworkCheck", "DEFAULT_MODEL", "INSTALL_HINT",
                           "EXIT_CODES", "RELATIVE_TOLERANCE", "VERIFY_OPSET", "NETWORK_SEED", "format_table",
                           "OnnxGraph", "Chain", "ACTIVATIONS", "CONV_OPS", "verify_network", "layer_runner",
                           "max_error", "reference_ops", "tolerance_for"],
    "fastdeconv.bench": ["CASES", "SUITE", "CONV_SUITE", "SUITES", "Case", "run_bench", "measure_case",
                         "median_seconds", "PEERS", "PeerSpec", "Peers", "Peak", "format_table",
                         "sgemm_gflops", "PEAK_SPREAD_TOLERANCE", "ORT_OPSET", "COLUMNS_HELP", "suite_cases",
                         "field_suite", "field_summary", "FAMILIES"],
    "fastdeconv.__main__": ["main", "build_parser"],
}


@pytest.mark.parametrize("module", sorted(PATHS))
def test_public_path_imports_with_its_names(module):
    loaded = importlib.import_module(module)
    missing = [name for name in PATHS[module] if not hasattr(loaded, name)]
    assert not missing, f"{module} lacks {missing}"


def test_the_compatibility_paths_are_the_same_objects():
    from fastdeconv.metal import backend, engine, mpscnn_model

    assert fastdeconv.mpscnn_model is mpscnn_model
    assert backend.simulated is engine.simulated


def test_numpy_integers_are_integers_for_the_settings():
    previous = fastdeconv.set_weight_cache_size(np.int64(1 << 20))
    try:
        fastdeconv.set_num_threads(np.int32(1))
        assert fastdeconv.get_num_threads() == 1
        assert fastdeconv.set_weight_cache_size(previous) == 1 << 20
    finally:
        fastdeconv.set_weight_cache_size(previous)
    for call in (fastdeconv.set_num_threads, fastdeconv.set_weight_cache_size):
        with pytest.raises((TypeError, ValueError)):
            call(np.bool_(True))


def test_an_array_as_algorithm_is_named_in_the_error():
    x, w = np.ones((1, 3, 3, 2), np.float32), np.ones((2, 3, 3, 2), np.float32)
    with pytest.raises(ValueError, match="algorithm must be None or one of"):
        fastdeconv.conv_transpose2d(x, w, algorithm=np.array(["phase"]))

"""The benchmark tools on top of the library (nothing in the library imports them): the suites of
real-network shapes and ``fastdeconv bench`` (:mod:`.suites`), latency beside busy processes
(:mod:`.contention`, ``bench --contention``), the field suite drawn from real networks (:mod:`.field`,
``bench --suite field``) and ``fastdeconv dask-demo`` (:mod:`.dask_demo`)."""

from .suites import (
    CASES,
    COLUMNS_HELP,
    CONV_SUITE,
    ORT_OPSET,
    PEAK_SPREAD_TOLERANCE,
    PEERS,
    SUITE,
    SUITES,
    Case,
    field_summary,
    Peak,
    Peers,
    PeerSpec,
    format_table,
    measure_case,
    measure_peak,
    median_seconds,
    run_bench,
    sgemm_gflops,
    sgemm_peak,
    suite_cases,
)
from .field import FAMILIES, field_suite

__all__ = ["CASES", "COLUMNS_HELP", "CONV_SUITE", "ORT_OPSET", "PEAK_SPREAD_TOLERANCE", "PEERS", "SUITE", "SUITES", "Case", "Peak", "Peers",
           "PeerSpec", "format_table", "measure_case", "measure_peak", "median_seconds", "run_bench",
           "sgemm_gflops", "sgemm_peak", "suite_cases", "field_suite", "field_summary", "FAMILIES"]

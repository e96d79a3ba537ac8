"""asv benchmarks: the fastdeconv.bench suite (real-network shapes), float32.

From the repository root, after ``pip install -e ".[bench]"``: ``asv machine --yes`` once (asv refuses to
run before it has recorded the machine), then ``asv run --python=same --quick`` (the installed fastdeconv)
or ``asv run --quick`` (each commit built in its own virtualenv, see asv.conf.json).
"""

import numpy as np

import fastdeconv
from fastdeconv.bench import CONV_SUITE, SUITE
from fastdeconv.bench.suites import suite_cases

CASE_NAMES = [case.name for case in SUITE]
_CASES = {case.name: case for case in SUITE}
_CONV_CASES = {case.name: case for case in CONV_SUITE}
_LARGE_CASES = {case.name: case for case in suite_cases("large")}


class ConvTranspose2dSuite:
    """The function API, as a user calls it (weights packed on the first call of each content), and the
    ConvTranspose2d layer."""

    params = [CASE_NAMES, [1, 2]]
    param_names = ["case", "threads"]
    timeout = 120

    def setup(self, name, threads):
        fastdeconv.set_num_threads(threads)
        self.case = _CASES[name]
        self.x, self.w, self.b = self.case.arrays()
        self.out = fastdeconv.conv_transpose2d(self.x, self.w, self.b, **self.case.kwargs)
        self.layer = fastdeconv.ConvTranspose2d(self.w, self.b, **self.case.kwargs)

    def teardown(self, name, threads):
        fastdeconv.set_num_threads(0)

    def time_conv_transpose2d(self, name, threads):
        fastdeconv.conv_transpose2d(self.x, self.w, self.b, **self.case.kwargs, out=self.out)

    def time_plan(self, name, threads):
        self.layer(self.x, out=self.out)

    def peakmem_conv_transpose2d(self, name, threads):
        fastdeconv.conv_transpose2d(self.x, self.w, self.b, **self.case.kwargs)


class AlgorithmSuite:
    """Every CPU algorithm (and GEMM ISA path) on the cases it can run, through the plan object."""

    params = [["dcgan2", "dcgan4", "unet1", "fcn_bilinear", "stride1", "dilated", "grouped"],
              ["phase", "col2im", "winograd", "depthwise"], ["avx512", "avx2", "portable"]]
    param_names = ["case", "algorithm", "isa"]
    timeout = 120

    def setup(self, name, algorithm, isa):
        from fastdeconv import _cpu

        case = _CASES[name]
        if algorithm == "depthwise" and case.groups != case.input_shape[3]:
            raise NotImplementedError("depthwise needs groups == C_in")
        if algorithm == "winograd" and (case.dilation != 1 or case.groups == case.input_shape[3]):
            raise NotImplementedError("winograd needs dilation 1 (and is not for depthwise layers)")
        if not _cpu.build_info()["gemm_isa_supported"][isa]:
            raise NotImplementedError(f"{isa} is not supported here")
        self.previous_isa = _cpu.get_gemm_isa()
        _cpu.set_gemm_isa(isa)
        self.x, w, b = case.arrays()
        self.layer = fastdeconv.ConvTranspose2d(w, b, **case.kwargs, algorithm=algorithm)
        self.out = self.layer(self.x)

    def teardown(self, name, algorithm, isa):
        from fastdeconv import _cpu

        if hasattr(self, "previous_isa"):   # teardown also runs after a skipped setup
            _cpu.set_gemm_isa(self.previous_isa)

    def time_plan(self, name, algorithm, isa):
        self.layer(self.x, out=self.out)


class Conv2dSuite:
    """The convolution suite (fastdeconv.bench.CONV_SUITE): the function and the Conv2d layer."""

    params = [[case.name for case in CONV_SUITE], [1, 2]]
    param_names = ["case", "threads"]
    timeout = 120

    def setup(self, name, threads):
        fastdeconv.set_num_threads(threads)
        self.case = _CONV_CASES[name]
        self.x, self.w, self.b = self.case.arrays()
        self.layer = fastdeconv.Conv2d(self.w, self.b, **self.case.kwargs)
        self.out = self.layer(self.x)

    def teardown(self, name, threads):
        fastdeconv.set_num_threads(0)

    def time_conv2d(self, name, threads):
        fastdeconv.conv2d(self.x, self.w, self.b, **self.case.kwargs, out=self.out)

    def time_plan(self, name, threads):
        self.layer(self.x, out=self.out)

    def peakmem_conv2d(self, name, threads):
        fastdeconv.conv2d(self.x, self.w, self.b, **self.case.kwargs)


class LargeLayerSuite:
    """The large suite (``bench --suite large``: real layers of 10-136 GFLOP, where calls are cut into tasks
    for Ctrl-C), through the layer object; a few samples of one call each."""

    params = [[case.name for case in _LARGE_CASES.values()], [1, 2]]
    param_names = ["case", "threads"]
    timeout = 600
    number = 1
    repeat = (1, 3, 60.0)
    warmup_time = 0

    def setup(self, name, threads):
        fastdeconv.set_num_threads(threads)
        case = _LARGE_CASES[name]
        self.x, w, b = case.arrays()
        self.layer = case.functions()[1](w, b, **case.kwargs)
        self.out = self.layer(self.x)

    def teardown(self, name, threads):
        fastdeconv.set_num_threads(0)

    def time_plan(self, name, threads):
        self.layer(self.x, out=self.out)


class Float64Suite:
    params = [["dcgan3", "stride1"]]
    param_names = ["case"]

    def setup(self, name):
        self.case = _CASES[name]
        self.x, self.w, self.b = self.case.arrays(np.float64)

    def time_conv_transpose2d_float64(self, name):
        fastdeconv.conv_transpose2d(self.x, self.w, self.b, **self.case.kwargs)


class WinogradStoresSuite:
    """Winograd's output stores (by default non-temporal on Intel with AVX-512, and elsewhere with
    AVX-512 for outputs of a third of the last-level cache or more; src/kernels/winograd_tiles.h),
    forced on and off: the layer alone, and followed by a 3x3 convolution that reads its output (a
    non-temporal store leaves the output out of cache, and the next layer pays for that)."""

    params = [["grouped", "big", "dcgan3"], [True, False], [1, 2]]
    param_names = ["case", "stream", "threads"]
    timeout = 120

    def setup(self, name, stream, threads):
        from fastdeconv import _cpu

        if not _cpu.build_info()["gemm_isa_supported"]["avx512"]:
            raise NotImplementedError("only the AVX-512 path has non-temporal stores")
        _cpu.set_winograd_stream_output(stream)
        fastdeconv.set_num_threads(threads)
        case = _CASES[name]
        self.x, w, b = case.arrays()
        self.layer = fastdeconv.ConvTranspose2d(w, b, **case.kwargs, algorithm="winograd")
        self.y = self.layer(self.x)
        channels, groups = case.out_channels, case.groups
        weight = np.random.default_rng(0).standard_normal((channels, 3, 3, channels // groups), np.float32)
        self.next_layer = fastdeconv.Conv2d(weight * 0.05, None, padding=1, groups=groups)
        self.z = self.next_layer(self.y)

    def teardown(self, name, stream, threads):
        from fastdeconv import _cpu

        _cpu.set_winograd_stream_output(None)
        fastdeconv.set_num_threads(0)

    def time_layer(self, name, stream, threads):
        self.layer(self.x, out=self.y)

    def time_layer_then_convolution(self, name, stream, threads):
        self.next_layer(self.layer(self.x, out=self.y), out=self.z)

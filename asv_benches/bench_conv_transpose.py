"""asv benchmarks: the fastdeconv.bench suite (real-network shapes), float32.

Run with ``asv run --python=same --quick`` from the repository root.
"""

import numpy as np

import fastdeconv
from fastdeconv.bench import SUITE

CASE_NAMES = [case.name for case in SUITE]
_CASES = {case.name: case for case in SUITE}


class ConvTranspose2dSuite:
    """The function API, as a user calls it (weights packed on every call)."""

    params = [CASE_NAMES, [1, 2]]
    param_names = ["case", "threads"]
    timeout = 120

    def setup(self, name, threads):
        fastdeconv.set_num_threads(threads)
        self.case = _CASES[name]
        self.x, self.w, self.b = self.case.arrays()
        self.out = fastdeconv.conv_transpose2d(self.x, self.w, self.b, **self.case.kwargs)

    def teardown(self, name, threads):
        fastdeconv.set_num_threads(0)

    def time_conv_transpose2d(self, name, threads):
        fastdeconv.conv_transpose2d(self.x, self.w, self.b, **self.case.kwargs, out=self.out)

    def peakmem_conv_transpose2d(self, name, threads):
        fastdeconv.conv_transpose2d(self.x, self.w, self.b, **self.case.kwargs)


class Conv2dSuite:
    """conv2d, the adjoint, on the same shapes run forward (output of the suite's case -> its input)."""

    params = [["dcgan2", "stride1", "grouped"]]
    param_names = ["case"]

    def setup(self, name):
        case = _CASES[name]
        x, w, b = case.arrays()
        self.y = fastdeconv.conv_transpose2d(x, w, b, **case.kwargs)
        self.kwargs = dict(stride=case.stride, padding=case.padding, dilation=case.dilation, groups=case.groups)
        # The transposed weight (C_in, kH, kW, C_out/g) is the forward convolution's OHWI weight.
        self.w = w

    def time_conv2d(self, name):
        fastdeconv.conv2d(self.y, self.w, None, **self.kwargs)


class Float64Suite:
    params = [["dcgan3", "stride1"]]
    param_names = ["case"]

    def setup(self, name):
        self.case = _CASES[name]
        self.x, self.w, self.b = self.case.arrays(np.float64)

    def time_conv_transpose2d_float64(self, name):
        fastdeconv.conv_transpose2d(self.x, self.w, self.b, **self.case.kwargs)

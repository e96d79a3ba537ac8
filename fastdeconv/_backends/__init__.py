"""The backends behind ``backend=`` (private: the public face is :func:`fastdeconv.backends`): the
protocol (:mod:`.protocol`), the registry and the call path (:mod:`.registry`), and one module per
backend: :mod:`.cpu` (the C kernels), :mod:`.reference` (the numpy oracle), :mod:`.mps` ("mps" and
"mps-cnn", on the engine in :mod:`fastdeconv.metal`)."""

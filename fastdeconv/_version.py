"""The package version, written once: pyproject.toml reads it with setuptools' ``attr:``, which parses
this file without importing the package (so without the compiled extension). Keep a plain literal."""

__version__ = "0.1.0"

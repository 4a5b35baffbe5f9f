"""The package is described in pyproject.toml; this file adds what it can only say in an experimental
table: the log analyzer's chunk scan in C (``prime_rl.analysis._scan``, from Python's headers alone).
It is optional: where no C compiler is found the install goes on, and the analyzer scans in Python
(slower on logs with few tagged lines, with the same results)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("prime_rl.analysis._scan", sources=["src/prime_rl/analysis/_scan.c"], optional=True)
    ]
)

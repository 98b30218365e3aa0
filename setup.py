"""The recorder's optional compiled part (tracer/record/_hotpath.c; everything else is in pyproject.toml).

optional=True: where it cannot be built (no compiler, a failing build) the install goes on without it and the recorder
runs on its pure-Python twin, which writes the same bytes (tracer/record/compiled.py). Wheels carry it built
(pyproject.toml's [tool.cibuildwheel]): users never need a compiler.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("disttrace.tracer.record._hotpath", ["tracer/record/_hotpath.c"], optional=True)])

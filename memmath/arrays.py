"""numpy when an array is in play, and only then.

memmath answers a single run with Python ints (exact at any size) and a sweep with int64 arrays.
A value can only be a numpy array or a numpy number once numpy has been imported, so these checks
look in sys.modules instead of importing it: a command-line question about one run never loads
numpy (its import costs about three times the interpreter's own start), while `np` below loads it
on the first use of any of its names, which only the sweep paths make.
"""

from __future__ import annotations

import sys


class _LazyNumpy:
    """The numpy module, imported the first time one of its names is used."""

    def __getattr__(self, name):
        import numpy

        return getattr(numpy, name)

    def __repr__(self) -> str:
        return "<numpy, imported on first use>"


np = _LazyNumpy()


_PLAIN = frozenset({int, float, str, bool, type(None)})


def is_ndarray(value) -> bool:
    """True for a numpy array (of any shape); False, without importing numpy, for anything else."""
    if type(value) in _PLAIN:  # the scalar answers' values, answered first
        return False
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)


def is_bool(value) -> bool:
    """True for Python's and numpy's booleans."""
    if isinstance(value, bool):
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.bool_)


def is_numpy_str(value) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.str_)


def any_true(condition) -> bool:
    """np.any for an array of conditions, bool() for a single one."""
    return bool(np.any(condition)) if is_ndarray(condition) else bool(condition)


def pick(condition, if_true, if_false):
    """if_true where condition holds, else if_false (elementwise, as int64, when condition is an array)."""
    if is_ndarray(condition):
        return np.where(condition, if_true, if_false).astype(np.int64)
    return if_true if condition else if_false


def smaller(a, b):
    """np.minimum where either is an array; min() of Python numbers (exact at any size, numpy never loaded)."""
    return np.minimum(a, b) if is_ndarray(a) or is_ndarray(b) else min(a, b)


def larger(a, b):
    """np.maximum where either is an array; max() of Python numbers (exact at any size, numpy never loaded)."""
    return np.maximum(a, b) if is_ndarray(a) or is_ndarray(b) else max(a, b)

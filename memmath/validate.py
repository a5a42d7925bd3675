"""Input checks shared by every public function: each failure names the field and the allowed range.

Numbers may be Python scalars or numpy arrays (for sweeps). A scalar comes back as a Python int, so
scalar arithmetic is exact and cannot overflow; an array comes back as int64 and broadcasts.
"""

from __future__ import annotations

import math
import numbers
import reprlib

from .arrays import is_bool, is_ndarray, np
from .notes import Note

# Input ranges. Scalar arithmetic uses Python ints and is exact at any size; sweeps (int64 arrays)
# are also checked against SWEEP_LIMIT where a product of inputs can grow past it.
MAX_PARAMS = 10**15
MAX_BATCH = 2**20
MAX_SEQ = 2**22
MAX_DIM = 2**22
MAX_LAYERS = 10_000
MAX_VOCAB = 2**24
MAX_GPUS = 2**20
MAX_SWEEP_POINTS = 2**20  # points a sweep may hold once its arrays broadcast together (e.g. 1,024 x 1,024)
INT64_MAX = 2**63 - 1  # what an array element may reach: sweeps compute in int64


MAX_BYTES = 10**40  # what a result in bytes may reach (scalars are exact Python ints at any size)


class FieldError(ValueError):
    """A value outside what a field allows; `field` names it (the command line maps it to its option)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class FieldTypeError(TypeError):
    """A value of the wrong kind for a field; `field` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


# A short, bounded repr for messages: nesting, long strings and huge integers are cut, never recursed into.
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 2, 40, 40, 40
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = _SHORT.maxset = 4


def describe(value) -> str:
    """A short quotation of a value for an error message (at most 60 characters)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'over 4,000'} digits"
    try:
        text = _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__ must not replace the message
        text = f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def count(name: str, value, *, low: int = 1, high: int = MAX_DIM, scalar: bool = False):
    """A whole number in [low, high]: a Python int for a scalar, an int64 array for an array.

    Accepts ints, integral floats (7e9) and numpy numbers; rejects bools, NaN, fractions and
    strings with a ValueError (TypeError for objects that are not numbers at all). scalar=True
    refuses arrays (for settings a sweep cannot vary) with a ValueError.
    """
    if type(value) is int and low <= value <= high:  # the common case, answered before any message is written
        return value
    allowed = f"a whole number from {low:,} to {high:,}"
    if scalar and (isinstance(value, (list, tuple)) or (is_ndarray(value) and value.ndim > 0)):
        raise FieldError(name, f"{name} must be a single number ({allowed}), not an array: it cannot be swept")
    if is_bool(value):
        raise FieldError(name, f"{name} must be {allowed}, got the boolean {value}")
    if isinstance(value, str):
        raise FieldTypeError(name, f"{name} must be {allowed}, got the string {describe(value)}")
    if isinstance(value, numbers.Number) and not isinstance(value, (list, tuple)):
        return _scalar_count(name, value, low, high, allowed)
    try:
        array = np.asarray(value)
    except Exception:  # ragged lists and the like
        raise FieldTypeError(name, f"{name} must be {allowed} or a rectangular array of them, got {describe(value)}") from None
    if scalar and array.ndim > 0:
        raise FieldError(name, f"{name} must be a single number ({allowed}), not an array: it cannot be swept")
    if array.dtype == object or array.dtype.kind not in "iuf":
        raise FieldTypeError(name, f"{name} must be {allowed} or an array of them, got {describe(value)}")
    if array.ndim == 0:
        return _scalar_count(name, array.item(), low, high, allowed)
    if array.size == 0:
        raise FieldError(name, f"{name} must not be an empty array")
    # An array computes in int64: a range reaching past it is cut to int64's for arrays (uint64 values above it
    # would wrap around, and floats past it cast with a RuntimeWarning), so they are refused here, by name.
    if high > INT64_MAX or low < -INT64_MAX:
        low, high = max(low, -INT64_MAX), min(high, INT64_MAX)
        allowed = f"a whole number from {low:,} to {high:,} in an array (int64; a single number may be larger)"
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)):
            raise FieldError(name, f"{name} must be {allowed}; the array holds NaN or infinity")
        if not np.all(array == np.floor(array)):
            raise FieldError(name, f"{name} must be {allowed}; the array holds fractions")
        # float(high) may round up past int64 (2**63 - 1 becomes 2**63): compare below 2**63 then, exactly.
        too_large = np.any(array >= 2.0**63) if high >= 2**63 - 1024 else np.any(array > high)
        if np.any(array < low) or too_large:
            raise FieldError(name, f"{name} must be {allowed}; the array holds values outside that range")
        return array.astype(np.int64)
    if np.any(array < low) or np.any(array > high):
        raise FieldError(name, f"{name} must be {allowed}; the array holds values outside that range")
    return array.astype(np.int64)


def _scalar_count(name, value, low, high, allowed) -> int:
    if isinstance(value, numbers.Integral):
        result = int(value)
    elif isinstance(value, numbers.Real):
        as_float = float(value)
        if math.isnan(as_float) or math.isinf(as_float):
            raise FieldError(name, f"{name} must be {allowed}, got {as_float}")
        if as_float != math.floor(as_float):
            raise FieldError(name, f"{name} must be {allowed}, got the fraction {as_float}")
        if not (low <= as_float <= high):
            raise FieldError(name, f"{name} must be {allowed}, got {as_float:g}")
        result = int(as_float)
    else:
        raise FieldTypeError(name, f"{name} must be {allowed}, got {describe(value)}")
    if not (low <= result <= high):
        shown = f"{result:,}" if abs(result) < 10**40 else describe(result)
        raise FieldError(name, f"{name} must be {allowed}, got {shown}")
    return result


def reals(name: str, value) -> np.ndarray:
    """Real numbers (a number, a list or an array of them) as a float64 array; NaN and infinity pass.

    None, strings, booleans, objects and ragged lists raise TypeError naming the field.
    """
    message = f"{name} must be a real number or an array of them"
    if value is None or isinstance(value, (str, bytes, dict)) or is_bool(value):
        raise FieldTypeError(name, f"{message}, got {describe(value)}")
    try:
        array = np.asarray(value)
    except Exception:  # ragged lists and the like
        raise FieldTypeError(name, f"{message} (a rectangular one), got {describe(value)}") from None
    if array.dtype.kind not in "iuf":
        raise FieldTypeError(name, f"{message}, got {describe(value)}")
    return array.astype(np.float64)


def nbytes(name: str, value):
    """A number of bytes: a non-negative whole number (Python int) or an array of them (int64)."""
    if is_ndarray(value) and value.ndim > 0:
        if value.dtype.kind not in "iu":
            raise FieldTypeError(name, f"{name} must be whole bytes, an int or an int64 array; got an array of {value.dtype}")
        if np.any(value < 0):
            raise FieldError(name, f"{name} must be from 0 bytes; the array holds negative values")
        if value.dtype.kind == "u":  # unsigned: at most int64's largest, as int64 (never wrapped around)
            if np.any(value > INT64_MAX):
                raise FieldError(name, f"{name} must be from 0 to {INT64_MAX:,} bytes in an array (int64); the array "
                                 "holds values above that")
            return value.astype(np.int64)
        return value
    return count(name, value, low=0, high=MAX_BYTES)


def text_field(name: str, value) -> str:
    """A string (a name or a label)."""
    if not isinstance(value, str):
        raise FieldTypeError(name, f"{name} must be a string; got {describe(value)}")
    return value


def notes(name: str, value) -> tuple:
    """A tuple of notes (memmath.notes.Note): what a result notes or assumes, each with its kind."""
    if not isinstance(value, tuple) or not all(isinstance(note, Note) for note in value):
        raise FieldTypeError(name, f"{name} must be a tuple of Note objects; got {describe(value)}")
    return value


def real(name: str, value, *, low: float, high: float) -> float:
    """A finite real number in [low, high], as a Python float."""
    allowed = f"a number from {low:g} to {high:g}"
    if is_ndarray(value) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value.item()
    if is_bool(value) or not isinstance(value, numbers.Real):
        error = FieldTypeError if not is_bool(value) else FieldError
        raise error(name, f"{name} must be {allowed}, got {describe(value)}")
    try:
        result = float(value)
    except OverflowError:  # an integer too large for a float
        raise FieldError(name, f"{name} must be {allowed}, got {describe(value)}") from None
    if math.isnan(result) or not (low <= result <= high):
        raise FieldError(name, f"{name} must be {allowed}, got {result:g}")
    return result


def flag(name: str, value) -> bool:
    """A real boolean (True/False), not a truthy string or number."""
    if is_bool(value):
        return bool(value)
    raise FieldError(name, f"{name} must be True or False, got {describe(value)}")


def choice(name: str, value, allowed) -> str:
    """One of a fixed set of names (case-insensitive); the error lists them."""
    allowed = tuple(allowed)
    if not isinstance(value, str):
        raise FieldTypeError(name, f"{name} must be one of {', '.join(allowed)}; got {describe(value)}")
    key = value.strip().lower()
    if key not in allowed:
        raise FieldError(name, f"{name} must be one of {', '.join(allowed)}; got {describe(value)}")
    return key


# Sweeps compute in int64. Every part of a result stays below 2**59 bytes (576 PB), so that the
# numerators of ceil_div (bytes x 8 bits) and the sum of the parts stay below 2**63.
SWEEP_LIMIT = 2**59


def check_sweep(name: str, largest) -> None:
    """Refuse a sweep whose largest value, computed exactly with Python ints, is too big for int64.

    The caller evaluates its formula at the sweep's largest inputs (every formula here grows with
    them), so if that value fits, every point of the sweep does.
    """
    if largest > SWEEP_LIMIT:
        raise FieldError(name,
            f"{name} reaches {largest:,} bytes at the largest inputs of this sweep, beyond exact int64 "
            f"arithmetic (at most {SWEEP_LIMIT:,}); narrow the ranges or call with single numbers"
        )


def check_sweep_size(**inputs) -> None:
    """Refuse a sweep whose arrays do not broadcast together, or hold more than MAX_SWEEP_POINTS points together.

    Called with the inputs of one calculation (name=value; single numbers are passed over) before it
    computes anything, so a sweep too large for memory is a ValueError naming its inputs and the
    limit, never a MemoryError, and arrays of shapes that cannot broadcast are refused by name.
    """
    arrays = {name: value for name, value in inputs.items() if is_ndarray(value) and value.ndim > 0}
    if not arrays:
        return
    first = next(iter(arrays))
    shapes = ", ".join(f"{name} {value.shape}" for name, value in arrays.items())
    try:
        shape = np.broadcast_shapes(*(value.shape for value in arrays.values()))
    except ValueError:
        raise FieldError(first, f"{first}: the arrays of a sweep must broadcast together (numpy's rules); got "
                         f"{shapes}, which do not broadcast") from None
    points = math.prod(shape)
    if points > MAX_SWEEP_POINTS:
        grid = " x ".join(map(str, shape))
        raise FieldError(first, f"{first}: this sweep holds {points:,} points ({shapes}: {grid}); a sweep may hold at "
                         f"most {MAX_SWEEP_POINTS:,} points (memmath.validate.MAX_SWEEP_POINTS, e.g. 1,024 x 1,024): "
                         "narrow it or split it into several calls")


def largest(value):
    """The largest element of an array as a Python int (a scalar passes through)."""
    return int(np.max(value)) if is_ndarray(value) else value


def is_array(*values) -> bool:
    """True when any value is a numpy array (the caller is sweeping)."""
    return any(is_ndarray(value) for value in values)


def ceil_div(numerator, denominator):
    """Integer ceiling division that works for Python ints and int64 arrays alike."""
    return -((-numerator) // denominator)

"""Units: bytes are integers inside memmath; they become GB or GiB only for display, always labelled.

GB = 10**9 bytes (decimal, as in "14 GB of weights"); GiB = 2**30 bytes (binary, as the CUDA driver
counts: nvidia-smi shows an RTX 4090 as 24564 MiB, about 24 GiB).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, localcontext
from fractions import Fraction

import numbers

from .arrays import is_ndarray, np

from . import validate

UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50,
}
_UNIT_BY_LOWER = {unit.lower(): unit for unit in UNITS}


def unit_name(unit) -> str:
    """The canonical spelling of a unit ("gib" -> "GiB"); ValueError for anything else."""
    if not isinstance(unit, str) or unit.strip().lower() not in _UNIT_BY_LOWER:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}; got {validate.describe(unit)}")
    return _UNIT_BY_LOWER[unit.strip().lower()]


def to_unit(n_bytes, unit: str = "GB"):
    """n_bytes / the unit's size in bytes (GB = 10**9, GiB = 2**30): a float, or a float array for an array.

    n_bytes must be from 0 to 1e30 (each element, for an array); ValueError otherwise.
    """
    size = UNITS[unit_name(unit)]
    if is_ndarray(n_bytes):
        if n_bytes.dtype.kind not in "iuf":
            raise TypeError(f"n_bytes must be a number of bytes or an array of them; got an array of {n_bytes.dtype}")
        if n_bytes.size and not (np.all(n_bytes >= 0) and np.all(n_bytes <= 1e30)):
            raise ValueError("n_bytes must be from 0 to 1e30 bytes; the array holds NaN or values outside that range")
        return n_bytes / size
    return validate.real("n_bytes", n_bytes, low=0, high=1e30) / size


def format_bytes(n_bytes, unit: str = "GB", digits: int = 2) -> str:
    """A labelled string such as '14.00 GB' or '13.04 GiB': n_bytes / unit size, rounded to `digits` decimals.

    unit: B, KB, MB, GB, TB, PB (powers of 10) or KiB, MiB, GiB, TiB, PiB (powers of 2). One size
    only: for an array of bytes use to_unit. A negative size (a Fit's headroom when the run does not
    fit) prints as a shortfall: format_bytes(-2 * 10**9) == '2.00 GB short'.
    """
    unit = unit_name(unit)
    digits = validate.count("digits", digits, low=0, high=12, scalar=True)
    if is_ndarray(n_bytes) and n_bytes.ndim:
        raise TypeError("format_bytes formats one size; for an array of bytes use to_unit(n_bytes, unit)")
    short = isinstance(n_bytes, numbers.Real) and not isinstance(n_bytes, bool) and n_bytes < 0
    value = to_unit(-n_bytes if short else n_bytes, unit)
    text = f"{int(round(value)):,} B" if unit == "B" else f"{value:,.{digits}f} {unit}"
    return f"{text} short" if short else text


_NUMBER = r"([0-9][0-9_,]*\.?[0-9]*(?:e[+-]?[0-9]+)?)"
_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


def parse_count(text) -> int:
    """A parameter count (an int) from '7B', '350M', '1.5e9', '124,439,808' or a number; ValueError otherwise.

    Suffixes are decimal: k = 10**3, M = 10**6, B (or G) = 10**9, T = 10**12.
    """
    if isinstance(text, numbers.Real) and not isinstance(text, bool):
        return validate.count("parameter count", text, low=1, high=validate.MAX_PARAMS)
    if not isinstance(text, str):
        raise TypeError(f"parameter count must be a number or text such as '7B'; got {validate.describe(text)}")
    match = re.fullmatch(_NUMBER + r"\s*([kmbgt]?)", text.strip().lower())
    if not match:
        raise ValueError(f"parameter count must look like '7B', '350M', '1.5e9' or '124,439,808'; got {validate.describe(text)}")
    number = float(match.group(1).replace(",", "").replace("_", ""))
    value = number * _COUNT_SUFFIX[match.group(2)]
    if not math.isfinite(value) or abs(value - round(value)) > 1e-6 * max(1.0, value):
        raise ValueError(f"parameter count must be a whole number; {validate.describe(text)} is {value:g}")
    return validate.count("parameter count", round(value), low=1, high=validate.MAX_PARAMS)


def parse_bytes(text) -> int:
    """Bytes (an int) from a labelled size such as '14.00 GB', '24 GiB' or '512 MiB': number x unit size,
    rounded to the nearest whole byte (GB = 10**9, GiB = 2**30). ValueError for text it cannot read."""
    if not isinstance(text, str):
        raise TypeError(f"size must be text such as '24 GiB'; got {validate.describe(text)}")
    match = re.fullmatch(_NUMBER + r"\s*([a-z]+)", text.strip().lower())
    if not match or match.group(2) not in _UNIT_BY_LOWER:
        raise ValueError(f"size must be a number and one of {', '.join(UNITS)} (such as '24 GiB'); got {validate.describe(text)}")
    number = float(match.group(1).replace(",", "").replace("_", ""))
    n_bytes = number * UNITS[_UNIT_BY_LOWER[match.group(2)]]
    if not n_bytes <= 1e30:  # also catches the infinity of '1e400 GB'
        raise ValueError(f"size must be at most 1e30 bytes; got {validate.describe(text)}")
    return int(round(n_bytes))


def whole_bytes(name: str, text, *, low: int = 0, high: int = 2**60) -> int:
    """Bytes from text such as '24GiB', '1.5 GB', '1,343MiB' or '0', read exactly (a Fraction, never a float): a
    whole number from `low` to `high` (a whole number of PiB). Where parse_bytes rounds, this refuses: a fraction of
    a byte, a size outside the range (an exponent such as 1e999999999 refused before it is expanded) and a comma that
    does not group thousands (1,5GB, never read as 15GB) are each a FieldError naming `name` and what it allows."""
    if not isinstance(text, str):
        raise validate.FieldTypeError(name, f"{name} must be text such as '24GiB'; got {validate.describe(text)}")
    allowed = (f"a size from {'1 B' if low else '0'} to {high // 2**50:,} PiB ({high:,} bytes), "
               "such as 24GiB, 1.5GB or 1343MiB")

    def out_of_range(approx):
        return validate.FieldError(name, f"{name} must be {allowed}; got {validate.describe(text)}, " + (
            exact_bytes_text(approx) if not isinstance(approx, float) else f"about {approx:.3g} bytes"
            if approx < float("inf") else "more than 1e+308 bytes"))
    if not text.strip():
        raise validate.FieldError(name, f"{name} is empty; give {allowed}")
    exact = 0 if text.strip() in ("0", "0.0") else _exact_bytes(name, text, out_of_range)
    if exact is None:
        raise validate.FieldError(name, f"{name} must be {allowed} (units {', '.join(UNITS)}); "
                                  f"got {validate.describe(text)}")
    if exact > high or exact < low:
        raise out_of_range(exact)
    if exact.denominator != 1:
        raise validate.FieldError(name, f"{name} {validate.describe(text)} is {exact_bytes_text(exact)}, not a whole "
                                  f"number of bytes; give whole bytes, such as {round(exact)}B")
    return int(exact)


def _exact_bytes(name: str, text: str, too_large):
    """The size a text names, as an exact Fraction of bytes; None when it is not a size such as 24GiB.
    too_large(approx) is raised for a size past any card, before an exponent such as 1e999999999
    is expanded; a comma that does not group thousands (1,5GB) is refused, never read as 15GB."""
    match = re.fullmatch(_NUMBER + r"\s*([a-z]+)", text.strip().lower())
    if not match or match.group(2) not in _UNIT_BY_LOWER:
        return None
    unit = UNITS[_UNIT_BY_LOWER[match.group(2)]]
    number = match.group(1).replace("_", "")
    if "," in number and not re.fullmatch(r"[0-9]{1,3}(,[0-9]{3})+(\.[0-9]*)?(e[+-]?[0-9]+)?", number):
        raise validate.FieldError(name, f"{name} {validate.describe(text)}: a comma groups thousands (1,343MiB); for "
                                  "a fraction write a point (1.5GB)")
    number = number.replace(",", "")
    mantissa, _, exponent = number.partition("e")
    if exponent and abs(int(exponent)) > 64 and Fraction(mantissa) != 0:
        if int(exponent) > 0:
            raise too_large(float(mantissa) * 10.0 ** min(int(exponent), 308) * unit)
        return Fraction(1, 10**65)  # far below a byte: refused as a fraction of one
    return Fraction(0) if exponent and Fraction(mantissa) == 0 else Fraction(number) * unit


def exact_bytes_text(exact) -> str:
    """An exact size in bytes as text: '1,363,148.8 bytes' (every digit), 'about 1e+39 bytes' when huge,
    'less than 1e-30 bytes' when tiny."""
    exact = Fraction(exact)
    if exact > 10**24:
        return f"about {float(exact):.3g} bytes"
    if 0 < exact < Fraction(1, 10**30):
        return "less than 1e-30 bytes"
    with localcontext() as context:
        context.prec = 60
        value = (Decimal(exact.numerator) / Decimal(exact.denominator)).normalize()
    return f"{value:,f} bytes"

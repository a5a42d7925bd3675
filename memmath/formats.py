"""Number formats: storage bits per element, and for floating formats their range and precision.

Bits, not bytes, are stored, so a 4-bit value costs 0.5 byte (the mistake `4 // 8 == 0` cannot
happen). Byte counts round up only once, for a whole tensor: `fmt.bytes_for(n)`.
"""

from __future__ import annotations


from .arrays import np

from . import validate
from .values import frozen

# The 16 NF4 code values (Dettmers et al. 2023, QLoRA, appendix E; bitsandbytes `create_normal_map`).
NF4_LEVELS = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)


@frozen
class NumberFormat:
    """One way to store a number.

    bits: storage per element; exponent_bits/mantissa_bits: None for integer formats;
    max_value: largest finite value (for nf4, the normalised code range 1.0 times the block's absmax);
    epsilon: gap between 1 and the next larger value (1 for integers: their step).
    """

    name: str
    bits: int
    kind: str  # "float", "int" or "lookup" (nf4)
    exponent_bits: int | None
    mantissa_bits: int | None
    max_value: float
    epsilon: float
    smallest_normal: float | None
    has_inf: bool
    description: str

    def __post_init__(self):
        # A format is checked when it is built, so get_format never hands on one that gives negative bytes.
        _text("name", self.name, empty=False)
        object.__setattr__(self, "bits", validate.count("bits", self.bits, high=64, scalar=True))
        object.__setattr__(self, "kind", validate.choice("kind", self.kind, FORMAT_KINDS))
        if self.kind == "float":
            exponent = validate.count("exponent_bits", self.exponent_bits, high=15, scalar=True)
            mantissa = validate.count("mantissa_bits", self.mantissa_bits, low=0, high=63, scalar=True)
            if 1 + exponent + mantissa > self.bits:
                raise ValueError(f"exponent_bits + mantissa_bits + a sign bit must fit in bits ({self.bits}); "
                                 f"got {exponent} + {mantissa} + 1")
            object.__setattr__(self, "exponent_bits", exponent)
            object.__setattr__(self, "mantissa_bits", mantissa)
            smallest = validate.real("smallest_normal", self.smallest_normal, low=1e-320, high=1e308)
            object.__setattr__(self, "smallest_normal", smallest)
        else:
            for name in ("exponent_bits", "mantissa_bits", "smallest_normal"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} must be None for a {self.kind} format (only float formats have it)")
        object.__setattr__(self, "max_value", validate.real("max_value", self.max_value, low=1e-300, high=1.8e308))
        object.__setattr__(self, "epsilon", validate.real("epsilon", self.epsilon, low=0, high=1e308))
        object.__setattr__(self, "has_inf", validate.flag("has_inf", self.has_inf))
        _text("description", self.description)

    @property
    def bytes(self) -> float:
        """Bytes per element (bits / 8): 0.5 for the 4-bit formats."""
        return self.bits / 8

    def bytes_for(self, n_elements):
        """Bytes to store n elements, rounded up to a whole byte: ceil(n * bits / 8)."""
        n = validate.count("n_elements", n_elements, low=0, high=validate.MAX_PARAMS)
        return validate.ceil_div(n * self.bits, 8)

    @property
    def decimal_digits(self) -> float | None:
        """Significant decimal digits a float format keeps: log10(2 ** (mantissa_bits + 1))."""
        if self.mantissa_bits is None:
            return None
        return float((self.mantissa_bits + 1) * np.log10(2))


FORMAT_KINDS = ("float", "int", "lookup")


def _text(name, value, *, empty=True):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string; got {validate.describe(value)}")
    if not empty and not value.strip():
        raise ValueError(f"{name} must not be empty")


def _ieee(name, bits, exponent_bits, mantissa_bits, description, *, max_value=None, has_inf=True):
    bias = 2 ** (exponent_bits - 1) - 1
    # Largest finite value of an IEEE-754 style format: (2 - 2**-m) * 2**bias.
    largest = max_value if max_value is not None else (2 - 2.0**-mantissa_bits) * 2.0**bias
    return NumberFormat(
        name=name, bits=bits, kind="float", exponent_bits=exponent_bits, mantissa_bits=mantissa_bits,
        max_value=largest, epsilon=2.0**-mantissa_bits, smallest_normal=2.0 ** (1 - bias),
        has_inf=has_inf, description=description,
    )


FORMATS: dict[str, NumberFormat] = {
    "fp32": _ieee("fp32", 32, 8, 23, "IEEE-754 single precision: the default for PyTorch tensors."),
    # TF32 is a tensor-core compute mode: values are stored as fp32 (32 bits) but multiplied with a
    # 10-bit mantissa (NVIDIA A100 whitepaper, 2020).
    "tf32": _ieee("tf32", 32, 8, 10, "TensorFloat-32: fp32 storage, 10-bit mantissa in tensor-core math.",
                  max_value=(2 - 2.0**-10) * 2.0**127),
    "fp16": _ieee("fp16", 16, 5, 10, "IEEE-754 half precision: fine steps, small range (max 65,504)."),
    "bf16": _ieee("bf16", 16, 8, 7, "bfloat16 (Google Brain): fp32's range with a 7-bit mantissa."),
    # OCP 8-bit floating point spec (2023): E4M3 has no infinity and a largest value of 448.
    "fp8_e4m3": _ieee("fp8_e4m3", 8, 4, 3, "FP8 E4M3: more precision, max 448, no infinity.",
                      max_value=448.0, has_inf=False),
    "fp8_e5m2": _ieee("fp8_e5m2", 8, 5, 2, "FP8 E5M2: more range (max 57,344), 2-bit mantissa."),
    "int8": NumberFormat("int8", 8, "int", None, None, 127.0, 1.0, None, False,
                         "8-bit signed integer: -128 to 127 steps of a per-tensor or per-block scale."),
    "int4": NumberFormat("int4", 4, "int", None, None, 7.0, 1.0, None, False,
                         "4-bit signed integer: -8 to 7 steps of a scale; two values per byte."),
    "nf4": NumberFormat("nf4", 4, "lookup", None, None, 1.0, 0.0, None, False,
                        "4-bit NormalFloat (QLoRA): 16 levels at normal quantiles, times a block's absmax."),
}

_ALIASES = {
    "float32": "fp32", "float": "fp32", "single": "fp32", "f32": "fp32", "fp32": "fp32",
    "tf32": "tf32", "tensorfloat32": "tf32", "tensorfloat-32": "tf32",
    "float16": "fp16", "half": "fp16", "f16": "fp16", "fp16": "fp16",
    "bfloat16": "bf16", "bf16": "bf16",
    "fp8": "fp8_e4m3", "float8": "fp8_e4m3", "e4m3": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3", "float8_e4m3": "fp8_e4m3", "fp8-e4m3": "fp8_e4m3",
    "e5m2": "fp8_e5m2", "fp8_e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2", "fp8-e5m2": "fp8_e5m2",
    "int8": "int8", "qint8": "int8", "8bit": "int8", "8-bit": "int8",
    "int4": "int4", "4bit": "int4", "4-bit": "int4",
    "nf4": "nf4", "normalfloat4": "nf4", "normal_float4": "nf4",
}


def get_format(name) -> NumberFormat:
    """The NumberFormat for a name or common spelling ("bfloat16", "float32", "half", "fp8", "nf4").

    A NumberFormat passes through unchanged. Unknown names raise ValueError listing the formats.
    """
    if isinstance(name, NumberFormat):
        name.__post_init__()  # checked again: a format altered after it was built is refused too
        return name
    if not isinstance(name, str):
        raise TypeError(f"format must be a name such as 'bf16' or a NumberFormat; got {validate.describe(name)}")
    key = name.strip().lower().replace("torch.", "")
    if key not in _ALIASES:
        raise ValueError(f"format must be one of {', '.join(FORMATS)} (or a common spelling); "
                         f"got {validate.describe(name)}")
    return FORMATS[_ALIASES[key]]


def float_step(fmt, value) -> float:
    """The gap between neighbouring values a float format stores around `value` (its rounding step).

    2 ** (e - mantissa_bits), where e = floor(log2 |value|), floored at the smallest normal
    exponent 1 - bias (subnormals share one fixed step); IEEE-754 spacing, as round_to_format uses.
    bf16 near 300: 2 ** (8 - 7) = 2. Integer and lookup formats step by their scale: ValueError.
    """
    fmt = get_format(fmt)
    if fmt.kind != "float":
        raise ValueError(f"format must be a float format for float_step; {fmt.name} steps by its scale")
    value = validate.real("value", value, low=-1e300, high=1e300)
    bias = 2 ** (fmt.exponent_bits - 1) - 1
    exponent = int(np.floor(np.log2(abs(value)))) if value else 1 - bias
    return 2.0 ** (max(exponent, 1 - bias) - fmt.mantissa_bits)


def absmax_scale(fmt, absmax) -> float:
    """The scale block-wise absmax quantization gives a block: absmax / the format's largest level.

    int8 maps the block's largest magnitude to 127, int4 to 7 and nf4 to its level 1.0, so
    round_to_format(x, fmt, scale=absmax_scale(fmt, absmax)) stores x as an integer step of that
    scale (Dettmers et al. 2022, 8-bit Optimizers via Block-wise Quantization; Dettmers et al. 2023,
    QLoRA). Float formats carry their own exponent and need no scale: 1.0.
    """
    fmt = get_format(fmt)
    absmax = validate.real("absmax", absmax, low=1e-300, high=1e300)
    if fmt.kind == "float":
        return 1.0
    return absmax / fmt.max_value


def round_to_format(value, fmt, *, scale: float = 1.0):
    """The value(s) as the format would store them, back in float64.

    Floats: round to nearest, ties to even, with subnormals; overflow gives inf (or NaN for E4M3,
    which has no infinity). Integers: round(value / scale), clipped to the format's range, times
    scale. nf4: the nearest of the 16 NF4 levels times scale (scale plays the block's absmax).
    """
    fmt = get_format(fmt)
    scale = validate.real("scale", scale, low=1e-300, high=1e300)
    x = validate.reals("value", value)
    if fmt.kind == "int":
        low = -(2 ** (fmt.bits - 1))
        result = np.clip(np.round(x / scale), low, fmt.max_value) * scale
    elif fmt.kind == "lookup":
        levels = np.asarray(NF4_LEVELS)
        index = np.abs(np.clip(x / scale, -1, 1)[..., None] - levels).argmin(axis=-1)
        result = np.where(np.isnan(x), np.nan, levels[index] * scale)
    else:
        result = _round_float(x, fmt)
    return result.item() if result.ndim == 0 else result


def _round_float(x, fmt: NumberFormat):
    bias = 2 ** (fmt.exponent_bits - 1) - 1
    magnitude = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
        exponent = np.maximum(exponent, 1 - bias)  # below the smallest normal: fixed subnormal steps
        quantum = 2.0 ** (exponent - fmt.mantissa_bits)
        rounded = np.round(magnitude / quantum) * quantum  # numpy rounds half to even
        overflow_value = np.inf if fmt.has_inf else np.nan
        rounded = np.where(rounded > fmt.max_value, overflow_value, rounded)
        rounded = np.where(np.isinf(magnitude), overflow_value, rounded)
        return np.copysign(rounded, x)


def quant_constant_bytes(n_elements, *, block: int = 64, double_quant: bool = True):
    """Bytes of block-wise absmax constants for one tensor of n elements.

    Without double quantization 4 x ceil(n / block): one fp32 constant per block (32/64 = 0.5 bits
    per value at block 64). With it, ceil(n / block) 8-bit constants plus 4 x ceil(blocks / 256)
    for one fp32 constant per 256 of them (8/64 + 32/(64*256) = 0.127 bits per value; Dettmers et
    al. 2023, QLoRA, section 3). n_elements may be an array.
    """
    n_elements = validate.count("n_elements", n_elements, low=0, high=validate.MAX_PARAMS)
    block = validate.count("block", block, high=2**16, scalar=True)
    double_quant = validate.flag("double_quant", double_quant)
    blocks = validate.ceil_div(n_elements, block)
    if not double_quant:
        return blocks * 4
    return blocks + validate.ceil_div(blocks, DOUBLE_QUANT_GROUP) * 4


DOUBLE_QUANT_GROUP = 256  # QLoRA's double quantization: one fp32 constant per 256 8-bit constants


def quant_constant_bits(*, block: int = 64, double_quant: bool = True) -> float:
    """Bits of quantization constants per weight of a block-quantized tensor that fills whole blocks.

    32 / block with one fp32 absmax per block; 8 / block + 32 / (256 x block) with double
    quantization (Dettmers et al. 2023, QLoRA, section 3: 0.5 and 0.127 bits at block 64).
    """
    from fractions import Fraction

    block = validate.count("block", block, high=2**16, scalar=True)
    if not validate.flag("double_quant", double_quant):
        return float(Fraction(32, block))
    return float(Fraction(8, block) + Fraction(32, block * DOUBLE_QUANT_GROUP))

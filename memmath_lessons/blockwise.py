"""Block-wise quantization in numpy: what QLoRA does to each weight tensor, small enough to watch.

Values are cut into blocks of `block` (64 in QLoRA); each block is divided by its largest absolute
value (its absmax, kept as the block's quantization constant), rounded to the nearest code of the
format, and multiplied back (Dettmers et al. 2023, section 3; Dettmers et al. 2022 for absmax int8).
"""

from __future__ import annotations

import numpy as np

from memmath import validate
from memmath.formats import NF4_LEVELS, get_format

BLOCKWISE_FORMATS = ("nf4", "int4", "int8")


def quantize_blockwise(values, fmt: str = "nf4", *, block: int = 64):
    """(dequantized values, absmax per block) for values rounded block by block.

    nf4: nearest of the 16 NF4 levels times the block's absmax. int4/int8: symmetric absmax
    integers, round(x / absmax * q) with q = 7 or 127, clipped to the format's range, times
    absmax / q. The last block is padded with zeros when the length is not a multiple of `block`.
    """
    fmt = get_format(fmt).name
    if fmt not in BLOCKWISE_FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(BLOCKWISE_FORMATS)}; got {fmt!r}")
    block = validate.count("block", block, high=2**20)
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("values must be a non-empty array of finite numbers")
    n = x.size
    padded = np.zeros(validate.ceil_div(n, block) * block)
    padded[:n] = x
    blocks = padded.reshape(-1, block)
    absmax = np.abs(blocks).max(axis=1)
    scale = np.where(absmax > 0, absmax, 1.0)[:, None]
    normalized = blocks / scale
    if fmt == "nf4":
        levels = np.asarray(NF4_LEVELS)
        codes = levels[np.abs(normalized[..., None] - levels).argmin(axis=-1)]
    else:
        top = get_format(fmt).max_value  # 7 for int4, 127 for int8
        codes = np.clip(np.round(normalized * top), -top - 1, top) / top
    return (codes * scale).ravel()[:n], absmax


def quantization_error(values, fmt: str = "nf4", *, block: int = 64) -> float:
    """Mean absolute error of block-wise quantization, relative to the mean absolute value."""
    x = np.asarray(values, dtype=np.float64).ravel()
    dequantized, _ = quantize_blockwise(x, fmt, block=block)
    return float(np.abs(dequantized - x).mean() / np.abs(x).mean())

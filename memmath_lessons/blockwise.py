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


def storage_table(values, *, block: int = 64):
    """Lesson 6's table of four ways to store `values`: bf16, then int4, NF4 and NF4 with double
    quantization in blocks of `block`. Columns: storage, bits per weight, constants (bits per weight),
    mean error (share of mean |w|), total bits (memmath's bits_per_weight; the errors are measured here).
    """
    import pandas as pd

    from memmath.formats import round_to_format
    from memmath.methods import bits_per_weight, quant_constant_bits

    x = np.asarray(values, dtype=np.float64).ravel()
    bf16_error = float(np.abs(round_to_format(x, "bf16") - x).mean() / np.abs(x).mean())
    rows = [{"storage": "bf16", "bits per weight": bits_per_weight("bf16"), "constants (bits per weight)": 0.0,
             "mean error (share of mean |w|)": bf16_error, "total bits": bits_per_weight("bf16")}]
    for storage, fmt, double_quant in (("int4, fp32 constants", "int4", False), ("NF4, fp32 constants", "nf4", False),
                                       ("NF4 + double quantization", "nf4", True)):
        rows.append({"storage": storage, "bits per weight": float(get_format(fmt).bits),
                     "constants (bits per weight)": quant_constant_bits(block=block, double_quant=double_quant),
                     "mean error (share of mean |w|)": quantization_error(x, fmt, block=block),
                     "total bits": bits_per_weight(fmt, block=block, double_quant=double_quant)})
    return pd.DataFrame(rows)


def normalized_histogram(values, *, block: int = 64, bins: int = 50):
    """Counts of the values divided by their block's absmax (whole blocks only), in `bins` bins over -1..1:
    a DataFrame of start, end (rounded to 2 decimals) and weights, so a chart carries the counts, not the values."""
    import pandas as pd

    x = np.asarray(values, dtype=np.float64).ravel()
    blocks = x[: len(x) // block * block].reshape(-1, block)
    counts, edges = np.histogram(blocks / np.abs(blocks).max(axis=1, keepdims=True), bins=bins, range=(-1, 1))
    return pd.DataFrame({"start": edges[:-1].round(2), "end": edges[1:].round(2), "weights": counts})


def format_levels():
    """The 16 NF4 levels and the 15 symmetric int4 levels (k / 7, k = -7..7): a DataFrame of level, format."""
    import pandas as pd

    return pd.concat([pd.DataFrame({"level": list(NF4_LEVELS), "format": "NF4 levels"}),
                      pd.DataFrame({"level": np.arange(-7, 8) / 7, "format": "int4 levels"})])

"""Published bytes-per-parameter counts for full finetuning with Adam, each written as the recipe it counts.

Estimates of full-finetuning memory range from 8 to 20 bytes per parameter. None of them is wrong:
each counts a different recipe (what is stored, in which format). Writing every estimate as a
memmath Recipe makes the disagreement arithmetic: the same parts, sized by different formats.

Four estimates are recipes memmath already trains with (RECIPES); two are accountings that
only exist in their sources: "How to Scale Your Model" leaves the gradients out, and the Hugging
Face docs keep fp32 gradients beside a 16-bit weight copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

from memmath import validate
from memmath.recipes import RECIPES, Recipe, bytes_per_parameter
from memmath.units import UNITS, unit_name

if TYPE_CHECKING:
    import pandas as pd



@dataclass(frozen=True)
class PublishedEstimate:
    """One published count: a short label, the recipe it counts, its optimizer, its source, what it leaves out."""

    key: str
    label: str
    recipe: Recipe
    optimizer: str
    source: str
    counts: str


# "How to Scale Your Model" (Austin et al., Google DeepMind, 2025): bf16 parameters (2 B) and fp32 Adam
# moments (2 x 4 B) = 10 B per parameter; gradients are not part of the count.
SCALING_BOOK = Recipe(
    name="scaling_book", weight_bits=16, grad_bits=0,
    master_bits=0, state_bits=32, accum_bits=0, activation_bits=16, states_follow_params=False,
    description="bf16 weights (2 B) and fp32 Adam moments (2 x 4 B); gradients not counted: 2 + 8 = 10 B/param.",
    source="Austin et al. 2025, How to Scale Your Model (jax-ml/scaling-book)")

# Hugging Face transformers docs, "Model training anatomy": mixed precision keeps the model in fp32 and in
# 16 bit (4 + 2 = 6 B), fp32 gradients (4 B) and AdamW's two fp32 states (8 B) = 18 B per parameter.
HF_ANATOMY = Recipe(
    name="hf_anatomy", weight_bits=16, grad_bits=32,
    master_bits=32, state_bits=32, accum_bits=0, activation_bits=16, states_follow_params=False,
    description="16-bit weight copy (2 B) + fp32 weights (4 B), fp32 gradients (4 B), fp32 Adam moments (8 B): 18 B/param.",
    source="Hugging Face transformers docs, Model training anatomy")

PUBLISHED_ESTIMATES: dict[str, PublishedEstimate] = {
    e.key: e
    for e in (
        PublishedEstimate("article", "pure bf16 (the article)", RECIPES["bf16"], "adam",
                          "the article; LLaMA-Factory pure_bf16",
                          "weights, gradients and both Adam moments in 16 bit"),
        PublishedEstimate("scaling_book", "How to Scale Your Model",
                          SCALING_BOOK, "adam", SCALING_BOOK.source,
                          "gradients left out of the count"),
        PublishedEstimate("fp32", "fp32 or PyTorch AMP", RECIPES["fp32"], "adam",
                          "PyTorch defaults; torch.autocast keeps fp32 weights",
                          "everything in fp32 (AMP only makes activations 16-bit)"),
        PublishedEstimate("zero", "ZeRO mixed precision", RECIPES["mixed"], "adam",
                          "Rajbhandari et al. 2020, ZeRO, section 3.1",
                          "16-bit weights and gradients, fp32 master copy and Adam moments"),
        PublishedEstimate("hf_anatomy", "Hugging Face docs", HF_ANATOMY, "adam",
                          HF_ANATOMY.source, "two weight copies and fp32 gradients"),
        PublishedEstimate("nanotron", "nanotron",
                          RECIPES["mixed_fp32_grads"], "adam",
                          "nanotron; Hugging Face Ultra-Scale Playbook (2025)",
                          "the ZeRO recipe plus an fp32 buffer that accumulates gradients"),
    )
}

_COLUMNS = {"weights": "weights (B)", "gradients": "gradients (B)", "gradient_accumulation": "grad. accumulation (B)",
            "master_weights": "fp32 master (B)", "optimizer_states": "Adam moments (B)", "total": "B per parameter"}


def published_bytes_per_parameter(key: str) -> dict[str, float]:
    """Bytes per trainable parameter of one published estimate, part by part, and their sum.

    The same breakdown as `bytes_per_parameter` (per-tensor step counters and activations left out).
    """
    estimate = get_published(key)
    return bytes_per_parameter(estimate.recipe, estimate.optimizer)


def get_published(key: str) -> PublishedEstimate:
    """The PublishedEstimate for a key: article, scaling_book, fp32, zero, hf_anatomy, nanotron."""
    if isinstance(key, PublishedEstimate):
        return key
    return PUBLISHED_ESTIMATES[validate.choice("published estimate", key, tuple(PUBLISHED_ESTIMATES))]


def published_table(n_params, unit: str = "GB") -> pd.DataFrame:
    """One row per published estimate: bytes per parameter, the memory for n_params, the parts, what it counts, source.

    Memory = ceil(n_params x bytes per parameter), in `unit` (column 'memory (GB)' or 'memory (GiB)').
    """
    import pandas as pd  # only here: `import memmath` stays numpy-only
    unit = unit_name(unit)
    n = validate.count("n_params", n_params, high=validate.MAX_PARAMS)
    rows = []
    for key, estimate in PUBLISHED_ESTIMATES.items():
        per_param = published_bytes_per_parameter(key)
        # bytes per parameter are multiples of 1/8 (bits / 8): n x bits / 8, rounded up once.
        total_bytes = validate.ceil_div(n * round(per_param["total"] * 8), 8)
        row = {"estimate": estimate.label, "B per parameter": per_param["total"],
               f"memory ({unit})": total_bytes / UNITS[unit]}
        row.update({label: per_param[part] for part, label in _COLUMNS.items() if part != "total"})
        row["what it counts"] = estimate.counts
        row["source"] = estimate.source
        rows.append(row)
    return pd.DataFrame(rows)

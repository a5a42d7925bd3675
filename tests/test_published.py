"""Published bytes-per-parameter estimates: each reproduces the figure its source prints.

Expected values are the sources' own sums (REFERENCE.md's table), derived by hand here, never
read back from memmath.
"""

import pytest

import memmath as mm
from memmath.reference import published

# source -> (weights, gradients, gradient accumulation, fp32 master, Adam moments) in bytes per parameter
HAND = {
    "article": (2, 2, 0, 0, 2 * 2),  # the article: 2 + 2 + 2 x 2 = 8 B (56 GB for 7B)
    "scaling_book": (2, 0, 0, 0, 2 * 4),  # How to Scale Your Model: 2 + 8 = 10 B, gradients not counted
    "fp32": (4, 4, 0, 0, 2 * 4),  # fp32 / AMP: 4 + 4 + 8 = 16 B
    "zero": (2, 2, 0, 4, 2 * 4),  # ZeRO section 3.1: 2 + 2 + (4 + 4 + 4) = 16 B ("K = 12")
    "hf_anatomy": (2, 4, 0, 4, 2 * 4),  # HF docs: 6 B weights + 4 B grads + 8 B AdamW = 18 B
    "nanotron": (2, 2, 4, 4, 2 * 4),  # nanotron: ZeRO's 16 B + a 4 B fp32 gradient buffer = 20 B
}


@pytest.mark.parametrize("key", list(HAND))
def test_each_estimate_reproduces_its_source(key):
    weights, grads, accum, master, states = HAND[key]
    got = published.published_bytes_per_parameter(key)
    assert (got["weights"], got["gradients"], got["gradient_accumulation"], got["master_weights"],
            got["optimizer_states"]) == (weights, grads, accum, master, states)
    assert got["total"] == weights + grads + accum + master + states


def test_the_range_is_8_to_20_bytes():
    totals = sorted(published.published_bytes_per_parameter(k)["total"] for k in published.PUBLISHED_ESTIMATES)
    assert totals == [8, 10, 16, 16, 18, 20]


def test_table_for_7b_in_gb():
    table = published.published_table(7_000_000_000, "GB").set_index("estimate")
    # 7e9 x (8, 10, 16, 16, 18, 20) B = 56, 70, 112, 112, 126, 140 GB (REFERENCE.md)
    assert list(table["memory (GB)"]) == [56.0, 70.0, 112.0, 112.0, 126.0, 140.0]
    assert list(table["B per parameter"]) == [8, 10, 16, 16, 18, 20]
    assert table["source"].str.len().min() > 0


def test_training_memory_accepts_the_published_recipes():
    # The extra recipes drive training_memory like any other: 7e9 x 18 B = 126 GB before activations.
    run = mm.training_memory(7_000_000_000, precision=published.HF_ANATOMY, optimizer="adam")
    assert run.without_activations == 126 * 10**9
    assert run.gradients == 7_000_000_000 * 4 and run.master_weights == 7_000_000_000 * 4
    no_grads = mm.training_memory(7_000_000_000, precision=published.SCALING_BOOK, optimizer="adam")
    assert no_grads.gradients == 0 and no_grads.without_activations == 70 * 10**9


def test_unknown_key_names_the_choices():
    with pytest.raises(ValueError, match="published estimate must be one of article"):
        published.get_published("chinchilla")
    with pytest.raises(ValueError, match="n_params"):
        published.published_table(-5)

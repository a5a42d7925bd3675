"""memmath_lessons.reference: the published estimates and the papers' setups reproduce their sources' figures.

Expected values are the sources' own sums (each source named beside its row), derived by hand
here, never read back from memmath.
"""

import pytest

import memmath as mm
from memmath_lessons.reference import published
from memmath_lessons.reference import paper_setups as ps

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
    # 7e9 x (8, 10, 16, 16, 18, 20) B = 56, 70, 112, 112, 126, 140 GB (the sources' own 7B figures)
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


# ---- The published setups behind the LoRA and QLoRA headline numbers, checked by hand arithmetic.
# GPT-3 175B (Brown et al. 2020): GPT-2 layout, V=50,257, 2,048 positions, h=12,288, 96 layers.
# V*h + P*h + L*(12h^2 + 13h) + 2h (GPT-2's layout: tied head, learned positions, 4h MLP).
H3, L3 = 12288, 96
GPT3 = 50257 * H3 + 2048 * H3 + L3 * (12 * H3 * H3 + 13 * H3) + 2 * H3
GPT3_TENSORS = 12 * L3 + 4  # per block: ln_1, c_attn, c_proj, ln_2, c_fc, c_proj (weight + bias); wte, wpe, ln_f

# LLaMA 65B (Touvron et al. 2023): h=8,192, 80 layers, 64 heads of 128, MLP 22,016, V=32,000, untied head.
H, L, I, V = 8192, 80, 22016, 32000
LLAMA65 = 2 * V * H + H + L * (4 * H * H + 3 * H * I + 2 * H)
LLAMA65_TENSORS = 9 * L + 3  # 7 matrices + 2 norms per block; embedding, final norm, head


def test_hand_counts_match_the_published_sizes():
    assert GPT3 == 174_604_259_328
    assert LLAMA65 == 65_285_660_672


def test_gpt3_full_finetuning_parts():
    m = ps.get_setup("lora_gpt3_full").memory()
    assert m.weights == 2 * GPT3 and m.gradients == 2 * GPT3
    assert m.optimizer_states == 4 * GPT3 + 4 * GPT3_TENSORS  # two 2-byte moments + 4-byte step per tensor
    # Weights + Adam states (what LoRA's "up to 2/3" saving counts): 6 B/param = 1.05 TB, below 1.2 TB;
    # with 16-bit gradients 8 B/param = 1.40 TB, above it.
    assert 1.0e12 < m.weights + m.optimizer_states < 1.2e12 < m.without_activations


def test_gpt3_lora_r4_on_q_and_v():
    # Two h x h matrices per block, r x (h + h) each: 4 * 4 * 12,288 * 96 = 18,874,368.
    m = ps.get_setup("lora_gpt3_lora").memory()
    assert m.trainable_params == 18_874_368
    assert m.weights == 2 * GPT3 + 2 * 18_874_368
    assert 9_000 < GPT3 / m.trainable_params < 10_000  # "10,000x fewer" (Hu et al. 2021)
    assert abs(m.total - 350e9) / 350e9 < 0.01  # "350 GB"


def test_qlora_65b_full_16bit_is_over_780_gb():
    m = ps.get_setup("qlora_65b_full_16bit").memory()
    assert m.total == 12 * LLAMA65 + 4 * LLAMA65_TENSORS  # 2 + 2 + 2 x 4 bytes per parameter
    assert m.total > 780e9


def test_qlora_guanaco_65b_parts():
    m = ps.get_setup("qlora_guanaco_65b").memory()
    # r=64 on q, k, v, o (8,192 -> 8,192) and gate, up (8,192 -> 22,016), down (22,016 -> 8,192).
    per_block = 64 * (4 * (H + H) + 3 * (H + I))
    assert m.trainable_params == L * per_block == 799_539_200
    linear = L * (4 * H * H + 3 * H * I)
    # NF4 linear weights 0.5 B, everything else bf16 (embedding, head, norms), adapters bf16.
    assert m.weights == linear // 2 + 2 * (LLAMA65 - linear) + 2 * m.trainable_params
    # Double quantization: one byte per 64 weights, plus 4 B per 256 such constants (all divide exactly).
    blocks_hh, blocks_hi = H * H // 64, H * I // 64
    assert m.quantization_constants == L * (4 * (blocks_hh + blocks_hh // 256 * 4) + 3 * (blocks_hi + blocks_hi // 256 * 4))
    assert m.gradients == 2 * m.trainable_params
    assert m.optimizer_states == 8 * m.trainable_params + 4 * L * 14  # fp32 moments; 14 adapter tensors per block
    # The claim: it fits one 48 GB card (RTX A6000: 49,140 MiB as the driver reports it).
    assert m.total < 49140 * 2**20


def test_bf16_fp32_states_recipe_is_12_bytes_per_parameter():
    parts = mm.recipes.bytes_per_parameter(ps.BF16_FP32_STATES, "adam")
    assert parts["total"] == 2 + 2 + 8


def test_unknown_setup_is_a_value_error():
    with pytest.raises(ValueError, match="setup must be one of"):
        ps.get_setup("gpt5")

"""LoRA(targets="all") on families without a gate matrix (GPT-2, BERT) adapts every linear matrix they have."""

import pytest

import memmath as mm


def test_all_on_gpt2_adapts_c_attn_c_proj_c_fc_and_mlp_c_proj():
    # GPT-2 (h=768, MLP 3072): c_attn 768->2304, attn c_proj 768->768, c_fc 768->3072, mlp c_proj 3072->768.
    # Rank 8: 8 x ((768+2304) + (768+768) + (768+3072) + (3072+768)) = 8 x 12,288 = 98,304 per block.
    assert mm.LoRA(rank=8, targets="all").params_per_block(mm.PRESETS["gpt2"]) == 98_304


def test_all_on_bert_skips_gate():
    # BERT-base: q, k, v, o 768->768 (4 x 1,536), intermediate 768->3072, output 3072->768 (2 x 3,840).
    # Rank 4: 4 x (6,144 + 7,680) = 55,296 per block.
    assert mm.LoRA(rank=4, targets="all").params_per_block(mm.PRESETS["bert-base-uncased"]) == 55_296


def test_naming_gate_explicitly_on_gpt2_still_fails():
    with pytest.raises(ValueError, match="gate"):
        mm.LoRA(rank=8, targets=("q", "gate")).params_per_block(mm.PRESETS["gpt2"])

"""Where "weights x 1.2" stops covering the detailed inference total (hand-derived expectations)."""

import pytest

import memmath as mm


def test_llama_2_7b_bf16_one_sequence_by_hand():
    # Weights W = 2 x 6,738,415,616 = 13,476,831,232 B; the rule allows ceil(1.2 W) = 16,172,197,479 B.
    # Per token: KV 2 x 32 layers x 32 heads x 128 x 2 B = 524,288; working set (sdpa, LLaMA): token
    # embeddings 2 x 4096 + rotary cos/sin 2 x 2 x 128 = 8,704, plus the MLP phase 2 x (3 x 4096 +
    # 3 x 11008) = 90,624 (larger than attention's 32,768 and the head's 16,384 + 128,000 / s from
    # s = 2 on): 623,616 B per token. (16,172,197,479 - 13,476,831,232) / 623,616 = 4,322.1 -> 4,322.
    assert mm.rule_of_thumb_context_limit("llama-2-7b") == 4322


def test_limit_is_the_boundary():
    limit = mm.rule_of_thumb_context_limit("mistral-7b", batch_size=4)
    at = mm.inference_memory("mistral-7b", batch_size=4, context_len=limit)
    past = mm.inference_memory("mistral-7b", batch_size=4, context_len=limit + 1)
    assert at.total <= at.rule_of_thumb < past.total


def test_llama_3_8b_gqa_by_hand():
    # W = 2 x 8,030,261,248 = 16,060,522,496 B; ceil(1.2 W) - W = 3,212,104,500 B of allowance.
    # Per token: KV 2 x 32 x 8 kv heads x 128 x 2 B = 131,072 (4x less than Llama-2-7B's 32 heads);
    # working set 2 x 4096 + 4 x 128 = 8,704 outside + MLP 2 x (3 x 4096 + 3 x 14336) = 110,592:
    # 250,368 B per token. 3,212,104,500 / 250,368 = 12,829.6 -> 12,829.
    assert mm.rule_of_thumb_context_limit("llama-3-8b") == 12829


def test_zero_when_one_token_overflows_and_cap_when_it_never_does():
    assert mm.rule_of_thumb_context_limit("gpt2", batch_size=2**20) == 0
    assert mm.rule_of_thumb_context_limit("llama-3-70b", max_context=64) == 64


def test_needs_layer_widths():
    with pytest.raises(ValueError, match="layers"):
        mm.rule_of_thumb_context_limit(7e9)

"""memmath's prefill working set against what transformers allocated (recorded PyTorch measurements).

Measured with validation/inference_working_set.py (torch 2.13.0+cpu, transformers 5.24.0): tiny
GPT-2 (h=256, 4 layers, 8 heads, V=50,257) and LLaMA (h=256, I=688, 4 layers, 8 heads, 2 or 8 kv
heads, V=32,000) models in bf16, one prefill with use_cache=True and logits_to_keep=1; the peak of
live storages allocated during the pass (weights left out) minus the KV cache.
"""

import pytest

import memmath as mm

# (family, attention, seq_len, batch_size) -> measured bytes
MEASURED = {
    ("gpt2", "sdpa", 256, 1): 2_887_680, ("gpt2", "sdpa", 512, 2): 11_284_480, ("gpt2", "sdpa", 1024, 1): 11_550_720,
    ("gpt2", "eager", 256, 1): 4_067_328, ("gpt2", "eager", 512, 2): 21_245_952,
    ("gpt2", "eager", 1024, 1): 39_337_984,
    ("llama-gqa", "sdpa", 256, 1): 1_615_872, ("llama-gqa", "sdpa", 512, 2): 6_393_856,
    ("llama-gqa", "sdpa", 1024, 1): 6_463_488, ("llama-gqa", "eager", 256, 1): 6_195_200,
    ("llama-gqa", "eager", 512, 2): 46_206_976, ("llama-gqa", "eager", 1024, 1): 89_268_224,
    ("llama-mha", "eager", 256, 1): 5_933_056, ("llama-mha", "eager", 512, 2): 45_158_400,
    ("llama-mha", "eager", 1024, 1): 88_219_648,
}


def tiny(family):
    if family == "gpt2":
        return mm.gpt2_model(n_layers=4, hidden_size=256, n_heads=8, vocab_size=50257, max_positions=1024)
    kv = 2 if family == "llama-gqa" else 8
    return mm.llama_model(n_layers=4, hidden_size=256, n_heads=8, n_kv_heads=kv, intermediate_size=688,
                          vocab_size=32000)


@pytest.mark.parametrize("case", sorted(MEASURED))
def test_working_set_within_one_percent_of_transformers(case):
    family, attention, s, b = case
    predicted = mm.working_set_bytes(tiny(family), context_len=s, batch_size=b, attention=attention)
    assert predicted == pytest.approx(MEASURED[case], rel=0.01)


def test_llama_eager_softmax_in_fp32_by_hand():
    # Llama-2-7B (h=4096, a=32, d=128, I=11008, MHA), bf16, s=4096, b=1, eager. Attention phase:
    # 2*4096*(2*4096 + 4096) per-token terms (block input, normed, q; no repeat_kv in MHA) = 100,663,296
    # + (2 + 4 + 4)*32*4096^2 scores = 5,368,709,120;
    # MLP phase 2*4096*(3*4096 + 3*11008) = 371,195,904 is smaller. Outside: embeddings 2*4096*4096,
    # cos/sin 2*2*4096*128, mask 2*4096^2 = 33,554,432 + 2,097,152 + 33,554,432.
    expected = 100_663_296 + 5_368_709_120 + 33_554_432 + 2_097_152 + 33_554_432
    got = mm.working_set_bytes(mm.PRESETS["llama-2-7b"], context_len=4096, attention="eager")
    assert got == expected


def test_sweep_matches_points():
    import numpy as np

    shape = mm.PRESETS["llama-3-8b"]
    contexts = np.array([1, 64, 4096, 32768])
    swept = mm.working_set_bytes(shape, context_len=contexts, attention="eager")
    for i, s in enumerate(contexts):
        assert swept[i] == mm.working_set_bytes(shape, context_len=int(s), attention="eager")

"""Cohere 2 (Command R7B, Command A) and Apertus, each against transformers 5.24 and peft 0.21 themselves: the
parameter count and bytes of their published configs built on the meta device (and of small widths), peft's LoRA
adapters on a tiny model, each layer's window as transformers' config class derives it, and the KV cache
transformers fills on a tiny model's forward pass.

Expected values come from transformers and peft (built here), from memmath/states.py's per-layer cache rules
(measured in tests/test_states.py) and from hand derivations in the comments."""

from __future__ import annotations

import pytest

import memmath as mm
from family_checks import (adapter_shapes, assert_built_like_transformers, predicted_step, prefill_model,
                           prefill_working_set, two_cpu_steps)
from memmath import states
from tests.test_families_dense import _build, _filled_cache_bytes
from validation.published_configs import PUBLISHED_CONFIGS

PUBLISHED = {"cohere2": ("c4ai-command-r7b-12-2024", "c4ai-command-a-03-2025"),
             "apertus": ("Apertus-8B-2509", "Apertus-70B-2509")}
TINY = {
    # h != a * d (head_dim given), so that a head size read from h / a would show; a window shorter than the prompt
    "cohere2": dict(model_type="cohere2", vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
                    sliding_window_pattern=2, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "apertus": dict(model_type="apertus", vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2),
}


# ---- 1. tensors: transformers' own count and bytes, on the meta device ----------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("name", [n for names in PUBLISHED.values() for n in names])
def test_the_published_configs_count_and_weigh_as_transformers_builds_them(torch, transformers, name):
    config = PUBLISHED_CONFIGS[name]
    model = _build(torch, transformers, config, dtype=torch.bfloat16)
    # xIELU's alpha_p and alpha_n are made in config.dtype: bf16 here, as every other weight
    assert_built_like_transformers(torch, model, config)


@pytest.mark.live
@pytest.mark.parametrize("changes", [{}, dict(attention_bias=True), dict(tie_word_embeddings=False),
                                     dict(head_dim=None), dict(num_key_value_heads=4)])
@pytest.mark.parametrize("model_type", sorted(TINY))
def test_a_small_width_counts_as_transformers_builds_it(torch, transformers, model_type, changes):
    config = {k: v for k, v in dict(TINY[model_type], **changes).items() if v is not None}
    model = _build(torch, transformers, config)
    shape = mm.from_hf_config(config)
    assert shape.n_params == sum(p.numel() for p in model.parameters())
    # the names too: each block's tensors as the model's parameters() name them, in that order
    theirs = [(n.split(".layers.0.", 1)[1], tuple(p.shape)) for n, p in model.named_parameters() if ".layers.0." in n]
    assert [(t.name, t.shape) for t in shape.tensors("layer")] == theirs


def test_the_published_totals_by_hand():
    # Command R7B: per block q and o 4,096^2, k and v 4,096 x 1,024, gate, up, down 4,096 x 14,336 and one
    # weight-only LayerNorm; a tied 256,000 x 4,096 embedding and the final norm:
    # 32 x (41,943,040 + 176,160,768 + 4,096) + 1,048,576,000 + 4,096 = 8,028,033,024 (the Hub: 8.03B)
    assert mm.PRESETS["command-r7b"].n_params == 8_028_033_024
    # Apertus-8B: the same attention plus q/k norms of 128, up and down 4,096 x 21,504, xIELU's two scalars, two
    # norms; untied 131,072 x 4,096 embedding and head: 32 x (41,943,040 + 256 + 176,160,768 + 2 + 8,192)
    # + 2 x 536,870,912 + 4,096 = 8,053,338,176
    assert mm.PRESETS["apertus-8b"].n_params == 8_053_338_176
    for preset, source in (("command-r7b", "c4ai-command-r7b-12-2024"), ("apertus-8b", "Apertus-8B-2509")):
        assert mm.PRESETS[preset].n_params == mm.from_hf_config(PUBLISHED_CONFIGS[source]).n_params


# ---- 2. peft's adapters on a tiny model ------------------------------------------------------------------------

@pytest.mark.live
@pytest.mark.parametrize("model_type, targets", [
    ("cohere2", "all-linear"), ("cohere2", "q+v"), ("cohere2", "q+k+v+o+gate+up+down"),
    ("apertus", "all-linear"), ("apertus", "q+v"), ("apertus", "q+k+v+o+up+down"), ("apertus", "up+down"),
])
def test_lora_adapters_are_peft_s(torch, transformers, peft, model_type, targets):
    config, rank = TINY[model_type], 4
    theirs, ours = adapter_shapes(peft, _build(torch, transformers, config), config, targets, rank)
    assert ours == theirs


def test_apertus_has_no_gate_to_adapt():
    shape = mm.PRESETS["apertus-8b"]
    with pytest.raises(ValueError, match="'gate' does not exist .*no gate.*allowed: q, k, v, o, up, down"):
        shape.lora_adapters(("gate",))
    assert [m for m, _, _ in shape.lora_matrices("all")] == ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj",
                                                            "down_proj"]


# ---- 3. layer types and the KV cache ---------------------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("config", [
    TINY["cohere2"],
    dict(TINY["cohere2"], num_hidden_layers=8, sliding_window_pattern=None),  # Cohere2Config's default: 4
    dict(TINY["cohere2"], layer_types=["full_attention", "sliding_attention", "sliding_attention",
                                       "full_attention"]),
    dict(TINY["cohere2"], sliding_window=100),
], ids=["pattern-2", "default-pattern", "given", "window-100"])
def test_each_layer_s_window_is_the_one_transformers_config_derives(transformers, config):
    config = {k: v for k, v in config.items() if v is not None}
    hf = transformers.AutoConfig.for_model("cohere2", **{k: v for k, v in config.items() if k != "model_type"})
    window = {"full_attention": None, "sliding_attention": hf.sliding_window}
    assert mm.from_hf_config(config).attention_windows == tuple(window[t] for t in hf.layer_types)


def test_command_r7b_caches_three_sliding_layers_to_one_full():
    shape = mm.PRESETS["command-r7b"]
    full = states.FullAttention(kv_heads=8, head_dim=128)
    sliding = states.SlidingAttention(kv_heads=8, head_dim=128, window=4096)
    layers = states.layers_from_layer_types(["sliding_attention"] * 3 + ["full_attention"], full=full,
                                            sliding=sliding) * 8
    for tokens in (1000, 4096, 32768):
        assert mm.kv_cache_bytes(shape, context_len=tokens) == states.cache_bytes(layers, tokens=tokens)
        assert mm.kv_cache_bytes(shape, context_len=tokens, after_prefill=True) == states.cache_bytes(
            layers, tokens=tokens, after_prefill=True)
    # 32,768 tokens: 8 full layers x 32,768 + 24 sliding x 4,096 tokens, 2 x 8 x 128 values of 2 B each
    assert mm.kv_cache_bytes(shape, context_len=32768) == (8 * 32768 + 24 * 4096) * 2 * 8 * 128 * 2


def test_apertus_caches_every_layer_in_full():
    shape = mm.PRESETS["apertus-8b"]
    layers = [states.FullAttention(kv_heads=8, head_dim=128)] * 32
    assert mm.kv_cache_bytes(shape, context_len=8192, batch_size=2) == states.cache_bytes(layers, tokens=8192, batch=2)


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(TINY))
def test_the_cache_transformers_fills_is_memmath_s(torch, transformers, model_type):
    config = TINY[model_type]
    shape = mm.from_hf_config(config)
    for tokens, steps in ((12, 0), (12, 5), (5, 1)):
        expected = mm.kv_cache_bytes(shape, context_len=tokens + steps, after_prefill=steps == 0)
        assert _filled_cache_bytes(torch, transformers, config, tokens, steps) == expected, (tokens, steps)


# ---- 4. activations and refusals --------------------------------------------------------------------------------
STEPPED = {  # tiny models stepped on the CPU; the second of each (its own widths, the training DynamicCache on) was
    # measured after the trace steps were written against the first
    "apertus": dict(TINY["apertus"], vocab_size=512, hidden_size=64, intermediate_size=96, use_cache=False),
    "apertus-wider": dict(TINY["apertus"], vocab_size=512, hidden_size=96, intermediate_size=200,
                          num_attention_heads=6, num_key_value_heads=3, use_cache=True),
    # two blocks, the first sliding over 16 of the 64 tokens (SDPA gets its mask), the second full
    "cohere2": dict(TINY["cohere2"], vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    head_dim=None, sliding_window=16, use_cache=False),
    # four blocks, Cohere2Config's every-fourth full, a window beyond the sequence
    "cohere2-wider": dict(TINY["cohere2"], vocab_size=512, hidden_size=96, intermediate_size=200,
                          num_attention_heads=6, num_key_value_heads=3, head_dim=None, sliding_window=128,
                          sliding_window_pattern=None, use_cache=True),
}


def _stepped(name):
    return {k: v for k, v in STEPPED[name].items() if v is not None}


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", sorted(STEPPED))
def test_saved_activations_and_peak_are_what_a_cpu_step_measures(torch, transformers, peft, name, method, precision,
                                                                 attention):
    """Two AdamW steps on the CPU (b 2, s 64, as validation/measure.py runs its grid): the bytes saved for backward
    equal memmath's trace to the byte and the steady step's peak is within 1%. Full finetuning trains xIELU's
    alpha_p and alpha_n (their products keep x and expm1(min(x, eps)) - x) and Cohere 2's LayerNorm weights; LoRA
    on q and v leaves them frozen."""
    config = _stepped(name)
    measured = two_cpu_steps(torch, transformers, peft, config, precision=precision, method=method, attention=attention)
    shape = mm.from_hf_config(config)
    assert shape.architecture.traced
    saved, peak = predicted_step(shape, precision=precision, method=method, attention=attention)
    assert measured["saved_bytes"] == saved
    assert abs(peak / measured["peak_step2_bytes"] - 1) < 0.01


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", sorted(STEPPED))
def test_a_checkpointed_step_peaks_within_five_percent(torch, transformers, peft, name, method, precision):
    """With gradient checkpointing (transformers' non-reentrant default) the recomputed block's backward is
    peak.py's working set, with four MLP-wide gradients for xIELU: within 5%, as the sliding-window families'
    checkpointed steps (tests/test_sliding_window.py); Apertus measured 0.9-4.2% low, Cohere 2 1.0-3.9%, LLaMA of
    the same widths 0.5-4.6%."""
    config = _stepped(name)
    measured = two_cpu_steps(torch, transformers, peft, config, precision=precision, method=method, attention="sdpa",
                             checkpointing=True)
    _, peak = predicted_step(mm.from_hf_config(config), precision=precision, method=method, attention="sdpa",
                             checkpointing=True)
    assert abs(peak / measured["peak_step2_bytes"] - 1) < 0.05


def test_an_activation_other_than_xielu_is_refused_by_name():
    with pytest.raises(ValueError, match="hidden_act.*xielu"):
        mm.from_hf_config(dict(PUBLISHED_CONFIGS["Apertus-8B-2509"], hidden_act="silu"))


# ---- 5. a prefill's working set ---------------------------------------------------------------------------------
PREFILLED = {  # tiny configs of the widths validation/inference_working_set.py measures LLaMA at
    "cohere2": dict(model_type="cohere2", sliding_window=64, sliding_window_pattern=2),  # the window in reach
    "cohere2-window-beyond": dict(model_type="cohere2", sliding_window=4096),  # SDPA builds no sliding mask
    "apertus": dict(model_type="apertus"),
    "apertus-wider": dict(model_type="apertus", intermediate_size=1024),
}


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("seq_len, batch", [(256, 1), (384, 3), (320, 2)])
@pytest.mark.parametrize("name", sorted(PREFILLED))
def test_prefill_working_set_is_what_a_cpu_prefill_measures(torch, transformers, name, attention, seq_len, batch):
    """One prefill (bf16, logits_to_keep=1, as generate runs it), every storage counted as validation/
    inference_working_set.py counts it: the peak less the cache is memmath's working set within 0.5%. Cohere 2 adds
    its sliding-window mask (an e b s^2 one under eager; under SDPA a (1, 1, s, s) bool one once s reaches the
    window), Apertus' xIELU its temporaries; written against s 256, 512 and 384 at I 688, s 320 and I 1,024
    measured after."""
    fields = dict(dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, vocab_size=32000,
                       num_key_value_heads=2, intermediate_size=688, pad_token_id=0, bos_token_id=1, eos_token_id=2),
                  **PREFILLED[name])
    model, weights = prefill_model(torch, transformers, fields, attention)
    measured, predicted = prefill_working_set(torch, model, weights, fields, attention, seq_len, batch)
    assert abs(predicted / measured - 1) < 0.005

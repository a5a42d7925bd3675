"""The dense, chunked and linear-attention families (SmolLM3, Granite 3.x, ...), each against transformers 5.24 and
peft 0.21 themselves: the parameter count and bytes of the flagship's published config built on the meta device,
peft's LoRA adapters on a tiny model, and the KV cache transformers fills on a tiny model's forward pass.

Expected values come from transformers and peft (built here), from memmath/states.py's per-layer cache rules (each
measured in tests/test_states.py) and from the model cards' published totals."""

from __future__ import annotations

import pytest

import memmath as mm
from memmath import states
from validation.published_configs import PUBLISHED_CONFIGS

FLAGSHIPS = {"smollm3": "SmolLM3-3B", "granite": "granite-3.3-8b-instruct"}
TINY = {
    "smollm3": dict(model_type="smollm3", vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, no_rope_layer_interval=2, pad_token_id=0,
                    bos_token_id=1, eos_token_id=2),
    "granite": dict(model_type="granite", vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, embedding_multiplier=12.0,
                    residual_multiplier=0.22, attention_multiplier=0.125, logits_scaling=4.0),
}


def _build(torch, transformers, config, dtype=None):
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype)


def _bytes_by_dtype(model) -> dict:
    found = {}
    for p in model.parameters():
        found[p.dtype] = found.get(p.dtype, 0) + p.numel() * p.element_size()
    return found


# ---- 1. tensors: transformers' own count and bytes, on the meta device ----------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(FLAGSHIPS))
def test_the_flagship_counts_and_weighs_as_transformers_builds_it(torch, transformers, model_type):
    config = PUBLISHED_CONFIGS[FLAGSHIPS[model_type]]
    model = _build(torch, transformers, config, dtype=torch.bfloat16)
    shape = mm.from_hf_config(config)
    params = list(model.parameters())
    assert shape.n_params == sum(p.numel() for p in params)
    assert _bytes_by_dtype(model) == {torch.bfloat16: 2 * shape.n_params}
    ours = sorted(tuple(t.shape) for g in ("embeddings", "layer", "final_norm", "head")
                  for t in shape.tensors(g) for _ in range(shape.n_layers if g == "layer" else 1))
    assert ours == sorted(tuple(p.shape) for p in params)


def test_the_flagships_are_near_their_model_cards():
    # SmolLM3-3B's card: 3B (3.08B on its Hub page); Granite-3.3-8B: 8.17B on its Hub page.
    assert mm.from_hf_config(PUBLISHED_CONFIGS["SmolLM3-3B"]).n_params == 3_075_098_624
    assert mm.from_hf_config(PUBLISHED_CONFIGS["granite-3.3-8b-instruct"]).n_params == 8_170_864_640


# ---- 2. peft's adapters on a tiny model ------------------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("targets", ["all-linear", "q+v", "q+k+v+o+gate+up+down"])
@pytest.mark.parametrize("model_type", sorted(TINY))
def test_lora_adapters_are_peft_s(torch, transformers, peft, model_type, targets):
    config, rank = TINY[model_type], 4
    model = _build(torch, transformers, config)
    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
             "down": "down_proj"}
    modules = "all-linear" if targets == "all-linear" else [names[t] for t in targets.split("+")]
    lora = peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=modules, lora_alpha=8))
    theirs = [tuple(p.shape) for n, p in lora.named_parameters() if p.requires_grad and ".layers.0." in n]
    shape = mm.from_hf_config(config)
    ours = []
    for _, d_in, d_out, k in shape.lora_adapters("all" if targets == "all-linear" else tuple(targets.split("+"))):
        ours += [(k * rank, d_in), (d_out, k * rank)]
    assert ours == theirs


# ---- 3. the KV cache: states.py's layers, and what transformers fills ------------------------------------------
def test_smollm3_caches_every_layer_in_full(model_type="smollm3"):
    shape = mm.from_hf_config(PUBLISHED_CONFIGS["SmolLM3-3B"])
    layers = [states.FullAttention(kv_heads=4, head_dim=128)] * 36  # NoPE layers cache their keys too
    for tokens in (1, 4096, 65536):
        assert mm.kv_cache_bytes(shape, context_len=tokens) == states.cache_bytes(layers, tokens=tokens)


def test_smollm3_with_sliding_window_slides_its_nope_layers():
    config = dict(PUBLISHED_CONFIGS["SmolLM3-3B"], use_sliding_window=True, sliding_window=4096)
    shape = mm.from_hf_config(config)
    assert shape.layer_types == ("full_attention",) * 3 + ("sliding_attention",) + shape.layer_types[4:]
    full = states.FullAttention(kv_heads=4, head_dim=128)
    sliding = states.SlidingAttention(kv_heads=4, head_dim=128, window=4096)
    layers = states.layers_from_layer_types(shape.layer_types, full=full, sliding=sliding)
    assert mm.kv_cache_bytes(shape, context_len=32768) == states.cache_bytes(layers, tokens=32768)


def test_granite_caches_as_llama():
    shape = mm.from_hf_config(PUBLISHED_CONFIGS["granite-3.3-8b-instruct"])
    layers = [states.FullAttention(kv_heads=8, head_dim=128)] * 40
    assert mm.kv_cache_bytes(shape, context_len=8192, batch_size=2) == states.cache_bytes(layers, tokens=8192,
                                                                                        batch=2)


def _filled_cache_bytes(torch, transformers, config, tokens, decode_steps):
    """Bytes of the keys' and values' storages in the DynamicCache after a prefill of `tokens` tokens and
    decode_steps single-token steps, on the CPU in bf16."""
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.bfloat16).eval()
    cache = transformers.DynamicCache(config=hf_config)
    with torch.no_grad():
        ids = torch.randint(0, config["vocab_size"], (1, tokens))
        model(ids, past_key_values=cache, use_cache=True)
        for step in range(decode_steps):
            model(ids[:, :1], past_key_values=cache, use_cache=True)
    storages = {}
    for layer in cache.layers:
        for t in (layer.keys, layer.values):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(storages.values())


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(TINY))
def test_the_cache_transformers_fills_is_memmath_s(torch, transformers, model_type):
    config = dict(TINY[model_type])
    if model_type == "smollm3":  # its NoPE layers slide: both kinds of layer are filled
        config.update(use_sliding_window=True, sliding_window=8)
    shape = mm.from_hf_config(config)
    for tokens, steps in ((12, 0), (12, 5), (5, 1)):
        expected = mm.kv_cache_bytes(shape, context_len=tokens + steps, after_prefill=steps == 0)
        assert _filled_cache_bytes(torch, transformers, config, tokens, steps) == expected, (tokens, steps)


# ---- 4. activations and refusals --------------------------------------------------------------------------------
@pytest.mark.parametrize("model_type", sorted(FLAGSHIPS))
def test_activations_are_the_textbook_s_until_traced(model_type):
    assert not mm.from_hf_config(PUBLISHED_CONFIGS[FLAGSHIPS[model_type]]).architecture.traced


def test_a_malformed_no_rope_list_is_refused_by_name():
    with pytest.raises(ValueError, match="no_rope_layers"):
        mm.from_hf_config(dict(PUBLISHED_CONFIGS["SmolLM3-3B"], no_rope_layers=[1, 0]))
    with pytest.raises(ValueError, match="no_rope_layer_interval"):
        mm.from_hf_config(dict(PUBLISHED_CONFIGS["SmolLM3-3B"], no_rope_layer_interval=0))

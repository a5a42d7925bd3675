"""The dense, chunked and linear-attention families (SmolLM3, Granite 3.x, ...), each against transformers 5.24 and
peft 0.21 themselves: the parameter count and bytes of the flagship's published config built on the meta device,
peft's LoRA adapters on a tiny model, and the KV cache transformers fills on a tiny model's forward pass.

Expected values come from transformers and peft (built here), from memmath/states.py's per-layer cache rules (each
measured in tests/test_states.py) and from the model cards' published totals."""

from __future__ import annotations

import pytest

import memmath as mm
from family_checks import adapter_shapes, assert_built_like_transformers, prefill_model, prefill_working_set
from memmath import states
from validation.published_configs import PUBLISHED_CONFIGS

FLAGSHIPS = {"smollm3": "SmolLM3-3B", "granite": "granite-3.3-8b-instruct", "llama4_text": "Llama-4-Scout-17B-16E"}
TINY = {
    "smollm3": dict(model_type="smollm3", vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, no_rope_layer_interval=2, pad_token_id=0,
                    bos_token_id=1, eos_token_id=2),
    "granite": dict(model_type="granite", vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, embedding_multiplier=12.0,
                    residual_multiplier=0.22, attention_multiplier=0.125, logits_scaling=4.0),
    # h != 2I and I != h, so that peft's reading of each 3-D expert tensor shows in the adapter shapes
    "llama4_text": dict(model_type="llama4_text", vocab_size=96, hidden_size=32, intermediate_size=24,
                        intermediate_size_mlp=48, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=8, num_local_experts=4, num_experts_per_tok=1, attention_chunk_size=8,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2),
}


def _build(torch, transformers, config, dtype=None):
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype)


# ---- 1. tensors: transformers' own count and bytes, on the meta device ----------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(FLAGSHIPS))
def test_the_flagship_counts_and_weighs_as_transformers_builds_it(torch, transformers, model_type):
    config = PUBLISHED_CONFIGS[FLAGSHIPS[model_type]]
    model = _build(torch, transformers, config, dtype=torch.bfloat16)
    assert_built_like_transformers(torch, model, config)


def test_the_flagships_are_near_their_model_cards():
    # SmolLM3-3B's card: 3B (3.08B on its Hub page); Granite-3.3-8B: 8.17B on its Hub page.
    assert mm.from_hf_config(PUBLISHED_CONFIGS["SmolLM3-3B"]).n_params == 3_075_098_624
    assert mm.from_hf_config(PUBLISHED_CONFIGS["granite-3.3-8b-instruct"]).n_params == 8_170_864_640
    # Llama 4 Scout's card: 17B active, 109B total with its vision tower. Its text model by hand (h 5,120, 48
    # blocks, 40 query and 8 key/value heads of 128, 16 experts of 8,192, one per token, a shared expert of 8,192,
    # vocabulary 202,048, untied head): per block attention 2 x 5,120^2 + 2 x 5,120 x 1,024 = 62,914,560, two
    # norms 10,240, router 16 x 5,120 = 81,920, shared expert and each routed expert 3 x 5,120 x 8,192 =
    # 125,829,120. All: 48 x (62,914,560 + 10,240 + 81,920 + 17 x 125,829,120) + 2 x 202,048 x 5,120 + 5,120 =
    # 107,769,861,120; per token (one expert): 48 x (63,006,720 + 2 x 125,829,120) + 2,068,976,640 =
    # 17,172,894,720.
    scout = mm.from_hf_config(PUBLISHED_CONFIGS["Llama-4-Scout-17B-16E"])
    assert (scout.n_params, scout.active_params) == (107_769_861_120, 17_172_894_720)
    assert round(scout.active_params / 1e9) == 17 and abs(scout.n_params / 109e9 - 1) < 0.02
    assert mm.PRESETS["llama-4-scout"].active_params == scout.active_params


# ---- 2. peft's adapters on a tiny model ------------------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("targets", ["all-linear", "q+v", "q+k+v+o+gate+up+down"])
@pytest.mark.parametrize("model_type", sorted(TINY))
def test_lora_adapters_are_peft_s(torch, transformers, peft, model_type, targets):
    config, rank = TINY[model_type], 4
    theirs, ours = adapter_shapes(peft, _build(torch, transformers, config), config, targets, rank)
    assert ours == theirs


@pytest.mark.live
@pytest.mark.parametrize("targets", ["router", "experts", "router+experts", "gate+up+down"])
def test_llama4_router_experts_and_shared_expert_adapters_are_peft_s(torch, transformers, peft, targets):
    """The router is an nn.Linear (target_modules); the routed experts are 3-D Parameters (target_parameters, with
    gate_up_proj's rank doubled by rank_pattern, as peft's conversion does for the fused gate and up)."""
    config, rank = TINY["llama4_text"], 2
    model = _build(torch, transformers, config)
    names = {"router": ["router"], "gate": ["gate_proj"], "up": ["up_proj"], "down": ["down_proj"]}
    modules = [m for t in targets.split("+") if t != "experts" for m in names[t]]
    extra = {}
    if "experts" in targets:
        extra = dict(target_parameters=["experts.gate_up_proj", "experts.down_proj"],
                     rank_pattern={r".*\.gate_up_proj": 2 * rank}, alpha_pattern={r".*\.gate_up_proj": 4 * rank})
    lora = peft.get_peft_model(model, peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=modules or None,
                                                      **extra))
    theirs = [tuple(p.shape) for n, p in lora.named_parameters() if p.requires_grad and ".layers.0." in n]
    ours = []
    for _, d_in, d_out, k in mm.from_hf_config(config).lora_adapters(tuple(targets.split("+"))):
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
    # llama4_text: its rotary layers are chunked (8 tokens), its NoPE layer full
    shape = mm.from_hf_config(config)
    for tokens, steps in ((12, 0), (12, 5), (5, 1)):
        expected = mm.kv_cache_bytes(shape, context_len=tokens + steps, after_prefill=steps == 0)
        assert _filled_cache_bytes(torch, transformers, config, tokens, steps) == expected, (tokens, steps)


def test_llama4_caches_chunked_layers_as_states_chunked_attention():
    shape = mm.from_hf_config(PUBLISHED_CONFIGS["Llama-4-Scout-17B-16E"])
    rope = [int((i + 1) % 4 != 0) for i in range(48)]  # Llama4TextConfig: every fourth layer NoPE
    types = ["chunked_attention" if r else "full_attention" for r in rope]
    layers = states.layers_from_layer_types(types, full=states.FullAttention(kv_heads=8, head_dim=128),
                                            chunked=states.ChunkedAttention(kv_heads=8, head_dim=128, chunk=8192))
    for tokens in (1000, 8192, 131072):
        assert mm.kv_cache_bytes(shape, context_len=tokens) == states.cache_bytes(layers, tokens=tokens)
        assert mm.kv_cache_bytes(shape, context_len=tokens, after_prefill=True) == states.cache_bytes(
            layers, tokens=tokens, after_prefill=True)
    # 131,072 tokens: 12 full layers x 131,072 + 36 chunked x 8,192 tokens, 2 x 8 x 128 values of 2 B each
    assert mm.kv_cache_bytes(shape, context_len=131072) == (12 * 131072 + 36 * 8192) * 2 * 8 * 128 * 2
    # what `memmath infer` prices: the preset's cache, the same layers
    served = mm.inference_memory("llama-4-scout", context_len=131072, batch_size=2)
    assert served.kv_cache == states.cache_bytes(layers, tokens=131072, batch=2)


# ---- 4. activations and refusals --------------------------------------------------------------------------------
def test_llama4_s_activations_are_traced():
    # Llama4TextMoe runs every token through every expert: its own trace (tests/test_families_llama4_trace.py)
    scout = mm.from_hf_config(PUBLISHED_CONFIGS["Llama-4-Scout-17B-16E"])
    assert scout.architecture.traced and not scout.mixed  # rotary and NoPE blocks: layouts of the trace alone


STEPPED = {  # tiny configs stepped on the CPU: LLaMA's widths, each family's own fields
    "granite": dict(TINY["granite"], vocab_size=512, hidden_size=64, intermediate_size=96, use_cache=False),
    "smollm3": dict(TINY["smollm3"], vocab_size=512, hidden_size=64, intermediate_size=96, use_cache=False),
    "smollm3-sliding": dict(TINY["smollm3"], vocab_size=512, hidden_size=64, intermediate_size=96, use_cache=False,
                            use_sliding_window=True, sliding_window=16),
}


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(STEPPED))
def test_saved_activations_and_peak_are_what_a_cpu_step_measures(torch, transformers, name, precision, attention):
    """Two AdamW steps on the CPU (b 2, s 64, as validation/measure.py runs its grid): the bytes saved for backward
    equal memmath's trace to the byte, and the steady step's peak is within 1%. Granite's multipliers and
    SmolLM3's NoPE layers (and, with use_sliding_window, its sliding NoPE layers' masks) save what the rotary
    decoder's trace says."""
    from memmath.hf_activations import activation_parts
    from memmath.recipes import get_recipe
    from memmath.stepping import step_twice
    from validation.measure import configure_torch, make_optimizer

    configure_torch()
    config = STEPPED[name]
    hf_config = transformers.AutoConfig.for_model(config["model_type"],
                                                  **{k: v for k, v in config.items() if k != "model_type"})
    hf_config._attn_implementation = attention
    torch.manual_seed(0)
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype).train()
    ids = torch.randint(1, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    measured = step_twice(model, make_optimizer(list(model.parameters()), "adamw"),
                          {"input_ids": ids, "labels": ids.clone()}, model.model.layers)
    shape = mm.from_hf_config(config)
    assert shape.architecture.traced
    settings = dict(method=mm.Full(), seq_len=64, batch_size=2, dropout=False, attention=attention,
                    checkpointing=False, device="cpu")
    parts = activation_parts(shape, recipe=get_recipe(precision), **settings)
    assert measured["saved_bytes"] == parts.estimate.total
    peak = mm.peak_memory(shape, precision=precision, optimizer="adamw", activations="transformers", **settings)
    assert abs(peak.total / measured["peak_step2_bytes"] - 1) < 0.01


def test_a_malformed_no_rope_list_is_refused_by_name():
    with pytest.raises(ValueError, match="no_rope_layers"):
        mm.from_hf_config(dict(PUBLISHED_CONFIGS["SmolLM3-3B"], no_rope_layers=[1, 0]))
    with pytest.raises(ValueError, match="no_rope_layer_interval"):
        mm.from_hf_config(dict(PUBLISHED_CONFIGS["SmolLM3-3B"], no_rope_layer_interval=0))


def test_llama4_maverick_s_interleaved_dense_blocks_are_a_second_layout():
    scout = PUBLISHED_CONFIGS["Llama-4-Scout-17B-16E"]
    maverick = mm.from_hf_config(dict(scout, interleave_moe_layer_step=2, num_local_experts=128))
    # moe_layers given: those blocks sparse, the rest dense (Llama4TextConfig keeps a given list)
    given = mm.from_hf_config(dict(scout, moe_layers=[1, 3]))
    assert [blocks for layout, blocks in given.layouts() if layout.n_experts] == [(1, 3)]
    assert maverick.n_params == 400_711_848_960  # transformers' count on the meta device (test_block_layouts.py)
    with pytest.raises(ValueError, match="moe_layers"):
        mm.from_hf_config(dict(scout, moe_layers=[1, 48]))
    with pytest.raises(ValueError, match="output_router_logits"):
        mm.from_hf_config(dict(scout, output_router_logits=True))


def test_llama4_s_vision_wrapper_is_refused_by_name():
    with pytest.raises(ValueError, match="Llama 4: its vision model .* llama4_text"):
        mm.from_hf_config({"model_type": "llama4", "text_config": PUBLISHED_CONFIGS["Llama-4-Scout-17B-16E"],
                           "vision_config": {}})


# ---- refused by name: what transformers builds but memmath does not model yet -----------------------------------
@pytest.mark.parametrize("model_type, reason", [
    ("jamba", r"Mamba \(v1\) layers beside attention layers"),
])
def test_hybrid_and_linear_attention_types_are_refused_with_their_reason(model_type, reason):
    from memmath.architectures import architecture

    for call in (lambda: mm.from_hf_config({"model_type": model_type}), lambda: architecture(model_type)):
        with pytest.raises(ValueError, match=f"'{model_type}' is not supported: .*{reason}.*--traced"):
            call()


@pytest.mark.live
@pytest.mark.parametrize("model_type", ["jamba"])
def test_the_refused_types_are_ones_transformers_builds(transformers, model_type):
    assert transformers.AutoConfig.for_model(model_type).model_type == model_type


def test_memmath_infer_refuses_jamba_in_one_line_with_exit_2(tmp_path, capsys):
    from memmath import cli

    path = tmp_path / "config.json"
    path.write_text('{"model_type": "jamba", "num_hidden_layers": 48}')
    assert cli.main(["infer", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Mamba (v1)" in err and "--traced" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.live
@pytest.mark.parametrize("config", [
    dict(TINY["smollm3"], num_hidden_layers=8),
    dict(TINY["smollm3"], num_hidden_layers=8, use_sliding_window=True, sliding_window=100),
    dict(TINY["smollm3"], num_hidden_layers=4, use_sliding_window=True, sliding_window=100,
         no_rope_layers=[0, 1, 0, 1]),
    dict(TINY["llama4_text"], num_hidden_layers=8),
    dict(TINY["llama4_text"], num_hidden_layers=8, no_rope_layers=[]),
    dict(TINY["llama4_text"], num_hidden_layers=4, no_rope_layers=[0, 1, 1, 0]),
    dict(TINY["llama4_text"], num_hidden_layers=4, attention_chunk_size=None),
], ids=["smollm3", "smollm3-sliding", "smollm3-given", "llama4", "llama4-empty-list", "llama4-given",
        "llama4-no-chunks"])
def test_each_layer_s_window_is_the_one_transformers_config_derives(transformers, config):
    """The tokens each layer's cache keeps, from transformers' own config class (its __post_init__ derives
    layer_types from no_rope_layers), against memmath's attention_windows."""
    hf = transformers.AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items()
                                                                    if k != "model_type"})
    window = {"full_attention": None, "sliding_attention": getattr(hf, "sliding_window", None),
              "chunked_attention": getattr(hf, "attention_chunk_size", None)}
    assert mm.from_hf_config(config).attention_windows == tuple(window[t] for t in hf.layer_types)


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("seq_len, batch, experts, width, chunk", [
    (256, 1, 4, 176, 8192), (512, 2, 4, 176, 8192),  # the cases prefill_phases was written against
    (384, 3, 8, 96, 8192), (128, 2, 8, 96, 8192), (320, 1, 4, 176, None),  # held out: measured afterwards
])
def test_llama4_prefill_working_set_is_what_a_cpu_prefill_measures(torch, transformers, attention, seq_len, batch,
                                                                   experts, width, chunk):
    """One prefill of a tiny Llama 4 (bf16, logits_to_keep=1, as generate runs it), every storage counted as
    validation/inference_working_set.py counts it: the peak less the cache is memmath's working set within 0.5%
    (Llama4TextMoe runs every token through every expert: routed_in and the experts' outputs are E x t rows)."""
    fields = dict(model_type="llama4_text", hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                  vocab_size=32000, num_key_value_heads=2, head_dim=32, intermediate_size=width,
                  intermediate_size_mlp=688, num_local_experts=experts, num_experts_per_tok=1,
                  attention_chunk_size=chunk, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model, weights = prefill_model(torch, transformers, fields, attention)
    measured, predicted = prefill_working_set(torch, model, weights, fields, attention, seq_len, batch)
    assert abs(predicted / measured - 1) < 0.005


@pytest.mark.live
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("model_type, width, seq_len, batch", [
    ("llama", 2048, 64, 2), ("llama", 4096, 48, 1), ("qwen2", 2048, 64, 2), ("llama", 256, 256, 1)])
def test_an_eager_prefill_holds_the_probabilities_through_the_mlp(torch, transformers, attention, model_type, width,
                                                                  seq_len, batch):
    """LlamaDecoderLayer's `hidden_states, _ = self.self_attn(...)` keeps eager's attention probabilities (heads x b x
    s^2 in bf16) alive through the block's MLP, so where the MLP phase is the prefill's peak (an MLP 16-32 times the
    hidden size at 48-64 tokens) they are part of it (measured after _decoder.rotary_prefill added them: 131,072 B
    at 8 heads, b 2, s 64). What remains is the prompt's int64 token ids and position ids, which this measurement
    makes inside its count and validation/inference_working_set.py's does not (8 x b x s + 8 x s bytes)."""
    fields = dict(model_type=model_type, hidden_size=128, num_hidden_layers=2, num_attention_heads=8,
                  num_key_value_heads=2, intermediate_size=width, vocab_size=32000, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2)
    model, weights = prefill_model(torch, transformers, fields, attention)
    measured, predicted = prefill_working_set(torch, model, weights, fields, attention, seq_len, batch)
    assert measured - predicted == 8 * batch * seq_len + 8 * seq_len


PREFILLED = {  # tiny configs of the widths validation/inference_working_set.py measures LLaMA at
    "smollm3": dict(model_type="smollm3", no_rope_layer_interval=2),
    "smollm3-sliding": dict(model_type="smollm3", no_rope_layer_interval=2, use_sliding_window=True,
                            sliding_window=64),
    "granite": dict(model_type="granite", embedding_multiplier=12.0, residual_multiplier=0.22,
                    attention_multiplier=0.125, logits_scaling=4.0),
    # OLMo 2: OLMo 3's prefill without its windows, ported after these cases measured the rotary decoder's phases
    # 6-8% high under SDPA and 1-1.5% under eager (the normed input copies OLMo's post-norm never makes)
    "olmo2": dict(model_type="olmo2"),
}


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("seq_len, batch", [(256, 1), (512, 2), (384, 3)])
@pytest.mark.parametrize("name", sorted(PREFILLED))
def test_dense_prefill_working_set_is_what_a_cpu_prefill_measures(torch, transformers, name, attention, seq_len,
                                                                  batch):
    """As the Llama 4 test: SmolLM3's sliding NoPE layers add their mask (an e b s^2 one under eager, a (1, 1, s, s)
    bool one under SDPA: written against s 256 and 512, s 384 at batch 3 measured afterwards); Granite's
    multipliers add nothing that outlives its statement."""
    fields = dict(PREFILLED[name], hidden_size=256, num_hidden_layers=4, num_attention_heads=8, vocab_size=32000,
                  num_key_value_heads=2, intermediate_size=688, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model, weights = prefill_model(torch, transformers, fields, attention)
    measured, predicted = prefill_working_set(torch, model, weights, fields, attention, seq_len, batch)
    assert abs(predicted / measured - 1) < 0.005


# ---- OLMo 3 (olmo3) and Seed-OSS (seed_oss) ---------------------------------------------------------------------
SMALL = {  # small widths, with each type's own fields
    "olmo3": dict(model_type="olmo3", vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, sliding_window=8, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2),
    "seed_oss": dict(model_type="seed_oss", vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, pad_token_id=0, bos_token_id=1,
                     eos_token_id=2),
}
COUNTED = {  # published configs at full size, the small ones, and the fields that change a tensor
    "Olmo-3-1025-7B": PUBLISHED_CONFIGS["Olmo-3-1025-7B"],
    "Seed-OSS-36B-Base": PUBLISHED_CONFIGS["Seed-OSS-36B-Base"],
    "olmo3-small": SMALL["olmo3"],
    "olmo3-small-biases-tied-head_dim": dict(SMALL["olmo3"], attention_bias=True, tie_word_embeddings=True,
                                             head_dim=12),
    "seed_oss-small": SMALL["seed_oss"],
    "seed_oss-small-no-biases": dict(SMALL["seed_oss"], attention_bias=False),
    "seed_oss-small-all-biases-tied": dict(SMALL["seed_oss"], attention_out_bias=True, mlp_bias=True,
                                           tie_word_embeddings=True),
    "seed_oss-small-defaults": dict(model_type="seed_oss", vocab_size=96, hidden_size=32, intermediate_size=48,
                                    num_hidden_layers=2, num_attention_heads=8),  # head_dim 128, 8 kv heads
}


@pytest.mark.live
@pytest.mark.parametrize("name", sorted(COUNTED))
def test_olmo3_and_seed_oss_count_and_weigh_as_transformers_builds_them(torch, transformers, name):
    config = COUNTED[name]
    model = _build(torch, transformers, config, dtype=torch.bfloat16)
    assert_built_like_transformers(torch, model, config)


def test_olmo3_and_seed_oss_counts_by_hand():
    # OLMo 3 7B (h 4,096, 32 blocks of 32 heads of 128, I 11,008, vocabulary 100,278, untied head): per block q, k,
    # v, o 4 x 4,096^2 = 67,108,864, MLP 3 x 4,096 x 11,008 = 135,266,304, q/k norms and two post norms 4 x 4,096
    # = 16,384; all: 32 x 202,391,552 + 2 x 100,278 x 4,096 + 4,096 = 7,298,011,136 (the Hub page: 7.3B).
    assert mm.PRESETS["olmo-3-7b"].n_params == 7_298_011_136
    # Seed-OSS-36B (h 5,120, 64 blocks, 80 query and 8 key/value heads of 128, I 27,648, vocabulary 155,136): per
    # block q 5,120 x 10,240 + 10,240 bias, k and v 5,120 x 1,024 + 1,024 each, o 10,240 x 5,120 without bias
    # (115,355,648), MLP 3 x 5,120 x 27,648 = 424,673,280, two norms 10,240; all: 64 x 540,039,168 +
    # 2 x 155,136 x 5,120 + 5,120 = 36,151,104,512 (the model's name: 36B).
    assert mm.PRESETS["seed-oss-36b"].n_params == 36_151_104_512


@pytest.mark.live
@pytest.mark.parametrize("targets", ["all-linear", "q+v", "q+k+v+o+gate+up+down"])
@pytest.mark.parametrize("model_type", sorted(SMALL))
def test_olmo3_and_seed_oss_lora_adapters_are_peft_s(torch, transformers, peft, model_type, targets):
    config, rank = SMALL[model_type], 4
    theirs, ours = adapter_shapes(peft, _build(torch, transformers, config), config, targets, rank)
    assert ours == theirs


@pytest.mark.live
@pytest.mark.parametrize("config", [
    SMALL["olmo3"], dict(SMALL["olmo3"], num_hidden_layers=9), dict(SMALL["olmo3"], sliding_window=None),
    dict(SMALL["olmo3"], layer_types=["full_attention", "sliding_attention"] * 2),
    {k: v for k, v in SMALL["olmo3"].items() if k != "sliding_window"}, SMALL["seed_oss"],
], ids=["olmo3", "olmo3-9-blocks", "olmo3-no-window", "olmo3-given", "olmo3-default-window", "seed_oss"])
def test_olmo3_and_seed_oss_windows_are_the_ones_transformers_config_derives(transformers, config):
    """Olmo3Config.__post_init__ makes every fourth block full when layer_types is absent; a sliding layer keeps
    sliding_window tokens (none when it is null: DynamicCache builds full layers); Seed-OSS has no window."""
    hf = transformers.AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items()
                                                                    if k != "model_type"})
    window = getattr(hf, "sliding_window", None)
    types = getattr(hf, "layer_types", None) or ["full_attention"] * hf.num_hidden_layers
    assert mm.from_hf_config(config).attention_windows == tuple(
        window if t == "sliding_attention" else None for t in types)


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(SMALL))
def test_olmo3_and_seed_oss_caches_are_what_transformers_fills(torch, transformers, model_type):
    # OLMo 3's sliding layers (window 8) keep the whole prompt after the prefill and 8 tokens once decoding
    shape = mm.from_hf_config(SMALL[model_type])
    for tokens, steps in ((12, 0), (12, 5), (5, 1)):
        expected = mm.kv_cache_bytes(shape, context_len=tokens + steps, after_prefill=steps == 0)
        assert _filled_cache_bytes(torch, transformers, SMALL[model_type], tokens, steps) == expected, (tokens, steps)


def test_olmo3_caches_its_sliding_layers_as_states_sliding_attention():
    shape = mm.PRESETS["olmo-3-7b"]
    full = states.FullAttention(kv_heads=32, head_dim=128)
    sliding = states.SlidingAttention(kv_heads=32, head_dim=128, window=4096)
    layers = states.layers_from_layer_types(shape.layer_types, full=full, sliding=sliding)
    for tokens in (1000, 4096, 32768):
        assert mm.kv_cache_bytes(shape, context_len=tokens) == states.cache_bytes(layers, tokens=tokens)
    # 32,768 tokens: 8 full layers x 32,768 + 24 sliding x 4,096 tokens, 2 x 32 x 128 values of 2 B each
    assert mm.kv_cache_bytes(shape, context_len=32768) == (8 * 32768 + 24 * 4096) * 2 * 32 * 128 * 2
    served = mm.inference_memory("olmo-3-7b", context_len=32768, batch_size=2)
    assert served.kv_cache == states.cache_bytes(layers, tokens=32768, batch=2)


def test_seed_oss_caches_every_layer_in_full():
    shape = mm.PRESETS["seed-oss-36b"]
    layers = [states.FullAttention(kv_heads=8, head_dim=128)] * 64
    assert mm.kv_cache_bytes(shape, context_len=32768) == states.cache_bytes(layers, tokens=32768)
    assert mm.kv_cache_bytes(shape, context_len=32768) == 64 * 32768 * 2 * 8 * 128 * 2  # 8 GiB


def test_seed_oss_s_bias_and_dropout_fields_are_read_or_refused_by_name():
    published = PUBLISHED_CONFIGS["Seed-OSS-36B-Base"]
    with pytest.raises(ValueError, match="'attention_out_bias' is true while 'attention_bias' is false"):
        mm.from_hf_config(dict(published, attention_bias=False, attention_out_bias=True))
    with pytest.raises(ValueError, match="attention_dropout are > 0 but residual_dropout is 0"):
        mm.from_hf_config(dict(published, residual_dropout=0.0))
    assert mm.from_hf_config(published).dropout_p == 0.1  # transformers trains Seed-OSS with dropout on
    assert mm.from_hf_config(dict(published, attention_dropout=0.0, residual_dropout=0.0)).dropout_p == 0.0


_STEP_WIDTHS = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2, use_cache=False)
_HELD_OUT_WIDTHS = dict(vocab_size=384, hidden_size=48, intermediate_size=80, num_hidden_layers=5,
                        num_attention_heads=6, num_key_value_heads=3, pad_token_id=0, bos_token_id=1, eos_token_id=2)
STEPPED_NEW = {  # name: (config, seq_len, batch); the trace was written before the first four were stepped
    "olmo3": (dict(_STEP_WIDTHS, model_type="olmo3", sliding_window=16), 64, 2),
    "olmo3-below-window": (dict(_STEP_WIDTHS, model_type="olmo3", sliding_window=128), 64, 2),
    "seed_oss": (dict(_STEP_WIDTHS, model_type="seed_oss", head_dim=16, attention_dropout=0.0,
                      residual_dropout=0.0), 64, 2),
    "seed_oss-dropout": (dict(_STEP_WIDTHS, model_type="seed_oss", head_dim=16), 64, 2),
    # held out: stepped after OLMo 3's second fp32 rotary pair was added
    "olmo3-given-types": (dict(_HELD_OUT_WIDTHS, model_type="olmo3", sliding_window=24, use_cache=False,
                               layer_types=["full_attention", "sliding_attention", "sliding_attention",
                                            "full_attention", "sliding_attention"]), 40, 3),
    "olmo3-use-cache": (dict(_HELD_OUT_WIDTHS, model_type="olmo3", sliding_window=24, use_cache=True), 40, 3),
    "seed_oss-use-cache-dropout": (dict(_HELD_OUT_WIDTHS, model_type="seed_oss", head_dim=8, use_cache=True), 40, 3),
    "seed_oss-every-bias": (dict(_HELD_OUT_WIDTHS, model_type="seed_oss", head_dim=8, use_cache=False,
                                 attention_out_bias=True, mlp_bias=True, attention_dropout=0.0,
                                 residual_dropout=0.0), 40, 3),
}


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(STEPPED_NEW))
def test_olmo3_and_seed_oss_save_what_a_cpu_step_measures(torch, transformers, name, precision, attention):
    """As the dense test above: two AdamW steps on the CPU save what the trace says, to the byte, and the steady
    step's peak is within 1%. OLMo 3 saves one fp32 rotary pair per layer type; Seed-OSS with dropout on (its
    config's 0.1) saves the masks of its residual dropouts and, under SDPA, the math kernel's."""
    from memmath.hf_activations import activation_parts
    from memmath.recipes import get_recipe
    from memmath.stepping import step_twice
    from validation.measure import configure_torch, make_optimizer

    configure_torch()
    config, seq_len, batch = STEPPED_NEW[name]
    hf_config = transformers.AutoConfig.for_model(config["model_type"],
                                                  **{k: v for k, v in config.items() if k != "model_type"})
    hf_config._attn_implementation = attention
    torch.manual_seed(0)
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype).train()
    ids = torch.randint(1, config["vocab_size"], (batch, seq_len), generator=torch.Generator().manual_seed(1))
    measured = step_twice(model, make_optimizer(list(model.parameters()), "adamw"),
                          {"input_ids": ids, "labels": ids.clone()}, model.model.layers)
    shape = mm.from_hf_config(config)
    assert shape.architecture.traced
    settings = dict(method=mm.Full(), seq_len=seq_len, batch_size=batch, dropout=shape.dropout_p > 0,
                    attention=attention, checkpointing=False, device="cpu")
    parts = activation_parts(shape, recipe=get_recipe(precision), **settings)
    assert measured["saved_bytes"] == parts.estimate.total
    peak = mm.peak_memory(shape, precision=precision, optimizer="adamw", activations="transformers", **settings)
    assert abs(peak.total / measured["peak_step2_bytes"] - 1) < 0.01


PREFILLED_NEW = {  # (fields beyond LLaMA's measured widths, [(seq_len, batch)])
    "olmo3": (dict(model_type="olmo3", sliding_window=300), [(256, 1), (512, 2), (384, 3)]),
    # held out: measured after the prediction was written (window 100: 96 tokens below it, 320 and 640 past it)
    "olmo3-held-out": (dict(model_type="olmo3", sliding_window=100, hidden_size=192, num_attention_heads=6,
                            intermediate_size=512, num_hidden_layers=5), [(320, 2), (96, 4), (640, 1)]),
    "seed_oss": (dict(model_type="seed_oss", head_dim=32), [(256, 1), (512, 2), (384, 3)]),
}


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("name", sorted(PREFILLED_NEW))
def test_olmo3_and_seed_oss_prefill_working_set_is_what_a_cpu_prefill_measures(torch, transformers, name, attention):
    """As the dense test above: OLMo 3 without the normed copy of each sublayer's input (its norms follow the
    sublayers), with its fp32 rotary pair per layer type and, under SDPA past the window, the bool sliding mask;
    Seed-OSS as LLaMA (its biases and dropout add nothing to a prefill)."""
    extra, cases = PREFILLED_NEW[name]
    fields = dict(dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, vocab_size=32000,
                       num_key_value_heads=2, intermediate_size=688, pad_token_id=0, bos_token_id=1, eos_token_id=2),
                  **extra)
    model, weights = prefill_model(torch, transformers, fields, attention)
    for seq_len, batch in cases:
        measured, predicted = prefill_working_set(torch, model, weights, fields, attention, seq_len, batch)
        assert abs(predicted / measured - 1) < 0.005, (seq_len, batch)


# ---- ERNIE 4.5 (dense) and EXAONE 4.0 ----------------------------------------------------------------------------
SMALL_D = {  # small widths, each type's own fields; EXAONE's blocks slide over 8 tokens, every second one full
    "ernie4_5": dict(model_type="ernie4_5", vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, pad_token_id=0, bos_token_id=1,
                     eos_token_id=2),
    "ernie4_5-bias": dict(model_type="ernie4_5", vocab_size=96, hidden_size=32, intermediate_size=48,
                          num_hidden_layers=2, num_attention_heads=4, use_bias=True, tie_word_embeddings=False,
                          head_dim=None, num_key_value_heads=None, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "exaone4": dict(model_type="exaone4", vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, sliding_window=8, sliding_window_pattern=2,
                    pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "exaone4-tied": dict(model_type="exaone4", vocab_size=96, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                         tie_word_embeddings=True, sliding_window=None, layer_types=["full_attention"] * 3,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2),
}


@pytest.mark.live
@pytest.mark.parametrize("name", ["ERNIE-4.5-0.3B-PT", "EXAONE-4.0-32B", "EXAONE-4.0-1.2B", *sorted(SMALL_D)])
def test_ernie_and_exaone_count_and_weigh_as_transformers_builds_them(torch, transformers, name):
    config = PUBLISHED_CONFIGS.get(name) or SMALL_D[name]
    model = _build(torch, transformers, config, dtype=torch.bfloat16)
    assert_built_like_transformers(torch, model, config)
    # and a block's names: EXAONE's norms after its sublayers (no input_layernorm), ERNIE's use_bias biases
    block = [(n.split(".layers.0.", 1)[1], tuple(p.shape)) for n, p in model.named_parameters() if ".layers.0." in n]
    assert sorted((t.name, tuple(t.shape)) for t in mm.from_hf_config(config).tensors("layer")) == sorted(block)


def test_ernie_and_exaone_by_hand():
    # ERNIE-4.5-0.3B (h 1,024, 18 blocks, 16 query and 2 key/value heads of 128, MLP 3,072, vocabulary 103,424, tied):
    # per block 2 x 1,024 x 2,048 + 2 x 1,024 x 256 + 3 x 1,024 x 3,072 + 2 x 1,024 = 14,157,824; all
    # 18 x 14,157,824 + 103,424 x 1,024 + 1,024 = 360,748,032 (card: 0.36B).
    assert mm.PRESETS["ernie-4.5-0.3b"].n_params == 360_748_032
    # EXAONE-4.0-32B (h 5,120, 64 blocks, 40 query and 8 key/value heads of 128, MLP 27,392, vocabulary 102,400,
    # untied): per block 2 x 5,120^2 + 2 x 5,120 x 1,024 + 2 x 128 (q/k norms) + 3 x 5,120 x 27,392 + 2 x 5,120
    # = 483,666,176; without the embeddings 64 x 483,666,176 + 5,120 = 30,954,640,384 (card: 30.95B); with them
    # + 2 x 102,400 x 5,120 = 32,003,216,384.
    exaone = mm.PRESETS["exaone-4.0-32b"]
    assert exaone.n_params == 32_003_216_384
    assert exaone.n_params - 2 * 102400 * 5120 == 30_954_640_384
    # use_bias adds a bias to all seven projections: (a + 2 kv) d + h + 2 I + h per block
    ernie = PUBLISHED_CONFIGS["ERNIE-4.5-0.3B-PT"]
    biased = mm.from_hf_config(dict(ernie, use_bias=True)).n_params - mm.from_hf_config(ernie).n_params
    assert biased == 18 * ((16 + 2 * 2) * 128 + 1024 + 2 * 3072 + 1024)


@pytest.mark.live
@pytest.mark.parametrize("targets", ["all-linear", "q+v", "q+k+v+o+gate+up+down"])
@pytest.mark.parametrize("name", sorted(SMALL_D))
def test_ernie_and_exaone_lora_adapters_are_peft_s(torch, transformers, peft, name, targets):
    config, rank = SMALL_D[name], 4
    theirs, ours = adapter_shapes(peft, _build(torch, transformers, config), config, targets, rank)
    assert ours == theirs


@pytest.mark.live
@pytest.mark.parametrize("name", sorted(SMALL_D))
def test_the_cache_transformers_fills_for_ernie_and_exaone_is_memmath_s(torch, transformers, name):
    # EXAONE's sliding blocks keep at most 8 tokens once decoding (DynamicSlidingWindowLayer), its full ones all
    config = SMALL_D[name]
    shape = mm.from_hf_config(config)
    for tokens, steps in ((12, 0), (12, 5), (5, 1)):
        expected = mm.kv_cache_bytes(shape, context_len=tokens + steps, after_prefill=steps == 0)
        assert _filled_cache_bytes(torch, transformers, config, tokens, steps) == expected, (tokens, steps)


@pytest.mark.live
@pytest.mark.parametrize("extra", [dict(), dict(sliding_window_pattern=3), dict(sliding_window_pattern=1),
                                   dict(sliding_window=100, num_hidden_layers=7)], ids=["default", "3", "1", "7"])
def test_each_exaone_layer_s_window_is_the_one_its_config_derives(transformers, extra):
    config = dict({k: v for k, v in SMALL_D["exaone4"].items() if k != "sliding_window_pattern"}, **extra)
    hf = transformers.AutoConfig.for_model("exaone4", **{k: v for k, v in config.items() if k != "model_type"})
    window = {"full_attention": None, "sliding_attention": hf.sliding_window}
    assert mm.from_hf_config(config).attention_windows == tuple(window[t] for t in hf.layer_types)


def test_exaone_4_32b_caches_three_sliding_blocks_to_one_full():
    sliding = states.SlidingAttention(kv_heads=8, head_dim=128, window=4096)
    full = states.FullAttention(kv_heads=8, head_dim=128)
    layers = [sliding, sliding, sliding, full] * 16
    shape = mm.PRESETS["exaone-4.0-32b"]
    for tokens in (1000, 4096, 32768):
        assert mm.kv_cache_bytes(shape, context_len=tokens) == states.cache_bytes(layers, tokens=tokens)
    # 32,768 tokens: 16 full blocks x 32,768 + 48 sliding x 4,096 tokens, 2 x 8 x 128 values of 2 B each
    assert mm.kv_cache_bytes(shape, context_len=32768) == (16 * 32768 + 48 * 4096) * 2 * 8 * 128 * 2
    assert mm.inference_memory("exaone-4.0-32b", context_len=32768).kv_cache == states.cache_bytes(layers,
                                                                                                tokens=32768)


def test_exaone_s_string_pattern_without_layer_types_is_refused_by_name():
    # Exaone4Config.__post_init__ computes (i + 1) % sliding_window_pattern: "LLLG" raises a TypeError there
    config = {k: v for k, v in PUBLISHED_CONFIGS["EXAONE-4.0-32B"].items() if k != "layer_types"}
    with pytest.raises(ValueError, match="sliding_window_pattern.*'LLLG'.*give layer_types"):
        mm.from_hf_config(config)
    assert mm.from_hf_config(dict(config, sliding_window_pattern=4)) == mm.from_hf_config(
        PUBLISHED_CONFIGS["EXAONE-4.0-32B"])


@pytest.mark.live
def test_ernie_has_no_attention_dropout_whatever_its_config_says(torch, transformers):
    config = dict(SMALL_D["ernie4_5"], attention_dropout=0.1)
    model = _build(torch, transformers, config)
    assert model.model.layers[0].self_attn.attention_dropout == 0.0  # Ernie4_5Attention fixes it
    assert mm.from_hf_config(config).dropout_p == 0.0


PREFILLED_D = {  # h 256, 8 heads, 4 blocks: "-0.3b" has ERNIE-4.5-0.3B's ratios (a d = 2h, I = 3h), where rotating q
    # in fp32 is the peak; EXAONE's "-narrow" MLP (I = h / 2) leaves the peak to a norm on the MLP's output
    "ernie4_5": dict(model_type="ernie4_5", head_dim=32, intermediate_size=688),
    "ernie4_5-0.3b": dict(model_type="ernie4_5", head_dim=64, intermediate_size=768),
    "exaone4": dict(model_type="exaone4", sliding_window=64, sliding_window_pattern=2, intermediate_size=688),
    "exaone4-full": dict(model_type="exaone4", sliding_window=None, layer_types=["full_attention"] * 4,
                         intermediate_size=688),
    "exaone4-narrow": dict(model_type="exaone4", sliding_window=64, sliding_window_pattern=2, intermediate_size=128),
}


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("seq_len, batch", [(256, 1), (384, 3)])
@pytest.mark.parametrize("name", sorted(PREFILLED_D))
def test_ernie_and_exaone_prefill_working_set_is_what_a_cpu_prefill_measures(torch, transformers, name, attention,
                                                                            seq_len, batch):
    """One bf16 prefill counted as validation/inference_working_set.py counts it (ERNIE's fp32 rotary, EXAONE's
    norms after its sublayers): within 0.3% of the peak less the cache (h 512 widths at s 320 and 640 held out, the
    same). The narrow EXAONE case 0.6%: the int64 ids and position ids (16 B per token) that the rotary decoder's
    phases leave out weigh more beside its small MLP."""
    fields = dict(PREFILLED_D[name], hidden_size=256, num_hidden_layers=4, num_attention_heads=8, vocab_size=32000,
                  num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model, weights = prefill_model(torch, transformers, fields, attention)
    measured, predicted = prefill_working_set(torch, model, weights, fields, attention, seq_len, batch)
    assert -(0.006 if name == "exaone4-narrow" else 0.003) < predicted / measured - 1 <= 0


STEPPED_D = {  # small ERNIEs and EXAONEs stepped on the CPU: LLaMA's widths; ERNIE grouped, or multi-head with
    # biases; EXAONE with every second block sliding over 16 tokens, or none
    "ernie4_5": dict(SMALL_D["ernie4_5"], vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=4),
    "ernie4_5-bias": dict(SMALL_D["ernie4_5-bias"], vocab_size=512, hidden_size=64, intermediate_size=96,
                          num_hidden_layers=4),
    "ernie4_5-cache": dict(SMALL_D["ernie4_5"], vocab_size=512, hidden_size=64, intermediate_size=96,
                           num_hidden_layers=4, use_cache=True),
    "exaone4": dict(SMALL_D["exaone4"], vocab_size=512, hidden_size=64, intermediate_size=96, sliding_window=16),
    "exaone4-full": dict(SMALL_D["exaone4"], vocab_size=512, hidden_size=64, intermediate_size=96,
                         sliding_window=None, layer_types=["full_attention"] * 4),
    "exaone4-cache": dict(SMALL_D["exaone4"], vocab_size=512, hidden_size=64, intermediate_size=96, sliding_window=16,
                          use_cache=True),
}


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("name, lora", [("ernie4_5", False), ("ernie4_5-bias", False), ("ernie4_5-cache", False),
                                        ("ernie4_5", True), ("exaone4", False), ("exaone4-full", False),
                                        ("exaone4-cache", False), ("exaone4", True)])
def test_ernie_and_exaone_save_what_a_cpu_step_measures(torch, transformers, peft, name, lora, precision, attention):
    """Two AdamW steps (b 2, s 64, as validation/measure.py runs its grid): the bytes saved for backward equal the
    trace to the byte, ERNIE's fp32 rotary (its repeated tables saved in each block) and Exaone4DecoderLayer's (norms
    on the sublayers' outputs, q/k norms per head, NoPE full blocks), and the steady step's peak is within 1%.
    Measured after each block was written: every saved-bytes case exact."""
    from memmath.hf_activations import activation_parts
    from memmath.recipes import get_recipe
    from memmath.stepping import step_twice
    from validation.measure import configure_torch, make_optimizer

    configure_torch()
    config = STEPPED_D[name]
    hf_config = transformers.AutoConfig.for_model(config["model_type"],
                                                  **{k: v for k, v in config.items() if k != "model_type"})
    hf_config._attn_implementation = attention
    torch.manual_seed(0)
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
    blocks, method = model.model.layers, mm.Full()
    if lora:
        model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"], lora_alpha=16))
        method = mm.LoRA(rank=8, targets=("q", "v"))
    model.train()
    ids = torch.randint(1, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    measured = step_twice(model, make_optimizer([p for p in model.parameters() if p.requires_grad], "adamw"),
                          {"input_ids": ids, "labels": ids.clone()}, blocks)
    shape = mm.from_hf_config(config)
    assert shape.architecture.traced
    settings = dict(method=method, seq_len=64, batch_size=2, dropout=False, attention=attention,
                    checkpointing=False, device="cpu")
    parts = activation_parts(shape, recipe=get_recipe(precision), **settings)
    assert measured["saved_bytes"] == parts.estimate.total
    peak = mm.peak_memory(shape, precision=precision, optimizer="adamw", activations="transformers", **settings)
    assert abs(peak.total / measured["peak_step2_bytes"] - 1) < 0.01


@pytest.mark.parametrize("preset", ["ernie-4.5-0.3b", "exaone-4.0-32b"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_ernie_and_exaone_prefill_sweeps_as_each_context_alone(preset, attention):
    import numpy as np

    contexts = np.array([128, 4096, 32768])
    swept = mm.inference.working_set_bytes(mm.PRESETS[preset], context_len=contexts, attention=attention)
    alone = [mm.inference.working_set_bytes(mm.PRESETS[preset], context_len=int(c), attention=attention)
             for c in contexts]
    assert list(swept) == alone

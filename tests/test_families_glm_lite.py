"""GLM-4.7-Flash (model_type glm4_moe_lite) against transformers 5.24 and peft 0.21 themselves: the parameter count and
tensors of Glm4MoeLiteConfig's defaults (GLM-4.7-Flash's shape; no published config.json at hand) and of small widths
built on the meta device, block by block where mlp_layer_types mixes dense and sparse blocks in any order, the reader,
peft's adapters, the latent cache transformers fills, the tensor-parallel plan, and CPU steps and prefills of small
models measured after the record was written (held out).

Expected values come from transformers and peft (built here), the model card's totals and hand derivations in the
comments."""

from __future__ import annotations

import json

import pytest

import memmath as mm
from family_checks import held_for_backward
from memmath.architectures import ARCHITECTURES, _latent
from memmath.architectures._refused import REFUSED_MODEL_TYPES
from tests.test_families_dense import _build
from validation.published_configs import CONFIG_CLASS_DEFAULTS

FLASH = CONFIG_CLASS_DEFAULTS["Glm4MoeLiteConfig"]
# three blocks (the class's default mlp_layer_types: block 0 dense, 1 and 2 sparse); widths that differ from each
# other so that a width read in the wrong place shows; 4 experts in 2 groups
TINY = dict(model_type="glm4_moe_lite", num_hidden_layers=3, hidden_size=64, intermediate_size=96,
            moe_intermediate_size=24, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
            num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8,
            qk_rope_head_dim=4, v_head_dim=20, vocab_size=512, n_group=2, topk_group=1, pad_token_id=0,
            bos_token_id=1, eos_token_id=2)


def _blocks(model, layers):
    """[(name, shape), ...] of each block of transformers' model, in parameters() order."""
    out = []
    for i in range(layers):
        prefix = f"model.layers.{i}."
        out.append([(n.removeprefix(prefix), tuple(p.shape)) for n, p in model.named_parameters()
                    if n.startswith(prefix)])
    return out


def _ours(shape):
    """memmath's [(name, shape), ...] of each block, by the layout each block has."""
    by_block = {}
    for layout, blocks in shape.layouts():
        for i in blocks:
            by_block[i] = [(t.name, t.shape) for t in layout.tensors("layer")]
    return [by_block[i] for i in range(shape.n_layers)]


# ---- 1. tensors: transformers' own count, names and order, on the meta device ------------------------------------
@pytest.mark.live
def test_the_config_class_defaults_count_as_transformers_builds_them(torch, transformers):
    from family_checks import assert_built_like_transformers

    model = _build(torch, transformers, FLASH, dtype=torch.bfloat16)
    # bf16 but for the router's weight, which _keep_in_fp32_modules_strict keeps in fp32 (not modelled: the
    # record's docstring says so); assert_built_like_transformers wants every parameter in bf16, so compare here
    shape = mm.from_hf_config(FLASH)
    assert shape.n_params == sum(p.numel() for p in model.parameters()) == 29_943_390_976
    wide = {n for n, p in model.named_parameters() if p.dtype != torch.bfloat16}
    assert wide == {f"model.layers.{i}.mlp.gate.weight" for i in range(1, 47)}
    assert _ours(shape)[:2] == _blocks(model, 2) and _ours(shape)[46] == _blocks(model, 47)[46]
    model = _build(torch, transformers, FLASH)
    assert_built_like_transformers(torch, model.to(torch.bfloat16), FLASH)


def test_the_defaults_by_hand_are_the_card_s_30b_a3b():
    # per block: q_a_proj 2,048 x 768, q_a_layernorm 768, q_b_proj 768 x 20 x 256 (qk_head_dim 192 + 64),
    # kv_a_proj_with_mqa 2,048 x 576 (512 + 64), kv_a_layernorm 512, kv_b_proj 512 x 20 x 448 (192 + 256), o_proj
    # 20 x 256 x 2,048 = 1,572,864 + 768 + 3,932,160 + 1,179,648 + 512 + 4,587,520 + 10,485,760 = 21,759,232; two
    # norms 4,096. The dense block 0: 3 x 2,048 x 10,240 = 62,914,560; a sparse block: 64 experts of 3 x 2,048 x 1,536
    # = 603,979,776, the router 64 x 2,048 = 131,072, one shared expert 3 x 2,048 x 1,536 = 9,437,184.
    # Embedding and head 2 x 154,880 x 2,048, the final norm 2,048.
    attention = 21_759_232 + 4_096
    dense, sparse = attention + 62_914_560, attention + 603_979_776 + 131_072 + 9_437_184
    total = dense + 46 * sparse + 2 * 154_880 * 2_048 + 2_048
    shape = mm.from_hf_config(FLASH)
    assert shape.n_params == total == 29_943_390_976  # the card's 30B
    # active: 4 of the 64 experts a token; 60 x 3 x 2,048 x 1,536 a sparse block left out
    assert shape.active_params == total - 46 * 60 * 3 * 2_048 * 1_536 == 3_896_763_136
    # the card's "A3B" leaves out the embedding and the head: 3,262,382,080
    assert abs((shape.active_params - 2 * 154_880 * 2_048) / 3e9 - 1) < 0.1


@pytest.mark.live
@pytest.mark.parametrize("changes", [
    {}, dict(mlp_layer_types=["sparse", "dense", "sparse"]), dict(mlp_layer_types=["dense"] * 3),
    dict(mlp_layer_types=["sparse"] * 3), dict(q_lora_rank=None), dict(attention_bias=True),
    dict(tie_word_embeddings=True), dict(n_shared_experts=2), dict(n_shared_experts=0),
    dict(first_k_dense_replace=2),  # not a Glm4MoeLiteConfig field: the class's mlp_layer_types still apply
])
def test_a_small_width_counts_block_by_block_as_transformers_builds_it(torch, transformers, changes):
    config = dict(TINY, **changes)
    model = _build(torch, transformers, config)
    shape = mm.from_hf_config(config)
    assert shape.n_params == sum(p.numel() for p in model.parameters())
    assert _ours(shape) == _blocks(model, 3)


@pytest.mark.live
def test_the_router_buffer_is_no_parameter(torch, transformers):
    # Glm4MoeLiteTopkRouter's e_score_correction_bias: an fp32 buffer of E values in each sparse block
    model = _build(torch, transformers, TINY)
    assert [n for n, _ in model.named_buffers() if n.endswith("e_score_correction_bias")] == [
        f"model.layers.{i}.mlp.gate.e_score_correction_bias" for i in (1, 2)]


# ---- 2. the reader -----------------------------------------------------------------------------------------------
def test_mlp_layer_types_name_the_dense_blocks():
    def layouts(config):
        return [(layout.n_experts, blocks) for layout, blocks in mm.from_hf_config(config).layouts()]

    # Glm4MoeLiteConfig.__post_init__: the first block dense, the others sparse
    assert layouts(TINY) == [(4, (1, 2)), (0, (0,))] or layouts(TINY) == [(0, (0,)), (4, (1, 2))]
    assert sorted(layouts(dict(TINY, mlp_layer_types=["sparse", "dense", "sparse"]))) == [(0, (1,)), (4, (0, 2))]
    assert layouts(dict(TINY, mlp_layer_types=["dense"] * 3)) == [(0, (0, 1, 2))]
    assert layouts(dict(TINY, mlp_layer_types=["sparse"] * 3)) == [(4, (0, 1, 2))]
    assert sorted(layouts(dict(TINY, first_k_dense_replace=2))) == sorted(layouts(TINY))


def test_the_latent_widths_and_head_dim_are_read():
    shape = mm.from_hf_config(FLASH)
    assert shape.latent == _latent.LatentDims(q_lora_rank=768, kv_lora_rank=512, qk_nope_head_dim=192,
                                              qk_rope_head_dim=64, v_head_dim=256)
    # Glm4MoeLiteConfig.attribute_map: head_dim is qk_rope_head_dim; 2,048 is not 20 heads of anything
    assert shape.head_dim == 64 and mm.from_hf_config({"model_type": "glm4_moe_lite"}).n_params == shape.n_params


@pytest.mark.parametrize("changes, field", [
    (dict(mlp_layer_types=["dense", "sparse"]), "mlp_layer_types"),
    (dict(mlp_layer_types=["dense", "moe", "sparse"]), "mlp_layer_types"),
    (dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}),
     "partial_rotary_factor"),
    (dict(num_key_value_heads=2), "num_key_value_heads"), (dict(n_group=3), "n_group"),
    (dict(output_router_logits=True), "output_router_logits"), (dict(kv_lora_rank=0), "kv_lora_rank"),
])
def test_what_it_cannot_model_is_refused_by_field(changes, field):
    with pytest.raises(ValueError, match=field):
        mm.from_hf_config(dict(TINY, **changes))


@pytest.mark.live
def test_a_partial_rotary_factor_fails_in_transformers_too(torch, transformers):
    # why it is refused: Glm4MoeLiteRotaryEmbedding makes half the frequencies, the attention rotates every
    # qk_rope_head_dim value (at 8 of them; at TINY's 4 the one frequency left broadcasts over both pairs)
    config = dict(TINY, partial_rotary_factor=0.5, qk_rope_head_dim=8)
    hf = transformers.AutoConfig.for_model("glm4_moe_lite", **{k: v for k, v in config.items() if k != "model_type"})
    model = transformers.AutoModelForCausalLM.from_config(hf).eval()
    with pytest.raises(RuntimeError):
        model(torch.randint(0, 512, (1, 8)))


def test_glm4_moe_lite_is_a_record_not_a_refusal():
    assert "glm4_moe_lite" in ARCHITECTURES and "glm4_moe_lite" not in REFUSED_MODEL_TYPES


@pytest.mark.parametrize("command", ["train", "infer"])
def test_the_command_line_reads_the_defaults(tmp_path, capsys, command):
    from memmath import cli

    path = tmp_path / "config.json"
    path.write_text(json.dumps(FLASH))
    assert cli.main([command, str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the text wraps where the file's path ends
    assert "29,943,390,976" in out and "Traceback" not in out


# ---- 3. peft's adapters --------------------------------------------------------------------------------------------
GLM_LITE_TARGETS = {  # memmath targets -> peft 0.21's LoraConfig target_modules on glm4_moe_lite
    "all": "all-linear", ("q", "v"): ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"],
    ("o",): ["o_proj"], ("router",): ["gate"], ("experts",): ["gate_proj", "up_proj", "down_proj"],
}


@pytest.mark.live
@pytest.mark.parametrize("block", [0, 1])
@pytest.mark.parametrize("targets", list(GLM_LITE_TARGETS), ids=str)
def test_lora_adapters_are_peft_s(torch, transformers, targets, block):
    # peft converts glm4_moe_lite as qwen2_moe (transformers' conversion_mapping.py): gate_proj, up_proj and down_proj
    # become the routed experts' parameters (no name reaches a dense block's MLP or the shared experts), "gate" the
    # router's weight; block 0 is dense, block 1 sparse
    import peft

    shape = mm.from_hf_config(dict(TINY, mlp_layer_types=["dense", "sparse", "sparse"]))
    layout = next(layout for layout, blocks in shape.layouts() if block in blocks)
    lora = peft.get_peft_model(_build(torch, transformers, TINY),
                               peft.LoraConfig(r=4, lora_dropout=0.0, target_modules=GLM_LITE_TARGETS[targets]))
    theirs = [tuple(p.shape) for n, p in lora.named_parameters() if p.requires_grad and f".layers.{block}." in n]
    if block == 0 and targets in (("router",), ("experts",)):
        assert theirs == []
        with pytest.raises(ValueError, match="dense block has no"):
            layout.lora_adapters(targets)
        return
    ours = []
    for adapter in layout.lora_adapters(targets):
        ours += [(adapter.rank_factor * 4, adapter.d_in), (adapter.d_out, adapter.rank_factor * 4)]
    assert ours == theirs


# ---- 4. the latent cache and the tensor-parallel plan --------------------------------------------------------------
def test_glm_4_7_flash_caches_576_values_a_token_a_layer():
    # 47 blocks x (512 + 64) values x 32,768 tokens x 2 B = 1,774,190,592 B, whichever MLP a block has
    assert mm.kv_cache_bytes(mm.from_hf_config(FLASH), context_len=32_768, kv_format="bf16") == 1_774_190_592


@pytest.mark.live
def test_the_cache_transformers_fills_is_memmath_s(torch, transformers):
    shape = mm.from_hf_config(TINY)
    hf_config = transformers.AutoConfig.for_model("glm4_moe_lite", **{k: v for k, v in TINY.items()
                                                                     if k != "model_type"})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.bfloat16).eval()
    for tokens, steps in ((12, 0), (5, 3)):
        cache = transformers.DynamicCache(config=hf_config)
        with torch.no_grad():
            ids = torch.randint(0, TINY["vocab_size"], (2, tokens))
            model(ids, cache=cache, use_cache=True)
            for _ in range(steps):
                model(ids[:, :1], cache=cache, use_cache=True)
        filled = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
        assert filled == mm.kv_cache_bytes(shape, context_len=tokens + steps, batch_size=2)


@pytest.mark.live
def test_the_tensor_parallel_plan_is_transformers_own(transformers):
    # every colwise/rowwise module of Glm4MoeLiteConfig.base_model_tp_plan but the routed experts (split by ep in
    # memmath/parallel.py); kv_a_proj_with_mqa's "mla_kv_a_proj" stays whole
    plan = transformers.Glm4MoeLiteConfig.base_model_tp_plan
    expected = {k: v for k, v in plan.items() if v in ("colwise", "rowwise") and ".experts" not in k}
    assert dict(ARCHITECTURES["glm4_moe_lite"].tp_plan) == expected


# ---- 5. activations: CPU steps measured after the record was written (held out) ------------------------------------
STEP_BASE = dict(TINY, use_cache=False)
STEPPED = {  # each measured in the eight settings below, the first time it ran: every one matched
    "mixed": STEP_BASE,  # the class's layout: block 0 dense, 1 and 2 sparse
    # a sparse block first, then a dense one; two shared experts; the training DynamicCache on
    "sparse-first": dict(STEP_BASE, mlp_layer_types=["sparse", "dense", "sparse"], n_shared_experts=2, use_cache=True),
    # wider, q_proj (no q_lora_rank), 8 experts in one group, 3 a token, rope_interleave off, no renormalizing
    "wider": dict(STEP_BASE, num_hidden_layers=2, hidden_size=96, num_attention_heads=6, num_key_value_heads=6,
                  n_routed_experts=8, n_group=1, num_experts_per_tok=3, moe_intermediate_size=40, kv_lora_rank=24,
                  qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, q_lora_rank=None, rope_interleave=False,
                  norm_topk_prob=False, mlp_layer_types=["sparse", "sparse"]),
    # qk_head_dim = v_head_dim (12): the CPU's SDPA runs its flash kernel; two dense blocks first
    "equal-widths": dict(STEP_BASE, v_head_dim=12, mlp_layer_types=["dense", "dense", "sparse"]),
    "sparse": dict(STEP_BASE, mlp_layer_types=["sparse"] * 3),
}




def _qv_modules(config):
    """peft's module names for memmath's q and v: the query path and the shared key/value path."""
    return sorted({a.module for a, _ in mm.from_hf_config(config).lora_adapter_copies(("q", "v"))})


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", ["mixed", "sparse-first", "wider", "equal-widths"])
def test_saved_activations_and_peak_are_what_a_cpu_step_measures(torch, transformers, peft, name, method, precision,
                                                                 attention):
    """What autograd holds when the forward returns equals memmath's trace to the byte (the recorder's count lies above
    it by what the routers' dead nodes saved); the steady step's peak is within 1% (measured: 0.16% or less)."""
    from family_checks import stepped_model
    from memmath.hf_activations import activation_parts
    from memmath.recipes import get_recipe
    from memmath.stepping import step_twice
    from validation.measure import make_optimizer

    config = STEPPED[name]
    shape = mm.from_hf_config(config)
    settings = dict(method=mm.Full() if method == "full" else mm.LoRA(rank=4, targets=("q", "v")), seq_len=64,
                    batch_size=2, dropout=False, attention=attention, checkpointing=False, device="cpu")
    traced = activation_parts(shape, recipe=get_recipe(precision), **settings).estimate.total
    run = dict(precision=precision, method=method, attention=attention)
    assert held_for_backward(torch, transformers, peft, config, targets=_qv_modules(config), **run) == traced
    model, blocks = stepped_model(torch, transformers, peft, config, lora_modules=_qv_modules(config), **run)
    params = [p for p in model.parameters() if p.requires_grad]
    ids = torch.randint(1, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    measured = step_twice(model, make_optimizer(params, "adamw"), {"input_ids": ids, "labels": ids.clone()}, blocks)
    assert measured["saved_bytes"] >= traced
    peak = mm.peak_memory(shape, precision=precision, optimizer="adamw", activations="transformers", **settings)
    assert abs(peak.total / measured["peak_step2_bytes"] - 1) < 0.01


def _ds_tiny(model_type):
    """DeepSeek's tiny MoE model, every block sparse (its router is the same code: _deepseek.router)."""
    config = {k: v for k, v in STEP_BASE.items() if k != "mlp_layer_types"}
    config.update(model_type=model_type, num_hidden_layers=2, first_k_dense_replace=0, n_shared_experts=2)
    if model_type == "deepseek_v2":
        config["topk_method"] = "group_limited_greedy"
    return config


LORA_TARGETS = {("router",): ["gate"], ("experts",): ["gate_proj", "up_proj", "down_proj"], "all": "all-linear"}


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("targets", list(LORA_TARGETS), ids=str)
@pytest.mark.parametrize("name", ["sparse", "wider", "deepseek_v3", "deepseek_v2"])
def test_lora_on_the_router_and_experts_is_held_as_traced(torch, transformers, peft, name, targets, precision):
    """peft's ParamWrapper on the fp32 router weight (W + BA kept when the router's input needs a gradient: found on
    these GLM-4.7-Flash models, then held out on DeepSeek-V3's and V2's, which share the router's code) and on the
    routed experts, and all-linear: what autograd holds equals the trace to the byte. Every block sparse: where a
    dense block comes first, which no router or expert target adapts, memmath's trace counts it as it counts an
    adapted block (about one block's activations over what is held)."""
    from memmath.hf_activations import activation_parts
    from memmath.recipes import get_recipe

    config = STEPPED[name] if name in STEPPED else _ds_tiny(name)
    held = held_for_backward(torch, transformers, peft, config, precision=precision, method="lora",
                              attention="sdpa", targets=LORA_TARGETS[targets])
    parts = activation_parts(mm.from_hf_config(config), recipe=get_recipe(precision),
                             method=mm.LoRA(rank=4, targets=targets), seq_len=64, batch_size=2, dropout=False,
                             attention="sdpa", checkpointing=False, device="cpu")
    assert held == parts.estimate.total


@pytest.mark.live
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", sorted(STEPPED))
def test_a_checkpointed_step_peaks_within_five_percent(torch, transformers, peft, name, method, precision):
    """With gradient checkpointing the recomputed block's backward is peak.py's working set: within 5% (measured 0.1%
    to 3.9%). wider's LoRA steps (top-3 routing) were 5.8% (fp32) and 6.3% (bf16) under the measured peaks while
    peak.py priced the recomputed block's MLP gradients at t x intermediate_size; with the MoE block's backward priced
    at its experts' moments (_moe.backward_phase, fitted on GLM-4.5's steps) they are -1.0% and -1.2%."""
    from family_checks import stepped_model
    from memmath.stepping import step_twice
    from validation.measure import make_optimizer

    config = STEPPED[name]
    model, blocks = stepped_model(torch, transformers, peft, config, precision=precision, method=method,
                                  attention="sdpa", checkpointing=True, lora_modules=_qv_modules(config))
    params = [p for p in model.parameters() if p.requires_grad]
    ids = torch.randint(1, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    measured = step_twice(model, make_optimizer(params, "adamw"), {"input_ids": ids, "labels": ids.clone()}, blocks)
    peak = mm.peak_memory(mm.from_hf_config(config), precision=precision, optimizer="adamw",
                          activations="transformers", method=mm.Full() if method == "full" else
                          mm.LoRA(rank=4, targets=("q", "v")), seq_len=64, batch_size=2, dropout=False,
                          attention="sdpa", checkpointing=True, device="cpu")
    assert abs(peak.total / measured["peak_step2_bytes"] - 1) < 0.05


# ---- 6. a prefill's working set ---------------------------------------------------------------------------------
PREFILL_BASE = dict(model_type="glm4_moe_lite", hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                    num_key_value_heads=8, vocab_size=32000, intermediate_size=688, moe_intermediate_size=176,
                    n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
                    q_lora_rank=96, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
                    pad_token_id=0, bos_token_id=1, eos_token_id=2)
EQUAL = dict(v_head_dim=48)  # qk_head_dim 48 too: the CPU's SDPA runs its flash kernel, as a GPU's fused ones do
PREFILLS = {  # name: (changes, attention, s, b); DeepSeek-V3's cases and two layouts of its own, all held out
    "eager": ({}, "eager", 256, 1), "sdpa": (EQUAL, "sdpa", 256, 1), "sdpa-b3": (EQUAL, "sdpa", 384, 3),
    "eager-b2-sparse-first": (dict(mlp_layer_types=["sparse", "dense", "sparse", "sparse"]), "eager", 320, 2),
    "all-dense-sdpa": (dict(EQUAL, q_lora_rank=None, mlp_layer_types=["dense"] * 4), "sdpa", 320, 2),
    "sixteen-heads": (dict(EQUAL, num_attention_heads=16, num_key_value_heads=16, qk_rope_head_dim=32,
                           qk_nope_head_dim=16, n_routed_experts=4, num_experts_per_tok=1), "sdpa", 512, 1),
    "wide-shared": (dict(EQUAL, n_shared_experts=4, n_routed_experts=4, moe_intermediate_size=64), "sdpa", 256, 2),
}


@pytest.mark.live
@pytest.mark.parametrize("name", list(PREFILLS))
def test_prefill_working_set_is_what_a_cpu_prefill_measures(torch, transformers, name):
    """One bf16 prefill (logits_to_keep=1, as generate runs it), every storage counted as validation/
    inference_working_set.py counts it: the peak less the latent cache is DeepSeek-V3's working set
    (_deepseek.prefill_phases) plus the token ids (int64, b x s) and the position ids (int64, s) it leaves out, to the
    byte (within 0.2% without them)."""
    from family_checks import prefill_model, prefill_working_set

    changes, attention, seq_len, batch = PREFILLS[name]
    fields = dict(PREFILL_BASE, **changes)
    model, weights = prefill_model(torch, transformers, fields, attention)
    measured, predicted = prefill_working_set(torch, model, weights, fields, attention, seq_len, batch)
    assert measured - predicted == 8 * seq_len * batch + 8 * seq_len

"""Models whose blocks come in more than one layout (ModelShape.block_layouts): Qwen2-MoE and Qwen3-MoE with dense
blocks (mlp_only_layers, decoder_sparse_step) and Llama 4 Maverick (a dense block between mixture-of-experts blocks).

Expected values: transformers 5.24's own build on the meta device (counts, tensor shapes), the model card (Llama 4
Maverick: 17B active, 400B total parameters), hand derivations in the comments, and two AdamW steps measured on the
CPU by memmath.stepping (recorded after the mixed-layout code was written: held out, not fitted)."""

from __future__ import annotations

import pytest

import memmath as mm
from family_checks import assert_built_like_transformers, predicted_step, two_cpu_steps
from validation.published_configs import LAYERED_CONFIGS, PUBLISHED_CONFIGS

# A tiny Qwen2-MoE: blocks 2 and 4 sparse by decoder_sparse_step 2, block 4 dense by mlp_only_layers (1-based), so
# blocks 1, 3 and 4 are Qwen2MoeMLP at intermediate_size and block 2 the sparse block with its shared expert.
QWEN2_MIXED = {"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 4,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "tie_word_embeddings": False,
               "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
               "shared_expert_intermediate_size": 96, "decoder_sparse_step": 2, "mlp_only_layers": [3],
               "norm_topk_prob": False, "use_sliding_window": False, "hidden_act": "silu", "use_cache": False}
# Qwen3-MoE whose last block is sparse: dense blocks 1 and 3 by decoder_sparse_step 2
QWEN3_MIXED = {"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512,
               "tie_word_embeddings": False, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
               "decoder_sparse_step": 2, "norm_topk_prob": True, "use_sliding_window": False, "hidden_act": "silu",
               "use_cache": False}
MAVERICK = dict(PUBLISHED_CONFIGS["Llama-4-Scout-17B-16E"], num_local_experts=128, interleave_moe_layer_step=2,
                use_qk_norm=False)  # meta-llama/Llama-4-Maverick-17B-128E's text_config differs from Scout's so


def _meta(torch, transformers, config):
    hf = transformers.AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items()
                                                                     if k != "model_type"})
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16)


def test_the_layouts_are_the_blocks_the_config_names():
    qwen2 = mm.from_hf_config(QWEN2_MIXED)
    assert [(layout.n_experts, blocks) for layout, blocks in qwen2.layouts()] == [(0, (0, 2, 3)), (4, (1,))]
    maverick = mm.from_hf_config(MAVERICK)
    # Llama4TextConfig: moe_layers = range(step - 1, layers, step), every second block from block 2
    assert [blocks for _, blocks in maverick.layouts()] == [tuple(range(0, 48, 2)), tuple(range(1, 48, 2))]
    assert maverick.block_layout(0).intermediate_size == 16384  # Llama4TextMLP at intermediate_size_mlp


@pytest.mark.live
@pytest.mark.parametrize("config", [QWEN2_MIXED, QWEN3_MIXED, dict(MAVERICK, hidden_size=64, intermediate_size=48,
                                    intermediate_size_mlp=96, num_hidden_layers=6, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=16, vocab_size=100, num_local_experts=4)],
                         ids=["qwen2_moe", "qwen3_moe", "llama4_text"])
def test_a_mixed_model_is_built_as_transformers_builds_it(torch, transformers, config):
    assert_built_like_transformers(torch, _meta(torch, transformers, config), config)


@pytest.mark.live
def test_llama4_maverick_counts_as_transformers_and_its_model_card(torch, transformers):
    shape = mm.from_hf_config(MAVERICK)
    model = _meta(torch, transformers, MAVERICK)
    assert shape.n_params == sum(p.numel() for p in model.parameters())
    # the model card: 17B active, 400B total (with the vision encoder, which the text model leaves out)
    assert abs(shape.n_params / 400e9 - 1) < 0.01 and abs(shape.active_params / 17e9 - 1) < 0.02


def test_maverick_active_parameters_by_hand():
    # 24 MoE blocks each route a token to 1 of 128 experts (3 x 5,120 x 8,192 values an expert): 127 unreached
    shape = mm.from_hf_config(MAVERICK)
    assert shape.n_params - shape.active_params == 24 * 127 * 3 * 5120 * 8192


def test_freezing_trains_the_last_blocks_in_their_own_layouts():
    shape = mm.from_hf_config(QWEN2_MIXED)
    dense, sparse = (layout.params_per_layer for layout, _ in shape.layouts())
    # the last two blocks: block 3 dense (mlp_only_layers), block 2 sparse; then the final norm and the head
    head = 64 + 512 * 64
    assert mm.Freeze(trainable_layers=1).trainable_params(shape) == dense + head
    assert mm.Freeze(trainable_layers=2).trainable_params(shape) == dense + dense + head  # blocks 3 and 4 (1-based)
    assert mm.Freeze(trainable_layers=3).trainable_params(shape) == 2 * dense + sparse + head
    groups = mm.Freeze(trainable_layers=3).groups(shape).set_index("part")
    assert groups.loc["frozen blocks", "params"] == dense and groups.loc["trainable blocks", "params"] == 2 * dense + sparse


def test_lora_adapts_what_each_block_has():
    shape = mm.from_hf_config(QWEN2_MIXED)
    # q (64 -> 64) and v (64 -> 32) in every block, rank 8: 8 x (128 + 96) each; the router's 4 x 64 weight in the
    # sparse block only (peft's ParamWrapper: one rank-8 pair, 8 x (64 + 4))
    assert mm.LoRA(rank=8, targets=("q", "v")).trainable_params(shape) == 4 * 8 * (128 + 96)
    assert mm.LoRA(rank=8, targets=("q", "router")).trainable_params(shape) == 4 * 8 * 128 + 8 * (64 + 4)
    with pytest.raises(ValueError, match="shared_gate"):
        mm.LoRA(rank=8, targets=("shared_gate",)).trainable_params(mm.from_hf_config(QWEN3_MIXED))


def test_a_split_is_refused_by_name():
    shape = mm.from_hf_config(MAVERICK)
    for degrees in ({"tp": 2}, {"pp": 2}, {"ep": 2}):
        with pytest.raises(ValueError, match="blocks differ"):
            mm.Run(model=shape, seq_len=512, n_gpus=2, **degrees)
    # data parallelism with ZeRO is modelled: every GPU holds a shard of every block
    run = mm.Run(model=shape, seq_len=512, n_gpus=8, zero_stage=3)
    assert mm.training_memory(run).weights == 2 * 400_711_848_960 // 8  # bf16, an even eighth of every tensor
    assert mm.bounds.applies(run)  # ZeRO's sharded run has a safe bound on its parts ...
    # ... and llama4_text is traced (tests/test_families_llama4_trace.py): that safe upper bound, not a floor
    assert mm.requirement(run).basis == "upper bound"


def test_a_malformed_layout_is_refused_by_name():
    shape = mm.from_hf_config(QWEN2_MIXED)
    from dataclasses import replace
    with pytest.raises(ValueError, match="block indices"):
        replace(shape, block_layouts=(((0, 9), (("n_experts", 0),)),))
    with pytest.raises(ValueError, match="field, value"):
        replace(shape, block_layouts=(((0,), (("vocab_size", 10),)),))
    with pytest.raises(ValueError, match="tensors\\('layer'\\)"):
        shape.tensors("layer")
    with pytest.raises(ValueError, match="mlp_only_layers"):
        mm.from_hf_config(dict(QWEN2_MIXED, mlp_only_layers=[7]))


@pytest.mark.live
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("config", [QWEN2_MIXED, QWEN3_MIXED], ids=["qwen2-last-dense", "qwen3-last-sparse"])
def test_saved_activations_and_peak_are_what_a_cpu_step_measures(torch, transformers, peft, config, method, precision,
                                                                 attention):
    """Two AdamW steps on the CPU (b 2, s 64): the bytes saved for backward equal memmath's trace to the byte and
    the steady step's peak is within 1%. Held out: measured after the mixed-layout trace was written."""
    measured = two_cpu_steps(torch, transformers, peft, config, precision=precision, method=method, attention=attention)
    saved, peak = predicted_step(mm.from_hf_config(config), precision=precision, method=method, attention=attention)
    assert measured["saved_bytes"] == saved
    assert abs(peak / measured["peak_step2_bytes"] - 1) < 0.01


@pytest.mark.live
@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("config", [QWEN2_MIXED, QWEN3_MIXED], ids=["qwen2-last-dense", "qwen3-last-sparse"])
def test_a_checkpointed_step_peaks_within_five_percent(torch, transformers, peft, config, method):
    measured = two_cpu_steps(torch, transformers, peft, config, precision="bf16", method=method, attention="sdpa",
                             checkpointing=True)
    _, peak = predicted_step(mm.from_hf_config(config), precision="bf16", method=method, attention="sdpa",
                             checkpointing=True)
    assert abs(peak / measured["peak_step2_bytes"] - 1) < 0.05


def test_the_layout_planner_says_why_it_tries_data_parallel_layouts_only(capsys):
    from memmath import cli
    assert cli.main(["train", "glm-4.5-air", "--plan-layout", "--gpu", "H100 80GB"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "splits of a model whose blocks differ are not modelled" in out and "--zero 3" in out


@pytest.mark.parametrize("preset, moe_blocks, experts, routed, hidden, width", [
    # DeepSeek-V2-Lite's config.json: 27 blocks, first_k_dense_replace 1, 64 routed experts of width 1,408, 6 a token
    ("deepseek-v2-lite", 26, 64, 6, 2048, 1408),
    # GLM-4.5-Air's config.json: 46 blocks, first_k_dense_replace 1, 128 routed experts of width 1,408, 8 a token
    ("glm-4.5-air", 45, 128, 8, 4096, 1408),
])
def test_a_decode_step_reads_the_shared_experts(preset, moe_blocks, experts, routed, hidden, width):
    """One bf16 decode step at batch 1 reads every weight but the routed experts its token is not sent to (kipply
    2022): the shared experts (mlp.shared_experts, 2-D linears every token passes) are read, not skipped as routed.
    The router's E x h weight is read at 4 B: a bf16 load keeps it in fp32 (_keep_in_fp32_modules_strict names
    gate.weight in modeling_deepseek_v2.py and modeling_glm4_moe.py)."""
    from memmath.inference import decode_weight_bytes
    shape = mm.PRESETS[preset]
    unread = moe_blocks * (experts - routed) * 3 * hidden * width  # gate, up and down of each expert a token skips
    router = moe_blocks * experts * hidden
    assert decode_weight_bytes(shape, "bf16", batch_size=1) == 2 * (shape.n_params - unread) + 2 * router
    assert mm.inference_memory(shape, weights_format="bf16").weights_read == 2 * (shape.n_params - unread) + 2 * router


# peft 0.21 converts qwen3_moe and qwen3_next as qwen2_moe (transformers' _MODEL_TO_CONVERSION_PATTERN): target_modules
# gate_proj, up_proj and down_proj become the routed experts' parameters, so they adapt neither a dense block's MLP
# (mlp_only_layers, decoder_sparse_step) nor Qwen3-Next's shared expert
QWEN3_NEXT_MIXED = dict(PUBLISHED_CONFIGS["Qwen3-Next-80B-A3B-Instruct"], hidden_size=64, intermediate_size=96,
                        num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        linear_key_head_dim=8, linear_value_head_dim=16, linear_num_key_heads=2,
                        linear_num_value_heads=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                        shared_expert_intermediate_size=48, vocab_size=128, mlp_only_layers=[2])


@pytest.mark.live
@pytest.mark.parametrize("config", [QWEN3_MIXED, QWEN3_NEXT_MIXED, dict(QWEN3_NEXT_MIXED, mlp_only_layers=[])],
                         ids=["qwen3_moe-mixed", "qwen3_next-mixed", "qwen3_next"])
def test_peft_turns_the_mlp_names_into_the_routed_experts(torch, transformers, peft, config):
    mlp_names = ["gate_proj", "up_proj", "down_proj"]
    model = peft.get_peft_model(_meta(torch, transformers, config),
                                peft.LoraConfig(r=4, lora_alpha=8, target_modules=mlp_names))
    adapted = {n for n, p in model.named_parameters() if p.requires_grad}
    assert adapted and all(".mlp.experts." in n for n in adapted)  # no dense MLP, no shared expert
    shape = mm.from_hf_config(config)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == mm.LoRA(
        rank=4, targets=("experts",)).trainable_params(shape)
    with pytest.raises(ValueError, match="routed experts.*target .experts."):
        mm.LoRA(rank=4, targets=("gate", "up", "down")).trainable_params(shape)
    if config is QWEN3_MIXED:  # all-linear: the attention, the routers and the routed experts, no dense MLP
        model = peft.get_peft_model(_meta(torch, transformers, config),
                                    peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
        assert sum(p.numel() for p in model.parameters() if p.requires_grad) == mm.LoRA(
            rank=4, targets="all").trainable_params(shape)


def test_all_linear_on_a_mixed_qwen3_moe_by_hand():
    # QWEN3_MIXED at rank 4: q 64 -> 64, k and v 64 -> 32, o 64 -> 64 in all four blocks, 4 x 4 x (128+96+96+128);
    # the two sparse blocks' router (64 -> 4, one rank-4 pair) and experts (gate_up 64 -> 64 at rank 8 per expert,
    # down 32 -> 64 at rank 4 per expert, 4 experts); the dense blocks' MLPs none (peft converts their names)
    attention = 4 * 4 * (128 + 96 + 96 + 128)
    moe = 2 * (4 * (64 + 4) + 4 * 8 * (64 + 64) + 4 * 4 * (32 + 64))
    assert mm.LoRA(rank=4, targets="all").trainable_params(mm.from_hf_config(QWEN3_MIXED)) == attention + moe


def test_zero3_gathers_two_neighbouring_blocks_not_two_of_the_largest():
    """ZeRO-3's all-gathered parameters are the root and the two blocks alive at once (the one running and the one
    prefetched): in Maverick a mixture-of-experts block and a dense block are neighbours, never two MoE blocks."""
    from memmath import bounds
    h, attention = 5120, 2 * 5120 * 5120 + 2 * 5120 * 1024  # q and o 5,120 x 5,120, k and v 1,024 x 5,120
    # Llama4TextMoe: router 128 x h, experts' gate_up 128 x h x 16,384 and down 128 x 8,192 x h, shared expert 3 x h x
    # 8,192; Llama4TextMLP at intermediate_size_mlp 16,384; two RMSNorms each
    moe = attention + 128 * h + 128 * h * 16384 + 128 * 8192 * h + 3 * h * 8192 + 2 * h
    dense = attention + 3 * h * 16384 + 2 * h
    root = 2 * 202048 * h + h  # embeddings, untied head, final norm
    run = mm.Run("llama-4-maverick", seq_len=2048, zero_stage=3, n_gpus=64, activations="textbook")
    gathered = next(v for k, v in bounds.engine_buffers(run).items() if k.startswith("ZeRO-3/FSDP all-gathered"))
    assert gathered == 2 * (root + moe + dense)  # bf16


@pytest.mark.parametrize("method", [mm.LoRA(rank=4, targets=("q", "v")), mm.Full()], ids=["lora", "full"])
def test_a_checkpointed_sweep_recomputes_the_largest_block_as_each_point_does(method):
    """Under checkpointing backward runs one block's forward again at a time; the sparse block (its router and
    experts) saves more than QWEN2_MIXED's last block, a dense one, so every sequence length of a sweep answers what
    that length alone answers: the largest block's recomputation, not the last block's."""
    import numpy as np
    shape = mm.from_hf_config(QWEN2_MIXED)
    settings = dict(model=shape, method=method, batch_size=2, activations="transformers", checkpointing=True,
                    device="cpu", precision="bf16", dropout=False)
    swept = mm.training_memory(mm.Run(seq_len=np.array([32, 64]), **settings))
    alone = [mm.training_memory(mm.Run(seq_len=s, **settings)) for s in (32, 64)]
    assert [int(a) for a in swept.activations] == [m.activations for m in alone]
    # the recomputed block is the sparse one: what the sparse layout alone, traced as one layout, recomputes
    _, sparse = (layout for layout, _ in shape.layouts())
    for seq_len, memory in zip((32, 64), alone):
        own = mm.training_memory(mm.Run(seq_len=seq_len, **dict(settings, model=sparse)))
        assert memory.activation_detail.recompute_peak == own.activation_detail.recompute_peak


MAVERICK_TINY = dict(MAVERICK, hidden_size=64, intermediate_size=48, intermediate_size_mlp=96, num_hidden_layers=6,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=100, num_local_experts=4)
# a dense first block then two MoE blocks (first_k_dense_replace 1), widths that differ from each other
DEEPSEEK_MIXED = dict(model_type="deepseek_v3", num_hidden_layers=3, hidden_size=64, intermediate_size=96,
                      moe_intermediate_size=24, n_routed_experts=4, n_shared_experts=2, num_experts_per_tok=2,
                      first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32,
                      kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=12, vocab_size=100,
                      n_group=2, topk_group=1)
GLM_MIXED = dict(model_type="glm4_moe", vocab_size=96, hidden_size=32, intermediate_size=56, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, moe_intermediate_size=24,
                 n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                 attention_bias=True, use_qk_norm=True)
EXPERTS = dict(target_parameters=["experts.gate_up_proj", "experts.down_proj"], rank_pattern={r".*\.gate_up_proj": 8})


@pytest.mark.live
@pytest.mark.parametrize("config, targets, peft_args", [
    (QWEN2_MIXED, "all", dict(target_modules="all-linear")),
    (QWEN2_MIXED, ("gate", "up", "down", "shared_gate"),
     dict(target_modules=["gate_proj", "up_proj", "down_proj", "shared_expert_gate"])),
    (QWEN2_MIXED, ("router", "experts"), dict(target_modules=[], **dict(EXPERTS, target_parameters=[
        "gate.weight", *EXPERTS["target_parameters"]]))),
    (MAVERICK_TINY, "all", dict(target_modules="all-linear")),
    (MAVERICK_TINY, ("gate", "up", "down", "router"), dict(target_modules=["gate_proj", "up_proj", "down_proj",
                                                                             "router"])),
    (MAVERICK_TINY, ("experts",), dict(target_modules=[], **EXPERTS)),
    (DEEPSEEK_MIXED, "all", dict(target_modules="all-linear")),
    (DEEPSEEK_MIXED, ("router", "experts"), dict(target_modules=["gate"], **EXPERTS)),
    (GLM_MIXED, "all", dict(target_modules="all-linear")),
    (GLM_MIXED, ("q", "v", "router", "experts"), dict(target_modules=["q_proj", "v_proj", "gate"], **EXPERTS)),
], ids=["qwen2-all", "qwen2-mlp", "qwen2-moe", "maverick-all", "maverick-mlp", "maverick-experts", "deepseek-all",
        "deepseek-moe", "glm-all", "glm-qv-moe"])
def test_lora_over_every_block_is_what_peft_trains(torch, transformers, peft, config, targets, peft_args):
    """peft 0.21 on transformers' build of the whole mixed model (meta device): the adapters of every block, each in
    its own layout, a target a block lacks adapting nothing there."""
    model = peft.get_peft_model(_meta(torch, transformers, config), peft.LoraConfig(r=4, lora_alpha=8, **peft_args))
    theirs = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert mm.LoRA(rank=4, targets=targets).trainable_params(mm.from_hf_config(config)) == theirs


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_the_textbook_counts_attention_scores_in_the_attention_blocks_only(attention):
    """Korthikanti et al.'s block keeps s x s scores per head in eager attention (a fused kernel a log-sum-exp per row
    and head); Qwen3-Next's 36 gated DeltaNet blocks run no attention kernel, only its 12 full-attention blocks do."""
    s, h, a, e = 4096, 2048, 16, 2  # Qwen3-Next-80B-A3B's width and heads, bf16, no dropout
    kernel = a * s * s * e if attention == "eager" else 4 * a * s
    run = mm.Run("qwen3-next-80b-a3b", seq_len=s, attention=attention, activations="textbook",
                 method=mm.LoRA(rank=8, targets=("q", "v")))
    assert mm.training_memory(run).activation_detail.layers == 48 * s * h * 16 * e + 12 * kernel
    frozen = run.replace(method=mm.Freeze(trainable_layers=6))  # the last six blocks: 42 and 46 linear attention...
    assert mm.training_memory(frozen).activation_detail.layers == 6 * s * h * 16 * e + 2 * kernel  # ...43, 47 full


def test_freezing_a_quantized_checkpoint_is_refused_as_weight_training():
    """DeepSeek-V3's checkpoint is block FP8 (its quantization_config): Freeze trains the last blocks' own weights,
    which transformers cannot train in a quantized model, as full finetuning; not an adapter method."""
    for method, what in ((mm.Freeze(trainable_layers=2), "train the weights of the last blocks of"),
                         (mm.Full(), "fully finetune")):
        with pytest.raises(ValueError, match=f"cannot {what} a quantized model") as error:
            mm.training_memory(mm.Run(mm.from_hf_config(LAYERED_CONFIGS["DeepSeek-V3"]), seq_len=512, method=method))
        assert "adapters on a" not in str(error.value)


def _frozen_steps(torch, transformers, config, trainable, checkpointing):
    """memmath.stepping's record of two AdamW steps (fp32, batch 2 x 64 tokens, SDPA) on the CPU with every block but
    the last `trainable` frozen, and the embeddings (as memmath.Freeze does)."""
    from memmath.stepping import step_twice
    from validation.measure import configure_torch, make_optimizer

    configure_torch()
    hf = transformers.AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items()
                                                                     if k != "model_type"})
    hf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.float32).train()
    if checkpointing:
        model.gradient_checkpointing_enable()
    layers = model.model.layers
    model.model.embed_tokens.weight.requires_grad_(False)
    for block in layers[:len(layers) - trainable]:
        block.requires_grad_(False)
    ids = torch.randint(1, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    params = [p for p in model.parameters() if p.requires_grad]
    return step_twice(model, make_optimizer(params, "adamw"), {"input_ids": ids, "labels": ids.clone()}, layers)


@pytest.mark.live
@pytest.mark.parametrize("checkpointing", [False, True])
def test_freezing_all_but_two_blocks_peaks_where_a_cpu_step_does(torch, transformers, checkpointing):
    """QWEN2_MIXED with its last two blocks (both dense) trainable: the backward in the first trainable block holds
    every later gradient but that dense block's own, not the sparse block's. Measured after the model: before,
    the checkpointed step was predicted 3.1% low (the sparse block's gradients taken off)."""
    measured = _frozen_steps(torch, transformers, QWEN2_MIXED, 2, checkpointing)
    peak = mm.peak_memory(mm.from_hf_config(QWEN2_MIXED), method=mm.Freeze(trainable_layers=2), precision="fp32",
                          optimizer="adamw", activations="transformers", seq_len=64, batch_size=2, dropout=False,
                          attention="sdpa", checkpointing=checkpointing, device="cpu")
    assert abs(peak.total / measured["peak_step2_bytes"] - 1) < 0.01


def test_routed_experts_blocks_and_the_largest_block_by_hand():
    # Mixtral-8x7B: 32 blocks of 8 experts of 3 x 4,096 x 14,336; DeepSeek-V3: 58 MoE blocks (3 dense first) of 256
    # experts of 3 x 7,168 x 2,048, its shared experts not among them
    assert mm.PRESETS["mixtral-8x7b"].routed_expert_params == 32 * 8 * 3 * 4096 * 14336
    deepseek = mm.PRESETS["deepseek-v3"]
    assert (deepseek.moe_blocks, deepseek.routed_expert_params) == (58, 58 * 256 * 3 * 7168 * 2048)
    assert (mm.PRESETS["llama-2-7b"].moe_blocks, mm.PRESETS["llama-2-7b"].routed_expert_params) == (0, 0)
    # Llama 4 Maverick's MoE block: attention 2 x 5,120 x 5,120 + 2 x 5,120 x 1,024, 128 experts of
    # 3 x 5,120 x 8,192, the router 128 x 5,120, the shared expert 3 x 5,120 x 8,192, two norms
    maverick = mm.PRESETS["llama-4-maverick"]
    assert maverick.moe_blocks == 24
    assert maverick.largest_block_params == (2 * 5120 * 5120 + 2 * 5120 * 1024 + 129 * 3 * 5120 * 8192 + 128 * 5120
                                             + 2 * 5120)


@pytest.mark.parametrize("preset", ["glm-4.5-air", "deepseek-v2-lite", "deepseek-v3"])
def test_lora_on_blocks_of_several_layouts_takes_the_exact_trace(preset):
    """The exact trace adapts in each layout the targets its blocks have (_mixed_parts), so the default activations
    of a LoRA run are the traced ones, as for full finetuning; not the textbook fallback a whole-model adapter list
    (which a shape of several layouts refuses) would give."""
    from memmath.hf_activations import traces
    from memmath.recipes import RECIPES
    shape = mm.PRESETS[preset]
    assert traces(shape, mm.LoRA(rank=8, targets=("q", "v")), RECIPES["bf16"], 2048) is None
    assert traces(shape, mm.Full(), RECIPES["bf16"], 2048) is None

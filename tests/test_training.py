"""Training memory: the article's numbers, the recipes table, ZeRO, and PyTorch's own bookkeeping."""

import dataclasses

import numpy as np
import pytest

import memmath as mm

GB = 10**9
SEVEN_B = mm.uniform_model(7e9, 32)


# ---- the article ------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_article_7b_in_16_bit(precision):
    # The article: 7B x 2 B = 14 GB of weights; full finetuning with Adam in pure 16-bit keeps
    # gradients (2 B) and two Adam states (2 x 2 B) too: 8 B/param = 56 GB before activations.
    m = mm.training_memory(SEVEN_B, precision=precision, optimizer="adam")
    assert m.weights == 14_000_000_000
    assert (m.gradients, m.optimizer_states) == (14_000_000_000, 28_000_000_000)
    assert m.weights + m.gradients + m.optimizer_states == 56_000_000_000
    assert m.without_activations == 56_000_000_000 and m.total == 56_000_000_000
    assert mm.format_bytes(m.weights) == "14.00 GB" and mm.format_bytes(m.total) == "56.00 GB"


# The textbook model as Korthikanti et al. 2022 count it: eager attention with dropout masks. Named here,
# since memmath's default for a model with a config is the exact (transformers) model with SDPA.
TEXTBOOK = dict(activations="textbook", attention="eager", dropout=True)

def test_a_plain_parameter_count_works_and_says_activations_are_missing():
    m = mm.training_memory(7e9, precision="bf16", optimizer="adam", seq_len=2048)
    assert m.total == 56_000_000_000 and m.activations == 0 and not m.activations_estimated
    assert "activations_not_estimated" in [note.kind for note in m.notes]


@pytest.mark.parametrize("method", [mm.Freeze(frozen_layers=9), mm.Freeze(trainable_layers=1)])
def test_article_ten_layers_first_nine_frozen(method):
    # The article: ten equal layers, the first nine frozen: 10% of the parameters train.
    m = mm.training_memory(mm.uniform_model(7e9, 10), precision="bf16", optimizer="adam", method=method)
    assert m.trainable_fraction == 0.1 and m.trainable_params == 700_000_000
    # Weights stay whole; gradients and Adam states shrink to the trainable tenth: 14 + 1.4 + 2.8 GB.
    assert (m.weights, m.gradients, m.optimizer_states) == (14 * GB, 1_400_000_000, 2_800_000_000)


# ---- bytes per parameter: the published recipes, one row each (sources in memmath_lessons.reference.published) ----
# recipe: (weights, gradients, gradient accumulation, master copy, Adam m+v) in bytes per parameter.
RECIPE_ROWS = {
    "bf16": (2, 2, 0, 0, 4),  # pure 16-bit (the article; LLaMA-Factory pure_bf16): 8 B
    "fp16": (2, 2, 0, 0, 4),  # the same bytes, fp16 instead of bf16: 8 B
    "fp32": (4, 4, 0, 0, 8),  # fp32 everything: 16 B
    "amp": (4, 4, 0, 0, 8),  # torch AMP keeps fp32 parameters under autocast: 16 B
    "mixed": (2, 2, 0, 4, 8),  # ZeRO-paper mixed precision: 2 + 2 + 4 + 8 = 16 B
    "mixed_fp32_grads": (2, 2, 4, 4, 8),  # nanotron, fp32 gradient accumulation: 2 + 2+4 + 4 + 8 = 20 B
}
RECIPE_TOTALS = {"bf16": 8, "fp16": 8, "fp32": 16, "amp": 16, "mixed": 16, "mixed_fp32_grads": 20}


@pytest.mark.parametrize("precision", RECIPE_ROWS)
def test_bytes_per_parameter_table(precision):
    w, g, acc, master, states = RECIPE_ROWS[precision]
    for optimizer in ("adam", "adamw"):
        row = mm.recipes.bytes_per_parameter(precision, optimizer)
        assert (row["weights"], row["gradients"], row["gradient_accumulation"], row["master_weights"],
                row["optimizer_states"]) == (w, g, acc, master, states)
        assert row["total"] == RECIPE_TOTALS[precision]


@pytest.mark.parametrize("precision", RECIPE_ROWS)
def test_7b_per_recipe_matches_the_table(precision):
    # The article's 56 GB; fp32/ZeRO 112 GB (Rajbhandari et al. 2020, 16 B/param); nanotron's 140 GB; for 7B (uniform: no per-tensor step counters).
    m = mm.training_memory(SEVEN_B, precision=precision, optimizer="adam")
    w, g, acc, master, states = RECIPE_ROWS[precision]
    n = 7 * 10**9
    assert (m.weights, m.gradients, m.gradient_accumulation, m.master_weights, m.optimizer_states) == (
        w * n, g * n, acc * n, master * n, states * n)
    assert m.without_activations == RECIPE_TOTALS[precision] * n


def test_every_recipe_and_optimizer_says_what_it_keeps():
    for table in (mm.RECIPES, mm.OPTIMIZERS):
        for entry in table.values():
            assert entry.description.strip() and entry.source.strip()
    m = mm.training_memory("gpt2", precision="mixed", optimizer="adamw", method=mm.LoRA(rank=8))
    assert mm.RECIPES["mixed"].description in m.assumptions and "LoRA rank 8" in m.assumptions


# ---- other optimizers ----------------------------------------------------------------------------------
def test_other_optimizers_per_parameter():
    # torch.optim.SGD keeps no state, with momentum one buffer; 8-bit Adam two 1-byte states (Dettmers et al. 2022).
    n = 7 * 10**9
    assert mm.training_memory(SEVEN_B, precision="fp32", optimizer="sgd").optimizer_states == 0
    assert mm.training_memory(SEVEN_B, precision="fp32", optimizer="sgd_momentum").optimizer_states == 4 * n
    assert mm.training_memory(SEVEN_B, precision="bf16", optimizer="sgd_momentum").optimizer_states == 2 * n
    # 8-bit Adam: 2 x 1 B plus one fp32 absmax per block of 256 state values (bitsandbytes >= 0.44,
    # PR #1365 "Change 8bit optimizer blocksize 2048->256"; Dettmers et al. 2022 used 2,048).
    expected = 2 * n + 4 * (-(-2 * n // 256))
    assert mm.training_memory(SEVEN_B, optimizer="adam8bit").optimizer_states == expected


def test_eight_bit_adam_follows_bitsandbytes_tensor_by_tensor():
    # bitsandbytes Optimizer2State.init_state: a tensor under min_8bit_size = 4,096 elements keeps two
    # fp32 states; a larger one two uint8 states plus fp32 absmax1/absmax2 of ceil(n / 256) each
    # (bitsandbytes >= 0.44).
    # GPT-2 small (HF GPT2 config: vocab 50,257, 1,024 positions, width 768, 12 layers, tied head):
    #   small tensors per layer: ln_1 and ln_2 weight+bias 4 x 768, biases 2,304 + 768 + 3,072 + 768
    #   = 9,984; x 12 = 119,808; plus ln_f 2 x 768 -> 121,344 parameters in fp32 states.
    #   blocks: wte 38,597,376 / 256 -> 150,771; wpe 786,432 -> 3,072; per layer c_attn 1,769,472 -> 6,912,
    #   attn c_proj 589,824 -> 2,304, c_fc and mlp c_proj 2,359,296 -> 9,216 each: 27,648 x 12 = 331,776.
    small, blocks = 121_344, 150_771 + 3_072 + 331_776
    big = 124_439_808 - small
    # And two quantization maps (qmap1, qmap2) of 256 fp32 values, one pair for the whole optimizer
    # (measured with bitsandbytes 0.50.2: every 8-bit state points at the same two storages).
    expected = 2 * big * 1 + 2 * small * 4 + 2 * blocks * 4 + 2 * 256 * 4
    assert mm.training_memory("gpt2", optimizer="adam8bit").optimizer_states == expected == 253_494_680


def test_eight_bit_adam_can_need_less_at_a_higher_lora_rank():
    # GPT-2's c_attn (768 -> 2,304) with LoRA: at r = 1, A (1 x 768) and B (2,304 x 1) are under 4,096
    # elements, so both keep fp32 states: 12 x 2 x 4 B x (768 + 2,304) = 294,912 B. At r = 2, B has
    # 4,608 elements and goes 8-bit: 12 x (2 x 4 x 1,536 + 2 x 4,608 + 2 x 4 x ceil(4,608 / 256))
    # = 12 x (12,288 + 9,216 + 144) = 259,776 B, + bitsandbytes' two shared quantization maps
    # (2 x 256 fp32 = 2,048 B, made once any tensor is 8-bit) = 261,824 B: a higher rank, smaller states.
    def states(rank):
        return mm.training_memory("gpt2", optimizer="adam8bit",
                                  method=mm.LoRA(rank=rank, targets=("q", "k", "v"))).optimizer_states
    assert states(1) == 294_912
    assert states(2) == 259_776 + 2_048


def test_adafactor_factors_matrices():
    # Shazeer & Stern 2018: an r x c matrix keeps r + c second-moment statistics; vectors keep their
    # full size; torch.optim.Adafactor adds a 4-byte step per tensor. GPT-2 small in fp32 by hand:
    h, L, V, P, I = 768, 12, 50257, 1024, 3072
    matrices = [(V, h), (P, h)] + L * [(3 * h, h), (h, h), (I, h), (h, I)]
    vectors = L * [h, h, 3 * h, h, h, h, I, h] + [h, h]  # ln_1 w/b, c_attn b, c_proj b, ln_2 w/b, c_fc b, c_proj b; ln_f
    factored = sum(r + c for r, c in matrices) + sum(vectors)
    tensors = len(matrices) + len(vectors)
    m = mm.training_memory("gpt2", precision="fp32", optimizer="adafactor")
    assert m.optimizer_states == 4 * factored + 4 * tensors


def test_adam_keeps_a_step_counter_per_tensor():
    # Measured with torch 2.13 on the CPU (validation/measure.py): Adam/AdamW keep one 4-byte fp32 step per trainable tensor.
    # GPT2LMHeadModel has 148 parameter tensors: wte, wpe, 12 x 12 per block, ln_f weight and bias.
    m = mm.training_memory("gpt2", precision="fp32", optimizer="adamw")
    assert m.optimizer_states == 8 * 124_439_808 + 4 * 148


# ---- LoRA and QLoRA -----------------------------------------------------------------------------------
def test_llama2_7b_lora_r8_qv_breakdown():
    # Hu et al. 2021 (r x (d_in + d_out) per matrix): 4,194,304 trainable = 32 layers x 2 matrices x 8 x (4096 + 4096). peft keeps the
    # adapters in fp32 on a bf16 base: weights 2 B x base + 4 B x adapters; fp32 gradients; AdamW
    # states in fp32 (2 x 4 B) plus a 4-byte step for each of the 32 x 2 x 2 = 128 adapter tensors.
    lora = 4_194_304
    m = mm.training_memory("llama-2-7b", precision="bf16", optimizer="adamw", method=mm.LoRA(rank=8, targets=("q", "v")))
    assert m.trainable_params == lora
    assert m.weights == 2 * 6_738_415_616 + 4 * lora
    assert m.gradients == 4 * lora
    assert m.optimizer_states == 8 * lora + 4 * 128
    # With adapters in the base's dtype (peft autocast_adapter_dtype=False) everything is 2 B.
    same = mm.training_memory("llama-2-7b", method=mm.LoRA(rank=8, adapter_format=None))
    assert same.weights == 2 * (6_738_415_616 + lora) and same.gradients == 2 * lora


def test_qlora_constants_are_0_127_bits_per_weight():
    # QLoRA (Dettmers et al. 2023): NF4 in blocks of 64 with an fp32 absmax = 32/64 = 0.5 extra bits
    # per weight; double quantization: 8/64 + 32/(64*256) = 0.126953125 ("0.127").
    linear = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)  # llama-2-7b's quantized linear weights
    assert linear == 6_476_005_376
    dq = mm.training_memory("llama-2-7b", method=mm.QLoRA(rank=8))
    assert dq.quantization_constants * 8 / linear == 8 / 64 + 32 / (64 * 256)
    plain = mm.training_memory("llama-2-7b", method=mm.QLoRA(rank=8, double_quant=False))
    assert plain.quantization_constants * 8 / linear == 0.5
    # Weights: NF4 linears (half a byte) + embeddings, head and norms in bf16 + fp32 adapters.
    other = 6_738_415_616 - linear
    assert dq.weights == linear // 2 + 2 * other + 4 * 4_194_304
    assert mm.methods.quant_constant_bytes(64 * 256) == 256 + 4 and mm.methods.quant_constant_bytes(64, double_quant=False) == 4


def test_qlora_65b_fits_one_48gb_gpu():
    # QLoRA's headline: a 65B model finetuned on a single 48 GB GPU (weights + adapters + states).
    m = mm.training_memory("llama-65b", method=mm.QLoRA(rank=64, targets="all"))
    assert m.without_activations < 48 * GB


# ---- activations inside training_memory -------------------------------------------------------------
def test_activations_follow_korthikanti_and_the_loss_term():
    # Korthikanti et al. 2022, section 4: per block s*b*h*(34 + 5*a*s/h) at 16 bit; outside the
    # blocks the embedding dropout mask (s*b*h), the final norm's and the head's inputs (2 x 2*s*b*h)
    # and the fp32 logits of the cross-entropy (4*s*b*V).
    s, b, h, a, V, L = 1024, 4, 768, 12, 50257, 12
    m = mm.training_memory("gpt2", precision="bf16", batch_size=b, seq_len=s, **TEXTBOOK)
    per_layer = s * b * h * 34 + 5 * a * s * s * b
    assert m.activation_detail.per_layer == per_layer
    assert m.activations == L * per_layer + s * b * h + 4 * s * b * h + 4 * s * b * V


def test_freezing_stores_nothing_before_the_first_trainable_block():
    # Measured with torch 2.13 (validation/measure.py): layers before the first trainable one store no activations; the embeddings are
    # frozen, so no embedding dropout mask either.
    s, b, h, a, V = 512, 2, 768, 12, 50257
    m = mm.training_memory("gpt2", batch_size=b, seq_len=s, method=mm.Freeze(trainable_layers=3), **TEXTBOOK)
    assert m.activations == 3 * (34 * s * b * h + 5 * a * s * s * b) + 4 * s * b * h + 4 * s * b * V


def test_nothing_trainable_nothing_stored():
    m = mm.training_memory("gpt2", seq_len=128, method=mm.Freeze(trainable_layers=0, train_final_norm=False))
    assert m.trainable_params == 0 and m.activations == 0 and m.gradients == 0


# ---- several GPUs: ZeRO --------------------------------------------------------------------------------
@pytest.mark.parametrize("stage, expected", [
    # Rajbhandari et al. 2020 (ZeRO), figure 1: 7.5B parameters, 64 GPUs, mixed precision Adam
    # (K = 12): baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB per GPU.
    (0, 120 * GB), (1, 31_406_250_000), (2, 16_640_625_000), (3, 1_875_000_000),
])
def test_zero_stages_reproduce_the_zero_paper(stage, expected):
    m = mm.training_memory(mm.uniform_model(7.5e9, 1), precision="mixed", optimizer="adam", n_gpus=64,
                           zero_stage=stage)
    assert m.total == expected
    assert round(m.total / GB, 1) == {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}[stage]


def test_data_parallel_without_zero_replicates_everything():
    one = mm.training_memory("gpt2", seq_len=256)
    eight = mm.training_memory("gpt2", seq_len=256, n_gpus=8)
    assert eight.total == one.total and any(note.kind == "data_parallel_full_copy" for note in eight.notes)


# ---- the breakdown object ------------------------------------------------------------------------------
def test_parts_add_up_and_the_frame_labels_units():
    m = mm.training_memory("llama-2-7b", precision="mixed_fp32_grads", method=mm.LoRA(rank=16), seq_len=1024)
    frame = m.to_frame("GiB")
    assert list(frame["part"]) == list(mm.training.PARTS)
    assert list(frame["bytes"]) == list(m.parts().values())
    assert list(frame["GiB"]) == [v / 2**30 for v in m.parts().values()]  # GiB = 2**30 bytes
    assert frame["GiB"].sum() == pytest.approx(m.total / 2**30)
    assert frame["share"].sum() == pytest.approx(1.0)


def test_a_sweep_returns_a_frame_with_one_row_per_point():
    m = mm.training_memory("gpt2", batch_size=np.array([1, 2, 4]), seq_len=512)
    frame = m.to_frame()
    assert len(frame) == 3 and list(frame["total"]) == list(m.total)


# ---- live: what PyTorch really stores ------------------------------------------------------------------
def _measure(torch, model, optimizer_factory, batch=1, seq=8, vocab=100):
    """Bytes of weights, gradients and optimizer state after one step of `model` (exact, per tensor)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = optimizer_factory(trainable)
    ids = torch.randint(0, vocab, (batch, seq))
    model(input_ids=ids, labels=ids).loss.backward()
    grads = sum(p.grad.numel() * p.grad.element_size() for p in trainable)
    optimizer.step()
    states = sum(t.numel() * t.element_size() for state in optimizer.state.values() for t in state.values()
                 if torch.is_tensor(t))
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return weights, grads, states, sum(p.numel() for p in trainable)


TINY = {
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(n_layer=3, n_embd=64, n_head=4, vocab_size=100, n_positions=32,
                                                   bos_token_id=0, eos_token_id=0)),
    "llama": ("LlamaForCausalLM", "LlamaConfig", dict(num_hidden_layers=3, hidden_size=64, num_attention_heads=4,
                                                      num_key_value_heads=2, intermediate_size=96, vocab_size=100,
                                                      bos_token_id=0, eos_token_id=0)),
}
OPTIMIZERS = {
    "adamw": lambda torch: (lambda p: torch.optim.AdamW(p)),
    "adam": lambda torch: (lambda p: torch.optim.Adam(p)),
    "sgd": lambda torch: (lambda p: torch.optim.SGD(p, lr=0.1)),
    "sgd_momentum": lambda torch: (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    "adafactor": lambda torch: (lambda p: torch.optim.Adafactor(p)),
}


def _tiny(torch, transformers, family, dtype):
    model_class, config_class, kwargs = TINY[family]
    config = getattr(transformers, config_class)(**kwargs)
    torch.manual_seed(0)
    return getattr(transformers, model_class)(config).to(dtype), mm.from_hf_config(config.to_dict())


@pytest.mark.live
@pytest.mark.parametrize("family", TINY)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_full_finetuning_matches_pytorch(torch, transformers, family, precision, optimizer):
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    model, shape = _tiny(torch, transformers, family, dtype)
    weights, grads, states, trainable = _measure(torch, model, OPTIMIZERS[optimizer](torch))
    m = mm.training_memory(shape, precision=precision, optimizer=optimizer)
    assert (m.weights, m.gradients, m.optimizer_states, m.trainable_params) == (weights, grads, states, trainable)


@pytest.mark.live
@pytest.mark.parametrize("family", TINY)
def test_freezing_matches_pytorch(torch, transformers, family):
    # Freeze(trainable_layers=1): the last block and the final norm train; an untied head trains
    # (LLaMA), a tied head stays frozen with the embeddings (GPT-2).
    model, shape = _tiny(torch, transformers, family, torch.bfloat16)
    for p in model.parameters():
        p.requires_grad_(False)
    base = model.transformer if family == "gpt2" else model.model
    blocks, norm = (base.h, base.ln_f) if family == "gpt2" else (base.layers, base.norm)
    for module in (blocks[-1], norm) + (() if family == "gpt2" else (model.lm_head,)):
        for p in module.parameters():
            p.requires_grad_(True)
    weights, grads, states, trainable = _measure(torch, model, OPTIMIZERS["adamw"](torch))
    m = mm.training_memory(shape, optimizer="adamw", method=mm.Freeze(trainable_layers=1))
    assert (m.weights, m.gradients, m.optimizer_states, m.trainable_params) == (weights, grads, states, trainable)


@pytest.mark.live
@pytest.mark.parametrize("family, targets, modules", [
    ("llama", ("q", "v"), ["q_proj", "v_proj"]),
    ("llama", "all", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    ("gpt2", ("q", "v"), ["c_attn"]),
])
@pytest.mark.parametrize("autocast", [True, False])
def test_lora_matches_peft(torch, transformers, peft, family, targets, modules, autocast):
    # peft's default (autocast_adapter_dtype=True) keeps adapters in fp32 on a bf16 base.
    model, shape = _tiny(torch, transformers, family, torch.bfloat16)
    config = peft.LoraConfig(r=4, target_modules=modules, fan_in_fan_out=family == "gpt2")
    model = peft.get_peft_model(model, config, autocast_adapter_dtype=autocast)
    weights, grads, states, trainable = _measure(torch, model, OPTIMIZERS["adamw"](torch))
    method = mm.LoRA(rank=4, targets=targets, adapter_format="fp32" if autocast else None)
    m = mm.training_memory(shape, precision="bf16", optimizer="adamw", method=method)
    assert (m.weights, m.gradients, m.optimizer_states, m.trainable_params) == (weights, grads, states, trainable)


# ---- the README's example --------------------------------------------------------------------------
def test_readme_example_reproduces_the_article():
    # The README shows the API in a short example that reproduces the article's 14 GB and
    # 56 GB. Run its python block; each line ending in "# 'text'" must evaluate to that text.
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    namespace, checked = {}, []
    for line in block.splitlines():
        code, _, comment = line.partition("#")
        expected = re.match(r"\s*'([^']*)'", comment)
        if expected and code.strip() and "=" not in code:
            assert eval(code, namespace) == expected.group(1), line  # noqa: S307 - our own README
            checked.append(expected.group(1))
        else:
            exec(line, namespace)  # noqa: S102
    assert "14.00 GB" in checked and "56.00 GB" in checked


# ---- the trainable state, the optimizer's bytes by kind, structured notes -------------------------------
def test_optimizer_states_by_kind_for_gpt2():
    # Measured with torch 2.13 (validation/measure.py): AdamW keeps exp_avg and exp_avg_sq (4 B each in
    # fp32) and one 4-byte step per tensor; GPT2LMHeadModel has 148 parameter tensors.
    m = mm.training_memory("gpt2", precision="fp32", optimizer="adamw")
    detail = m.optimizer_state_detail
    assert (detail.moments, detail.step_counters, detail.block_constants) == (8 * 124_439_808, 4 * 148, 0)
    assert m.trainable_tensors == 148


def test_eight_bit_adam_block_constants():
    # bitsandbytes: one fp32 absmax per 256 values per state; a uniform model counts 7e9 values in one set.
    m = mm.training_memory(SEVEN_B, precision="bf16", optimizer="adam8bit")
    assert m.optimizer_state_detail.block_constants == 2 * -(-7 * 10**9 // 256) * 4
    assert m.optimizer_state_detail.moments == 2 * 7 * 10**9  # two 1-byte states


def test_trainable_state_counts_everything_kept_per_trainable_parameter():
    # nanotron's recipe: 2 B gradients + 4 B fp32 accumulation + 4 B master + 8 B Adam = 18 B besides the weights.
    m = mm.training_memory(SEVEN_B, precision="mixed_fp32_grads", optimizer="adam")
    assert m.trainable_state == 18 * 7 * 10**9


def test_notes_have_a_kind_and_show_their_text():
    m = mm.training_memory(SEVEN_B)
    note = next(n for n in m.notes if n.kind == "activations_not_estimated")
    assert str(note) == f"{note}" == note.text and note.text.startswith("activations not estimated")


def test_a_bare_count_is_marked_not_recognised_by_its_name():
    with pytest.raises(ValueError, match="plain parameter count"):
        mm.training_memory(7 * 10**9, method=mm.Freeze(trainable_layers=1))
    # A one-layer uniform model that happens to carry the same display name is a real model.
    named = mm.uniform_model(7 * 10**9, 1, name="plain parameter count")
    assert mm.training_memory(named, method=mm.Freeze(trainable_layers=1)).trainable_params == 7 * 10**9


# ---- defaults: the run transformers makes, for a model read from a config ---------------------------
def test_a_model_read_from_a_config_is_costed_as_transformers_trains_it():
    from validation.published_configs import PUBLISHED_CONFIGS

    llama = mm.from_hf_config(PUBLISHED_CONFIGS["Meta-Llama-3-8B"])  # attention_dropout 0.0
    qlora = mm.QLoRA(rank=16, targets="all")
    default = mm.training_memory(llama, method=qlora, seq_len=1024)
    assert (default.activation_model, default.attention, default.dropout) == ("transformers", "sdpa", False)
    explicit = mm.training_memory(llama, method=qlora, seq_len=1024, activations="transformers", attention="sdpa",
                                  dropout=False)
    assert default.total == explicit.total
    gpt2 = mm.from_hf_config(PUBLISHED_CONFIGS["gpt2"])  # p = 0.1 in its config: dropout masks kept
    assert mm.training_memory(gpt2, seq_len=128).dropout is True
    # The textbook stays available by name, and chosen values are kept.
    textbook = mm.training_memory(llama, method=qlora, seq_len=1024, activations="textbook")
    assert (textbook.activation_model, textbook.attention) == ("textbook", "sdpa")


def test_layouts_the_trace_does_not_cover_fall_back_to_the_textbook_with_a_note():
    from validation.published_configs import PUBLISHED_CONFIGS

    # Mistral-7B slides a 4,096-token window: past it transformers builds a sliding mask, which the exact model
    # traces (tests/test_sliding_window.py); under AMP the autocast trace does not follow that mask,
    # so the default falls back to the textbook model with a note, and asking for the exact one is refused.
    mistral = mm.from_hf_config(PUBLISHED_CONFIGS["Mistral-7B-v0.1"])
    assert mm.training_memory(mistral, seq_len=8192).activation_model == "transformers"
    result = mm.training_memory(mistral, seq_len=8192, precision="amp")
    assert result.activation_model == "textbook"
    assert any(note.kind == "activations_textbook_fallback" for note in result.notes)
    with pytest.raises(ValueError, match="activations"):
        mm.training_memory(mistral, seq_len=8192, precision="amp", activations="transformers")


def test_gemma_2_is_traced_and_runs_eager_attention_by_default():
    # Gemma2PreTrainedModel has _supports_sdpa = False and transformers' SDPA refuses a softcap
    # (integrations/sdpa_attention.py): a Gemma 2 config trains with eager attention, traced exactly.
    from validation.published_configs import PUBLISHED_CONFIGS

    gemma = mm.from_hf_config(PUBLISHED_CONFIGS["gemma-2-2b"])
    result = mm.training_memory(gemma, seq_len=512)
    assert (result.activation_model, result.attention, result.dropout) == ("transformers", "eager", False)
    assert not any("textbook" in str(note) for note in result.notes)
    with pytest.raises(ValueError, match="attn_logit_softcapping"):
        mm.training_memory(gemma, seq_len=512, attention="sdpa", activations="transformers")
    # SDPA asked for by name: the trace cannot follow it, so the textbook, with a note that says why.
    sdpa = mm.training_memory(gemma, seq_len=512, attention="sdpa")
    assert sdpa.activation_model == "textbook" and any("attn_logit_softcapping" in str(n) for n in sdpa.notes)


def test_uniform_models_and_counts_keep_the_textbook_run():
    # No config, no layout to trace: Korthikanti et al. 2022's count, eager attention with dropout, said so.
    for model in (mm.uniform_model(7e9, 32, hidden_size=4096, n_heads=32), 7e9):
        result = mm.training_memory(model, seq_len=512)
        assert (result.activation_model, result.attention, result.dropout) == ("textbook", "eager", True)
    assert any(n.kind == "activations_textbook_fallback" for n in mm.training_memory(
        mm.uniform_model(7e9, 32, hidden_size=4096, n_heads=32), seq_len=512).notes)


def test_a_preset_built_in_code_trains_as_its_config_does():
    # gpt2 is built with gpt2_model; openai-community/gpt2's config.json (attn_pdrop = resid_pdrop = embd_pdrop
    # = 0.1) read by from_hf_config is the same model: the same run, the same bytes.
    from validation.published_configs import PUBLISHED_CONFIGS

    for preset, config in (("gpt2", "gpt2"), ("llama-3-8b", "Meta-Llama-3-8B"), ("bert-base-uncased", "bert-base-uncased")):
        built = mm.training_memory(preset, batch_size=2, seq_len=256)
        read = mm.training_memory(mm.from_hf_config(PUBLISHED_CONFIGS[config]), batch_size=2, seq_len=256)
        assert (built.activation_model, built.attention) == ("transformers", "sdpa")
        assert built.parts() == read.parts()
    assert mm.training_memory("gpt2", seq_len=256).dropout and not mm.training_memory("llama-3-8b", seq_len=256).dropout


def test_a_length_sweep_across_a_sliding_window_answers_each_length_exactly():
    # Gemma 3 1B (google/gemma-3-1b-pt config.json: sliding_window 512): below the window no sliding mask exists,
    # from it on eager's sliding layers get their own mask; a sweep over both gives each length what a single run
    # of that length gives (the exact model at every length).
    gemma = mm.PRESETS["gemma-3-1b"]
    run = dict(precision="bf16", optimizer="adamw", method=mm.Full(), batch_size=1, attention="eager")
    assert mm.training_memory(gemma, seq_len=512, **run).activation_model == "transformers"
    swept = mm.training_memory(gemma, seq_len=np.array([256, 1024]), **run)
    assert swept.activation_model == "transformers"
    assert [int(v) for v in swept.activations] == [int(mm.training_memory(gemma, seq_len=s, **run).activations)
                                                   for s in (256, 1024)]

def test_an_optimizer_entry_carries_its_label_and_its_update_rule():
    """One entry per optimizer: the lessons' menus, peak.py and parallel.py read its label and temporaries."""
    from memmath.recipes import OPTIMIZERS, TEMPORARIES, update_temporaries

    assert all(opt.label and opt.temporaries in TEMPORARIES for opt in OPTIMIZERS.values())
    # torch.optim.SGD updates in place; Adam's denominators are temporaries (torch/optim/adam.py)
    assert OPTIMIZERS["sgd_momentum"].temporaries == "none" and OPTIMIZERS["adamw"].temporaries == "adam"
    # CPU single-tensor Adam, hand-derived: tensors of 10, 30, 20 B -> max(2*10, 2*30 + 10, 2*20 + 30) = 70 B
    assert update_temporaries([10, 30, 20], "cpu") == 70
    assert update_temporaries([10, 30, 20], "cuda") == 60  # foreach: all of them together
    with pytest.raises(ValueError, match="temporaries"):
        dataclasses.replace(OPTIMIZERS["adamw"], temporaries="fused")

"""memmath.Run: one value for a training run, its defaults, what it resolves from the model, and its errors."""

import dataclasses

import numpy as np
import pytest

import memmath as mm
from validation.published_configs import PUBLISHED_CONFIGS


def test_every_setting_is_concrete_and_repr_says_what_is_assumed():
    run = mm.Run("gpt2")
    # GPT2Config: attn_pdrop = resid_pdrop = embd_pdrop = 0.1 -> dropout on; transformers picks SDPA.
    # Full()'s vision='trains' says what a vision-language model's tower would do; GPT-2 has none.
    assert repr(run) == ("Run(model='gpt2', precision='bf16', optimizer='adamw', method=Full(vision='trains'), "
                         "batch_size=1, grad_accum_steps=1, seq_len=2048, checkpointing=False, attention='sdpa', "
                         "dropout=True, "
                         "activations='transformers', device='cuda', mixer_kernels='cuda', n_gpus=1, zero_stage=0, sharding='even', rank=0, "
                         "tp=1, pp=1, cp=1, ep=1, sequence_parallel=False, pp_schedule='1f1b', micro_batches=1, virtual_stages=1, padded=False, packed=False, "
                         "kbit_prep=False, loss='transformers', offload=(), pin_memory=True, compile=False, "
                         "gradient_as_bucket_view=False, reshard_after_forward=True)")
    # mixer_kernels follows the device: a GPU runs the mixers' CUDA kernels where installed (none in GPT-2).
    assert run.defaulted == {"attention", "dropout", "activations", "mixer_kernels"}
    assert all(value is not None for value in run.settings().values())


def test_the_model_decides_what_it_can():
    # LlamaConfig's attention_dropout is 0.0: no dropout; Gemma 2 has no SDPA in transformers 5.24 (softcapping):
    # eager; a uniform model has no config: the textbook model (Korthikanti et al. 2022), eager, dropout.
    assert (mm.Run("llama-3-8b").attention, mm.Run("llama-3-8b").dropout) == ("sdpa", False)
    assert mm.Run("gemma-2-2b").attention == "eager"
    uniform = mm.Run(mm.uniform_model(7e9, 32, hidden_size=4096, n_heads=32))
    assert (uniform.activations, uniform.attention, uniform.dropout) == ("textbook", "eager", True)
    assert any(n.kind == "activations_textbook_fallback" for n in uniform.notes)


def test_a_choice_is_kept_and_replace_resolves_the_rest_again():
    chosen = mm.Run("gpt2", attention="eager", dropout=False)
    assert (chosen.attention, chosen.dropout, chosen.defaulted) == ("eager", False, frozenset({"activations", "mixer_kernels"}))
    # Adapters in GPT-2 are not traced (BERT's blocks and the LLaMA-layout decoders are): the textbook model, said why...
    adapters = mm.Run("gpt2", method=mm.Adapters())
    assert adapters.activations == "textbook" and "Houlsby adapters" in str(adapters.notes[0])
    # ... and a change of method resolves the activation model again, as a run built afresh would.
    assert adapters.replace(method=mm.LoRA()).activations == "transformers"
    assert adapters.replace(method=mm.LoRA()) == mm.Run("gpt2", method=mm.LoRA())
    with pytest.raises(TypeError, match="not a setting"):
        chosen.replace(learning_rate=1e-4)


def test_a_run_is_a_frozen_hashable_value():
    a, b = mm.Run("gpt2", batch_size=2), mm.Run("gpt2", batch_size=2)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.batch_size = 4
    # A reassigned preset is another model: the run holds the shape, not the name, so no stale answer is reused.
    assert mm.Run(mm.PRESETS["gpt2"]) == mm.Run("gpt2") != mm.Run(mm.PRESETS["gpt2"].with_changes(n_layers=6))


@pytest.mark.parametrize("settings, field", [
    (dict(batch_size=0), "batch_size"), (dict(seq_len=2.5), "seq_len"), (dict(precision="bf17"), "precision"),
    (dict(attention="flash"), "attention"), (dict(dropout="yes"), "dropout"), (dict(n_gpus=2, rank=2), "rank"),
    (dict(zero_stage=4), "zero_stage"), (dict(activations="exact"), "activations"), (dict(device="tpu"), "device"),
    (dict(sharding="ddp"), "sharding"), (dict(method="lora"), "method"), (dict(grad_accum_steps=0), "grad_accum_steps"),
    (dict(grad_accum_steps=1.5), "grad_accum_steps"), (dict(grad_accum_steps=True), "grad_accum_steps"),
    (dict(grad_accum_steps=2**20 + 1), "grad_accum_steps"), (dict(grad_accum_steps="4"), "grad_accum_steps"),
])
def test_bad_input_names_the_field_once_on_construction(settings, field):
    with pytest.raises((ValueError, TypeError)) as error:
        mm.Run("gpt2", **settings)
    assert error.value.field == field and field in str(error.value)


def test_the_keyword_forms_are_the_run():
    run = mm.Run("llama-2-7b", method=mm.LoRA(rank=16), batch_size=2, seq_len=512)
    keywords = dict(method=mm.LoRA(rank=16), batch_size=2, seq_len=512)
    assert mm.training_memory(run) == mm.training_memory("llama-2-7b", **keywords)
    assert mm.peak_memory(run).total == mm.peak_memory("llama-2-7b", **keywords).total
    assert mm.requirement(run) == mm.requirement("llama-2-7b", **keywords)
    assert mm.training_memory(run).run == run
    with pytest.raises(TypeError, match="either a Run or a model"):
        mm.training_memory(run, batch_size=4)


def test_every_note_is_a_note_and_sharded_assumptions_read():
    # The FSDP2 note was a plain string once, and .assumptions raised AttributeError on it.
    memory = mm.training_memory("gpt2", n_gpus=2, zero_stage=3, sharding="fsdp2", precision="fp32")
    assert all(isinstance(n, mm.notes.Note) for n in memory.notes)
    assert "2 GPUs, ZeRO stage 3" in memory.assumptions
    with pytest.raises(TypeError, match="Note"):
        dataclasses.replace(memory, notes=("a plain string",))
    assert all(isinstance(n, mm.notes.Note) for n in mm.inference_memory(7e9).notes)


def test_one_decision_of_what_the_card_must_hold():
    # The peak where modelled (a step after the first, the optimizer's temporaries included: above the sum here,
    # GPT-2 under AMP with SDPA and no dropout), else the sum of the parts with the reason.
    amp = mm.requirement("gpt2", precision="amp", seq_len=128, dropout=False)
    assert amp.basis == "peak" and amp.bytes == mm.peak_memory("gpt2", precision="amp", seq_len=128,
                                                                dropout=False).total > amp.memory.total
    zero = mm.requirement("gpt2", n_gpus=2, zero_stage=3)
    assert zero.basis == "upper bound" and zero.bytes > zero.memory.total and "ZeRO" in zero.reason
    assert mm.planner.step_peak("gpt2", n_gpus=2, zero_stage=3) == (zero.bytes, "upper bound")
    with pytest.raises(ValueError) as error:
        mm.requirement("gpt2", batch_size=np.array([1, 2]))
    assert error.value.field == "batch_size"


def test_a_preset_and_its_published_config_are_one_run():
    for preset, config in (("gpt2", "gpt2"), ("bert-base-uncased", "bert-base-uncased"),
                           ("llama-3-8b", "Meta-Llama-3-8B"), ("mistral-7b", "Mistral-7B-v0.1")):
        read = mm.from_hf_config(PUBLISHED_CONFIGS[config]).with_changes(name=preset)
        assert mm.Run(preset, seq_len=1024) == mm.Run(read, seq_len=1024)


def test_the_cache_answers_each_run_with_its_own_notes():
    # A run that chose textbook activations and one that fell back to them are equal as runs (the same bytes), but
    # their notes say different things: the cache must not hand one the other's.
    chosen = mm.Run(mm.PRESETS["gemma-2-2b"], seq_len=512, attention="sdpa", activations="textbook")
    fallen = mm.Run(mm.PRESETS["gemma-2-2b"], seq_len=512, attention="sdpa")
    assert chosen == fallen and chosen.notes != fallen.notes
    assert mm.requirement(chosen).reason != mm.requirement(fallen).reason
    # the cached answer may be an earlier call's for an equal run: its notes must be this run's
    answered = mm.training_memory(fallen).run
    assert answered == fallen and answered.notes == fallen.notes and answered.defaulted == fallen.defaulted
    assert any("attn_logit_softcapping" in str(n) for n in mm.training_memory(fallen).notes)


def test_sdpa_is_not_suggested_where_transformers_cannot_run_it():
    # Gemma 2 softcaps its scores; transformers' SDPA refuses a softcap, so the planner never proposes it there.
    changes = mm.planner.suggest_changes("gemma-2-2b", "T4", seq_len=4096, batch_size=2)
    assert "fused attention (sdpa)" not in {s.change for s in changes}
    assert "fused attention (sdpa)" in {s.change for s in mm.planner.suggest_changes("gpt2", "T4", seq_len=4096,
                                                                              attention="eager", batch_size=8)}


def test_a_change_to_an_unmodelled_peak_saves_only_what_its_bound_is_below_the_peak():
    # GPT-2 at 128 tokens on 2 GPUs with DDP: the run is judged on its peak (the optimizer step's temporaries and
    # DDP's buckets above the sum); ZeRO has no peak model and is judged on a bound, so a ZeRO change saves that
    # peak less its bound, never the gap between the peak and a sum.
    before = mm.requirement("gpt2", seq_len=128, n_gpus=2)
    assert before.basis == "peak"
    changes = mm.planner.suggest_changes("gpt2", "T4", seq_len=128, n_gpus=2)
    zeros = [s for s in changes if "ZeRO" in s.change]
    assert zeros
    for zero in zeros:
        assert zero.basis == "upper bound" and zero.saved == before.bytes - zero.total > 0


def test_gradient_accumulation_is_a_setting_and_the_effective_batch_its_product():
    # transformers' TrainingArguments: gradient_accumulation_steps defaults to 1; the update sees
    # per_device_train_batch_size x gradient_accumulation_steps sequences per device.
    assert mm.Run("gpt2").grad_accum_steps == 1 and mm.Run("gpt2").effective_batch == 1
    run = mm.Run("gpt2", batch_size=4, grad_accum_steps=8)
    assert (run.batch_size, run.grad_accum_steps, run.effective_batch) == (4, 8, 32)
    assert "batch_size=4, grad_accum_steps=8," in repr(run) and run.settings()["grad_accum_steps"] == 8
    # Another run (and another cache key) than the same micro-batch stepped after each batch, and replace keeps it.
    assert run != run.replace(grad_accum_steps=1) and run.cache_key != run.replace(grad_accum_steps=1).cache_key
    assert run.replace(batch_size=2).grad_accum_steps == 8
    # A sweep over the micro-batch gives an array of effective batches; the accumulation itself is one number.
    assert list(mm.Run("gpt2", batch_size=np.array([1, 2]), grad_accum_steps=3).effective_batch) == [3, 6]
    with pytest.raises(ValueError) as error:
        mm.Run("gpt2", grad_accum_steps=np.array([1, 2]))
    assert error.value.field == "grad_accum_steps"


def test_accumulation_changes_the_peak_not_the_parts():
    # training_memory adds up what a step keeps: weights, gradients, states and one micro-batch's activations, the
    # same with or without accumulation. The peak is higher: a later micro-batch runs its forward with every
    # gradient alive, and with the previous micro-batch's loss (one fp32 value, 4 B) until this one replaces it.
    # Measured (validation/grad_accum.py, every full-finetuning case): the second micro-batch's forward peak is the
    # first's plus exactly the gradients' bytes + 4.
    one, four = mm.Run("llama-2-7b", batch_size=2, seq_len=512), mm.Run("llama-2-7b", batch_size=2, seq_len=512,
                                                                         grad_accum_steps=4)
    assert mm.training_memory(one).parts() == mm.training_memory(four).parts()
    gradients = int(mm.training_memory(one).gradients)
    assert gradients == 2 * 6_738_415_616  # Llama-2-7B's parameters, 2 B each in pure bf16
    first_one, first_four = mm.peak_memory(one, step="first"), mm.peak_memory(four, step="first")
    assert first_four.forward == first_one.forward + gradients + 4
    assert any(n.kind == "grad_accum_peak" and "effective batch of 8" in str(n) for n in first_four.notes)
    # In the steady step forward and backward are higher too (here the optimizer step, weights, gradients and
    # states, is higher still, the same in both).
    steady_one, steady_four = mm.peak_memory(one), mm.peak_memory(four)
    assert steady_four.backward > steady_one.backward and steady_four.optimizer_step == steady_one.optimizer_step


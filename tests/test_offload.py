"""Offloading (memmath/offload.py): the GPU's share and the host RAM, against DeepSpeed's own estimators.

DeepSpeed's formulas are transcribed below from microsoft/DeepSpeed, deepspeed/runtime/zero/
stage_1_and_2.py (estimate_zero2_model_states_mem_needs) and deepspeed/runtime/zero/stage3.py
(estimate_zero3_model_states_mem_needs). Their cpu figure is per node (every GPU's partition on
it) times additional_buffer_factor (1.5 by default); memmath's host part is per GPU and exact, so
the comparisons multiply it by the GPUs on the node and the factor.
"""

from __future__ import annotations

import json

import numpy as np

import pytest

import memmath as mm
from memmath import cli, validate
from memmath.planner import suggest_changes, suggestions_frame

P_7B = 7_000_000_000  # a model size for the formulas; a parameter count has no step counters or layers
LLAMA2_7B_PARAMS = 6_738_415_616  # meta-llama/Llama-2-7b-hf, counted by PyTorch on the meta device
# Llama-2-7B's config.json: vocab 32,000, hidden 4,096, intermediate 11,008. DeepSpeed's largest layer is the
# module owning the most parameters itself: embed_tokens (and lm_head), 32,000 x 4,096.
LLAMA2_7B_LARGEST_LAYER = 32_000 * 4_096
# FSDP2 root: embed_tokens + lm_head + the final RMSNorm; one LlamaDecoderLayer: q, k, v, o (4 x 4,096^2),
# gate, up, down (3 x 4,096 x 11,008) and two RMSNorms (2 x 4,096).
LLAMA2_7B_ROOT = 2 * 32_000 * 4_096 + 4_096
LLAMA2_7B_BLOCK = 4 * 4_096 ** 2 + 3 * 4_096 * 11_008 + 2 * 4_096


# deepspeed/runtime/zero/stage_1_and_2.py, estimate_zero2_model_states_mem_needs (returns cpu, gpu)
def ds_zero2(total_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True, additional_buffer_factor=1.5):
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


# deepspeed/runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs (returns cpu, gpu, largest layer memory)
def ds_zero3(total_params, largest_layer_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True,
             cpu_offload_params=True, zero_init=True, additional_buffer_factor=1.5):
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = (4 * largest_layer_params)
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * 18 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 18 * gpus_factor) * additional_buffer_factor
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            if zero_init:
                cpu_mem = total_params * 16 * gpus_factor * additional_buffer_factor
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 16 * gpus_factor) * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem), largest_layer_memory


def model_states(model, **settings):
    """The GPU's parts and the host part of a run without activations (what DeepSpeed's estimators count)."""
    memory = mm.training_memory(model, precision="mixed", seq_len=None, **settings)
    return memory, int(memory.total), memory.host


@pytest.mark.parametrize("n_gpus", [1, 2, 4])
def test_zero2_offload_matches_deepspeeds_estimator(n_gpus):
    memory, gpu, host = model_states(P_7B, zero_stage=2, n_gpus=n_gpus, offload="optimizer")
    cpu_mem, gpu_mem = ds_zero2(P_7B, num_gpus_per_node=n_gpus)
    assert gpu == gpu_mem == 2 * P_7B  # the 16-bit weights alone
    # up to 4 GPUs DeepSpeed's max(4 x GPUs, 16) is 16 B per parameter on the node: fp32 master, fp32 gradients,
    # Adam's two moments
    assert int(host.total) * n_gpus * 1.5 == cpu_mem
    assert (host.master_weights, host.gradients, host.optimizer_states) == (4 * P_7B // n_gpus, 4 * P_7B // n_gpus,
                                                                             8 * P_7B // n_gpus)


def test_zero2_offload_pins_the_master_partition_and_with_pin_memory_the_gradients():
    _, _, pinned = model_states(P_7B, zero_stage=2, offload="optimizer")
    _, _, pageable = model_states(P_7B, zero_stage=2, offload="optimizer", pin_memory=False)
    # stage_1_and_2.py: the fp32 partition is pinned under cpu_offload; the gradient partition with pin_memory
    assert pinned.pinned == 8 * P_7B and pageable.pinned == 4 * P_7B


def test_zero1_offload_keeps_the_16_bit_gradients_on_the_gpu():
    _, gpu, host = model_states(P_7B, zero_stage=1, offload="optimizer")
    assert gpu == 4 * P_7B and host.total == 16 * P_7B


@pytest.mark.parametrize("params", [False, True])
def test_zero3_offload_matches_deepspeeds_estimator(params):
    n = 8
    offload = "optimizer,params" if params else "optimizer"
    memory, gpu, host = model_states("llama-2-7b", zero_stage=3, n_gpus=n, offload=offload)
    assert memory.total_params == LLAMA2_7B_PARAMS
    cpu_mem, gpu_mem, layer_mem = ds_zero3(LLAMA2_7B_PARAMS, LLAMA2_7B_LARGEST_LAYER, num_gpus_per_node=n,
                                           cpu_offload_params=params)
    assert gpu == gpu_mem
    assert layer_mem == int(memory.weights + memory.gradients) - (0 if params else 2 * LLAMA2_7B_PARAMS // n)
    # torch's AdamW keeps a 4-byte step per tensor (291 in Llama-2-7B), which DeepSpeed's estimator leaves out
    steps = memory.optimizer_state_detail.step_counters
    assert steps == 4 * 291
    assert 0 <= int(host.total) * n - cpu_mem / 1.5 <= steps + n


def test_the_largest_layer_is_the_module_owning_the_most_parameters():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=32_000, hidden_size=4_096, intermediate_size=11_008,
                                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    # deepspeed/runtime/zero/stage3.py, model_to_params: each module's own parameters (recurse=False)
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    assert largest == LLAMA2_7B_LARGEST_LAYER
    from memmath.offload import largest_layer_params

    assert largest_layer_params(mm.Run("llama-2-7b").model) == largest


def test_fsdp2_cpu_offload_keeps_the_root_and_two_blocks_on_the_gpu():
    settings = dict(n_gpus=8, zero_stage=3, sharding="fsdp2", seq_len=None)
    on_gpu = mm.training_memory("llama-2-7b", **settings)
    offloaded = mm.training_memory("llama-2-7b", offload="params", **settings)
    host = offloaded.host
    # bf16: 2 B per all-gathered element; Llama-2-7B's dimensions all divide by 8, so no padding
    assert offloaded.weights == 2 * (LLAMA2_7B_ROOT + 2 * LLAMA2_7B_BLOCK)
    assert offloaded.gradients == 2 * (LLAMA2_7B_ROOT + LLAMA2_7B_BLOCK)
    assert offloaded.optimizer_states == 0
    # the shards the GPU held without offloading now sit in host memory: 2 B x P / 8 of weights and of gradients
    assert (host.weights, host.gradients, host.optimizer_states) == (on_gpu.weights, on_gpu.gradients,
                                                                     on_gpu.optimizer_states)
    assert host.weights == 2 * LLAMA2_7B_PARAMS // 8
    assert host.pinned == host.weights + host.gradients  # CPUOffloadPolicy pins parameters and gradients


def test_activation_offloading_moves_the_saved_tensors_to_the_host():
    plain = mm.training_memory("gpt2", batch_size=4, seq_len=512)
    moved = mm.training_memory("gpt2", batch_size=4, seq_len=512, offload="activations", pin_memory=False)
    assert moved.host.activations == plain.activations > 0 and moved.host.pinned == 0
    estimate = plain.activation_detail
    # one block of GPT-2's twelve stays, with what is saved outside the blocks and the loss's
    assert moved.activations == (max(estimate.per_layer, estimate.first_layer or 0) + estimate.outside_layers
                                 + estimate.loss)
    assert moved.activations < plain.activations  # GPT-2 at 4 x 512 tokens: its 50,257-wide logits dominate what stays
    assert moved.weights == plain.weights and moved.optimizer_states == plain.optimizer_states


def test_the_requirement_bounds_the_gpus_share_with_the_steps_transients():
    run = mm.Run("gpt2", batch_size=4, seq_len=512, offload="activations")  # bf16 AdamW, sdpa, dropout on
    need = mm.requirement(run)
    # GPT-2: 124,439,808 parameters, hidden 768, 12 heads, MLP 3,072, vocabulary 50,257; t = 4 x 512 tokens.
    t, h, heads, inner = 4 * 512, 768, 12, 3072
    temporaries = 2 * 124_439_808  # foreach AdamW's temporaries on the GPU, as large as the bf16 weights
    loss = t * 50_257 * (2 + 12)  # the bf16 logits, their fp32 copy and two fp32 gradients
    # one block made again (Korthikanti et al. 2022: 34 sbh with flash attention, no s^2 terms, plus sdpa's fp32
    # logsumexp of 4 B x heads x tokens) and its backward's gradients (2 B x t x (h + 3 x inner))
    block = 34 * t * h + 4 * heads * t + 2 * t * (h + 3 * inner)
    assert need.basis == "upper bound" and "offloading" in need.reason
    assert need.bytes == int(mm.training_memory(run).total) + temporaries + loss + block


def test_an_optimizer_stepping_on_the_cpu_leaves_no_temporaries_on_the_gpu():
    deepspeed = mm.requirement(mm.Run("llama-2-7b", precision="mixed", zero_stage=2, offload="optimizer",
                                      seq_len=1024, batch_size=1))
    fsdp2 = mm.requirement(mm.Run("llama-2-7b", n_gpus=8, zero_stage=3, sharding="fsdp2", offload="params",
                                  seq_len=1024, batch_size=1))
    saved_only = mm.requirement(mm.Run("llama-2-7b", offload="activations", seq_len=1024, batch_size=1))
    temporaries = "the optimizer step's temporaries"
    assert temporaries not in deepspeed.reason and temporaries not in fsdp2.reason and temporaries in saved_only.reason
    # ZeRO-Offload carries the gradients to the host through DeepSpeed's buckets, even on one GPU
    assert "ZeRO's two reduce buckets" in deepspeed.reason


def test_offload_names_are_one_tuple_in_a_fixed_order():
    a = mm.Run("llama-2-7b", precision="mixed", zero_stage=3, offload=["params", "optimizer"])
    b = mm.Run("llama-2-7b", precision="mixed", zero_stage=3, offload="optimizer, params")
    assert a.offload == b.offload == ("optimizer", "params") and a == b


def test_compile_is_noted_never_ignored():
    run = mm.Run("gpt2", compile=True)
    assert [n.kind for n in run.notes] == ["compile_eager_activations"]
    assert "compile_eager_activations" in [n.kind for n in mm.training_memory(run).notes]
    assert mm.Run("gpt2").notes == ()


@pytest.mark.parametrize("settings, field, words", [
    (dict(offload="gpu"), "offload", ["optimizer, params, activations", "'gpu'"]),
    (dict(offload="optimizer"), "offload", ["zero_stage=1, 2 or 3"]),
    (dict(offload="optimizer", zero_stage=2), "offload", ["precision='mixed'"]),
    (dict(offload="params", precision="mixed", zero_stage=2), "offload", ["zero_stage=3", "optimizer,params"]),
    (dict(offload="optimizer", n_gpus=2, zero_stage=3, sharding="fsdp2"), "offload", ["offload='params'"]),
    (dict(offload="optimizer", n_gpus=2, zero_stage=1, sharding="zero_redundancy"), "offload", ["fsdp2"]),
    (dict(offload="activations", n_gpus=2, tp=2), "offload", ["data parallelism"]),
    (dict(offload="activations", method=mm.DPO()), "offload", ["DPO"]),
    (dict(compile="yes"), "compile", ["True or False"]),
    (dict(pin_memory=1.5), "pin_memory", ["True or False"]),
])
def test_bad_input_names_the_field(settings, field, words):
    with pytest.raises((ValueError, TypeError)) as caught:
        mm.Run("gpt2", **settings)
    assert caught.value.field == field
    for word in words:
        assert word in str(caught.value)


def test_a_value_of_the_wrong_kind_is_a_type_error():
    with pytest.raises(validate.FieldTypeError, match="optimizer, params, activations"):
        mm.Run("gpt2", offload=3)


def test_zero_stage_3_on_a_parameter_count_says_the_largest_layer_is_not_counted():
    memory, gpu, host = model_states(P_7B, zero_stage=3, offload="optimizer")
    assert gpu == 2 * P_7B and host.total == 16 * P_7B
    assert "offload_largest_layer_not_counted" in [n.kind for n in memory.notes]


def test_with_checkpointing_the_recomputed_block_stays_on_the_gpu():
    plain = mm.training_memory("gpt2", batch_size=4, seq_len=512, checkpointing=True)
    moved = mm.training_memory("gpt2", batch_size=4, seq_len=512, checkpointing=True, offload="activations")
    estimate = plain.activation_detail
    assert estimate.recompute_peak > 0
    # the checkpoints (each block's input) go to the host; the recomputed block's tensors are made during backward
    assert moved.host.activations == plain.activations - estimate.recompute_peak
    assert moved.activations == (max(estimate.per_layer, estimate.first_layer or 0) + estimate.recompute_peak
                                 + estimate.outside_layers + estimate.loss)


def test_a_sweep_offloads_point_by_point():
    lengths = np.array([256, 512])
    swept = mm.training_memory("gpt2", seq_len=lengths, offload="activations")
    for i, length in enumerate(lengths):
        single = mm.training_memory("gpt2", seq_len=int(length), offload="activations")
        assert (swept.activations[i], swept.host.activations[i]) == (single.activations, single.host.activations)


def test_the_planner_keeps_deepspeeds_fp32_master_copy():
    run = mm.Run("llama-2-7b", precision="mixed", zero_stage=2, offload="optimizer,activations", seq_len=4096,
                 batch_size=8)
    plan = mm.plan_training(run, "RTX 4090")
    assert plan.fits is False and plan.changes
    assert all(s.run.precision == "mixed" and set(run.offload) <= set(s.run.offload) for s in plan.changes)


# 16 B per parameter in host RAM: fp32 master weights, fp32 gradients and Adam's two fp32 moments, plus torch
# Adam's 4-byte step counter for each of Llama-2-7B's 291 tensors (32 blocks x 9, embeddings, final norm, head).
LLAMA2_7B_ZERO_OFFLOAD_HOST = 16 * LLAMA2_7B_PARAMS + 4 * 291


def _change(changes, name):
    return next(s for s in changes if s.change == name)


def test_the_planner_offers_zero_offload_with_its_host_ram():
    run = mm.Run("llama-2-7b", precision="mixed", seq_len=1024, batch_size=1)
    offload = _change(mm.plan_training(run, "A100 40GB").changes, "ZeRO-Offload: optimizer in host RAM")
    # ZeRO-Offload trains on one GPU from ZeRO stage 2 (Ren et al. 2021, "ZeRO-Offload", section 4)
    assert offload.run.offload == ("optimizer",) and offload.run.zero_stage == 2 and offload.run.n_gpus == 1
    assert offload.host_bytes == LLAMA2_7B_ZERO_OFFLOAD_HOST and offload.fits
    # the GPU keeps the 16-bit weights, no gradient part (stage 2 reduces straight to the host) and the activations
    parts = mm.training_memory(offload.run)
    assert (parts.weights, parts.gradients, parts.optimizer_states) == (2 * LLAMA2_7B_PARAMS, 0, 0)


def test_the_planner_offers_activation_offloading_and_fsdp2s_cpu_offload():
    run = mm.Run("llama-2-13b", precision="bf16", seq_len=4096, batch_size=8, n_gpus=2, zero_stage=3,
                 sharding="fsdp2")
    changes = suggest_changes(run, "A100 40GB")
    acts = _change(changes, "activations in host RAM (save_on_cpu)")
    fsdp = _change(changes, "FSDP2 CPU offload: shards in host RAM")
    assert acts.run.offload == ("activations",) and fsdp.run.offload == ("params",)
    assert acts.host_bytes == mm.training_memory(acts.run).host.total > 0
    assert fsdp.host_bytes == mm.training_memory(fsdp.run).host.total > 0


def test_offloading_comes_after_a_smaller_batch_and_before_more_gpus():
    # Nothing that keeps the host's share fits this run on two A100 40GB; FSDP2's CPU offload does, so the path
    # ends there instead of buying GPUs.
    run = mm.Run("llama-2-13b", precision="bf16", seq_len=4096, batch_size=8, n_gpus=2, zero_stage=3,
                 sharding="fsdp2")
    path = mm.plan_training(run, "A100 40GB").path
    assert [s.run.n_gpus for s in path] == [2] * len(path) and path[-1].fits
    assert path[-1].run.offload == ("params",) and not any(s.run.offload for s in path[:-1])


def test_a_run_already_offloading_everything_is_offered_no_more_offloading():
    run = mm.Run("llama-2-7b", precision="mixed", zero_stage=3, n_gpus=2, offload="optimizer,params,activations",
                 seq_len=4096, batch_size=8)
    assert all(s.run.offload == run.offload for s in suggest_changes(run, "RTX 4090"))


def test_the_suggestions_table_has_the_host_ram():
    run = mm.Run("llama-2-7b", precision="mixed", seq_len=1024, batch_size=1)
    frame = suggestions_frame(suggest_changes(run, "RTX 4090"))
    row = frame[frame["change"] == "ZeRO-Offload: optimizer in host RAM"].iloc[0]
    assert row["host RAM (GB)"] == LLAMA2_7B_ZERO_OFFLOAD_HOST / 1e9
    assert (frame[frame["change"] == "LoRA rank 8 on q, v"]["host RAM (GB)"] == 0).all()


# ---- the command line ------------------------------------------------------------------------
def run_cli(capsys, *argv):
    status = cli.main(["train", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_command_line_names_the_host_ram(capsys):
    status, out, err = run_cli(capsys, "llama-2-7b", "--precision", "mixed", "--zero-stage", "2", "--offload",
                               "optimizer", "--seq", "1024", "--unit", "GB")
    assert status == 0 and err == ""
    # 16 B per parameter: fp32 master 26.95 GB + fp32 gradients 26.95 GB + Adam's moments 53.91 GB (and 291 steps)
    assert "Host RAM (DeepSpeed ZeRO-Offload): 107.81 GB per GPU" in " ".join(out.split())


def test_the_command_line_json_carries_the_host_part(capsys):
    status, out, _ = run_cli(capsys, "llama-2-7b", "--gpus", "8", "--zero-stage", "3", "--sharding", "fsdp2",
                             "--offload", "params", "--offload", "activations", "--compile", "--json")
    report = json.loads(out)
    run = mm.Run("llama-2-7b", n_gpus=8, zero_stage=3, sharding="fsdp2", offload="params,activations", compile=True)
    memory = mm.training_memory(run)
    assert report["settings"]["offload"] == ["params", "activations"] and report["settings"]["sharding"] == "fsdp2"
    assert report["host"] == memory.host.to_dict() and report["host"]["all_gpus"] == 8 * report["host"]["total"]
    assert report["parts"]["weights"] == 2 * (LLAMA2_7B_ROOT + 2 * LLAMA2_7B_BLOCK)
    assert "eager" in report["assumptions"]["torch_compile"]
    assert any("compile=True" in note for note in report["assumptions"]["notes"])


def test_the_command_line_without_offloading_has_no_host_part(capsys):
    _, out, _ = run_cli(capsys, "gpt2", "--json")
    assert json.loads(out)["host"] is None


@pytest.mark.parametrize("argv, words", [
    (["--offload", "gpu"], ["--offload", "optimizer, params, activations"]),
    (["--offload", "optimizer"], ["--offload", "zero_stage"]),
    (["--sharding", "ddp"], ["--sharding"]),
])
def test_the_command_line_refuses_bad_offloading_with_exit_2(capsys, argv, words):
    with pytest.raises(SystemExit) if argv[0] == "--sharding" else _no_raise() as caught:
        status = cli.main(["train", "gpt2", *argv])
    err = capsys.readouterr().err
    status = caught.value.code if argv[0] == "--sharding" else status
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for word in words:
        assert word in err


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_peak_model_refuses_an_offloading_run_by_name():
    with pytest.raises(ValueError, match="offloading"):
        mm.peak_memory(mm.Run("gpt2", batch_size=4, seq_len=512, offload="activations"))


def test_save_on_cpu_packs_a_linears_weight_too():
    # the note's warning: autograd's pack hook (which save_on_cpu installs) sees the weight a Linear saves
    torch = pytest.importorskip("torch")
    linear = torch.nn.Linear(8, 16)
    packed = []

    def pack(tensor):
        packed.append(tensor.data_ptr() == linear.weight.data_ptr())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        linear(torch.randn(4, 8, requires_grad=True)).sum()
    assert any(packed)
    note = [str(n) for n in mm.training_memory("gpt2", offload="activations").notes if n.kind == "offload_activations"]
    assert "weights' 248,879,616 B" in note[0]  # GPT-2's 124,439,808 parameters in bf16


def test_the_command_line_prints_an_offloading_changes_host_ram(capsys):
    status, out, _ = run_cli(capsys, "llama-2-7b", "--precision", "mixed", "--seq", "1024", "--batch", "1",
                             "--gpu", "A100 40GB", "--unit", "GB")
    text = " ".join(out.split())
    assert status == 1 and "ZeRO-Offload: optimizer in host RAM" in text
    assert f"host RAM at least {LLAMA2_7B_ZERO_OFFLOAD_HOST / 1e9:.2f} GB per GPU" in text  # 107.81 GB
    _, out, _ = run_cli(capsys, "llama-2-7b", "--precision", "mixed", "--seq", "1024", "--batch", "1",
                        "--gpu", "A100 40GB", "--json")
    change = next(c for c in json.loads(out)["changes"] if c["change"] == "ZeRO-Offload: optimizer in host RAM")
    assert change["host_bytes"] == LLAMA2_7B_ZERO_OFFLOAD_HOST and change["settings"]["offload"] == ["optimizer"]


def test_a_requirement_below_the_sum_of_the_parts_prints_without_an_error(capsys):
    # FSDP2's modelled peak (memmath/sharded_peak.py) can be below the sharded run's sum of the parts
    status, out, err = run_cli(capsys, "llama-2-13b", "--precision", "bf16", "--seq", "4096", "--batch", "8",
                               "--gpus", "2", "--zero-stage", "3", "--sharding", "fsdp2")
    need = mm.requirement(mm.Run("llama-2-13b", precision="bf16", seq_len=4096, batch_size=8, n_gpus=2,
                                 zero_stage=3, sharding="fsdp2"))
    assert status == 0 and err == "" and need.bytes < int(need.memory.total)
    assert need.basis == "peak" and f"Peak of the step ({need.peak.phase}) {need.bytes:,}" in " ".join(out.split())


def test_zero_infinity_is_offered_on_one_gpu():
    # ZeRO-Infinity (Rajbhandari et al. 2021) runs at stage 3 on any number of GPUs: with one GPU allowed, the
    # weights and the optimizer in host RAM are what lets Llama-3-70B's full finetune fit an A100 80GB.
    run = mm.Run("llama-3-70b", precision="mixed", seq_len=1024, checkpointing=True)
    infinity = _change(suggest_changes(run, "A100 80GB", max_gpus=1), "ZeRO-Infinity: optimizer and weights in host RAM")
    assert infinity.run.offload == ("optimizer", "params") and infinity.run.zero_stage == 3
    assert infinity.run.n_gpus == 1 and infinity.fits


def test_deepspeeds_gpu_staging_buffer_is_in_the_bound():
    # stage_1_and_2.py's temp_grad_buffer_for_gpu_offload: the largest parameter in the gradients' 16-bit format;
    # Llama-2-7B's largest is embed_tokens (and lm_head), 32,000 x 4,096.
    need = mm.requirement(mm.Run("llama-2-7b", precision="mixed", zero_stage=2, offload="optimizer", seq_len=1024,
                                 batch_size=1))
    assert f"the largest parameter) {2 * LLAMA2_7B_LARGEST_LAYER:,} B" in need.reason


def test_a_model_given_by_its_parameter_count_gets_changes_without_lora():
    # No named matrices to adapt: LoRA and QLoRA are left out, the other changes stand.
    changes = [s.change for s in suggest_changes(mm.Run(7_000_000_000), "A100 80GB")]
    assert changes and not any("LoRA" in change for change in changes)

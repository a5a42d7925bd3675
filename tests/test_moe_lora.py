"""LoRA on mixtures of experts as peft 0.21 makes it: what each target adapts, against peft; the refusals;
and the CPU measurements of validation/moe_lora.py (memmath_lessons/reference/data/measured_moe_lora.json, every case
recorded after the prediction code: held out), replayed without torch.

What peft 0.21 on transformers 5.24 adapts with target_modules="all-linear":
- Mixtral, Qwen3-MoE: the attention's linears, the router (mlp.gate.weight, rank r) and the routed experts'
  3-D gate_up_proj (rank 2r per expert) and down_proj (rank r per expert), through lora.ParamWrapper, since
  peft converts these model types' configs (utils/transformers_weight_conversion.py);
- Qwen2-MoE: the attention, the shared expert's gate_proj/up_proj/down_proj and shared_expert_gate only (peft
  does not convert qwen2_moe itself); its router and experts take target_parameters.
"""

from __future__ import annotations

import subprocess
import sys
from unittest import mock

import pytest

import memmath as mm
from memmath_lessons.reference.measured import (
    case_model, load_measured_moe_lora, predict_case, predict_peak_case, predicted_saved_per_layer,
)
from memmath.validate import FieldError
from validation import measure as M
from validation.moe_lora import WIDE_SHAPES, peft_lora_config
from validation.published_configs import PUBLISHED_CONFIGS

PUBLISHED = ("Mixtral-8x7B-v0.1", "Qwen3-30B-A3B", "Qwen1.5-MoE-A2.7B")
TINY = ("mixtral-moe", "qwen2moe-moe", "qwen3moe-moe") + tuple(WIDE_SHAPES)
# memmath targets ("all-linear": memmath's "all") and what they are on each family.
TARGETS = ("all-linear", "q+k+v+o", "experts", "router", "router+experts", "q+v+experts")
QWEN2_TARGETS = ("all-linear", "q+k+v+o", "gate+up+down", "shared_gate", "experts", "router+experts",
                 "q+k+v+o+gate+up+down+shared_gate+router+experts")


def _memmath_targets(targets: str):
    return "all" if targets == "all-linear" else tuple(targets.split("+"))


def _shape_spec(name):
    return WIDE_SHAPES.get(name) or M.SHAPES[name]


def _tiny_shape(name):
    return case_model({**_shape_spec(name), "shape": name})


def _peft_on_meta(torch, transformers, peft, hf_config, arch, targets, rank):
    with torch.device("meta"):
        base = transformers.AutoModelForCausalLM.from_config(hf_config)
    return peft.get_peft_model(base, peft_lora_config(arch, targets, rank))


def _block_adapters(model):
    """Shapes of block 0's LoRA parameters, in parameters() order."""
    return [tuple(p.shape) for n, p in model.named_parameters() if p.requires_grad and ".layers.0." in n]


def _memmath_block(shape, targets, rank):
    out = []
    for _, d_in, d_out, k in shape.lora_adapters(targets):
        out += [(k * rank, d_in), (d_out, k * rank)]
    return out


def _cases(targets_by_arch):
    for name in PUBLISHED:
        arch = PUBLISHED_CONFIGS[name]["model_type"]
        for targets in targets_by_arch(arch):
            yield pytest.param(name, targets, id=f"{name}-{targets}")


def _targets_of(arch):
    return QWEN2_TARGETS if arch == "qwen2_moe" else TARGETS


# ---- live: peft on the meta device ---------------------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("name, targets", list(_cases(_targets_of)))
def test_published_counts_equal_peft(torch, transformers, peft, name, targets):
    config = PUBLISHED_CONFIGS[name]
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    model = _peft_on_meta(torch, transformers, peft, hf_config, config["model_type"], targets, 16)
    trainable, _ = model.get_nb_trainable_parameters()
    shape = mm.from_hf_config(config)
    assert mm.LoRA(rank=16, targets=_memmath_targets(targets)).trainable_params(shape) == trainable
    assert _memmath_block(shape, _memmath_targets(targets), 16) == _block_adapters(model)


@pytest.mark.live
@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("rank", (4, 8))
def test_tiny_counts_and_tensors_equal_peft(torch, transformers, peft, name, rank):
    arch = _shape_spec(name)["arch"]
    with mock.patch.dict(M.SHAPES, WIDE_SHAPES):
        hf_config = M._hf_config(M.Case(name))
    shape = _tiny_shape(name)
    for targets in _targets_of(arch):
        model = _peft_on_meta(torch, transformers, peft, hf_config, arch, targets, rank)
        trainable, total = model.get_nb_trainable_parameters()
        assert mm.LoRA(rank=rank, targets=_memmath_targets(targets)).trainable_params(shape) == trainable, targets
        assert shape.n_params == total - trainable
        assert _memmath_block(shape, _memmath_targets(targets), rank) == _block_adapters(model), targets


@pytest.mark.live
def test_all_linear_is_the_plain_string_peft_takes(torch, transformers, peft):
    # peft_lora_config passes "all-linear" as it is: the count is peft's own resolution of it.
    assert peft_lora_config("mixtral", "all-linear", 8).target_modules == "all-linear"
    assert peft_lora_config("qwen2_moe", "router+experts", 8).target_parameters == [
        "gate.weight", "experts.gate_up_proj", "experts.down_proj"]


# ---- by hand --------------------------------------------------------------------------------------------------
def test_mixtral_all_by_hand():
    # Mixtral-8x7B, r = 16: per block q 16 (4096 + 4096), k and v 16 (4096 + 1024), o 16 (4096 + 4096); the router
    # 16 (4096 + 8); gate_up_proj 8 experts x 2 x 16 (4096 + 2 x 14336); down_proj 8 x 16 (14336 + 4096).
    per_block = (16 * (2 * 8192 + 2 * 5120) + 16 * (4096 + 8) + 8 * 32 * (4096 + 28672) + 8 * 16 * (14336 + 4096))
    assert mm.LoRA(rank=16, targets="all").trainable_params("mixtral-8x7b") == 32 * per_block == 359_665_664
    # Attention only is the 13,631,488 the command line printed for "all" before.
    assert mm.LoRA(rank=16, targets="attention").trainable_params("mixtral-8x7b") == 32 * 16 * (2 * 8192 + 2 * 5120)


def test_expert_adapters_memory_by_hand():
    # Pure bf16, AdamW, peft's fp32 adapters: weights are the bf16 base plus 4 B per adapter value; gradients
    # 4 B; AdamW two fp32 moments plus a 4-byte step per tensor (14 LoRA tensors per block: 7 adapted modules).
    trainable = 359_665_664
    m = mm.training_memory("mixtral-8x7b", method=mm.LoRA(rank=16, targets="all"), precision="bf16",
                           optimizer="adamw", seq_len=None)
    assert m.weights == 2 * 46_702_792_704 + 4 * trainable
    assert m.gradients == 4 * trainable
    assert m.optimizer_states == 8 * trainable + 4 * 14 * 32


def test_expert_adapters_keep_the_merged_weights():
    # The matmul reads W + BA, a tensor that requires grad, so it keeps it: per block the E x 2I x h and E x h x I
    # expert tensors and the E x h router in the model's dtype, whatever the batch (hf_activations._wrapped_weight).
    shape = _tiny_shape("mixtral-moe")  # h 64, I 96, 4 experts
    method = mm.LoRA(rank=8, targets="all")

    def saved(targets, **settings):
        run = dict(precision="bf16", batch_size=1, seq_len=16, attention="sdpa", dropout=False, device="cpu",
                   checkpointing=False)
        run.update(settings)
        return mm.training_memory(shape, method=mm.LoRA(rank=8, targets=targets), **run).activation_detail

    terms = {what: n for where, what, n in saved("all").terms if where == "each block"}
    assert terms["experts gate_up_proj W + BA (peft ParamWrapper)"] == 4 * 192 * 64 * 2
    assert terms["experts down_proj W + BA (peft ParamWrapper)"] == 4 * 64 * 96 * 2
    assert terms["router weight W + BA (peft ParamWrapper)"] == 4 * 64 * 2
    assert method.trainable_params(shape) > 0


# ---- refusals, the same way for every MoE family ------------------------------------------------------------
@pytest.mark.parametrize("name", PUBLISHED)
def test_missing_targets_are_refused_by_name(name):
    shape = mm.from_hf_config(PUBLISHED_CONFIGS[name])
    shared = bool(shape.shared_expert_intermediate_size)
    missing = () if shared else ("gate", "up", "down", "shared_gate")
    for target in missing:
        why = "it has no shared expert gate" if target == "shared_gate" else (
            "its MLP is the routed experts, 3-D tensors: target 'experts'")
        with pytest.raises(FieldError, match=rf"LoRA target '{target}' does not exist in a {shape.arch} model "
                           rf"\({why}\); allowed: q, k, v, o, router, experts$") as error:
            mm.LoRA(targets=(target,)).trainable_params(shape)
        assert error.value.field == "targets"
    # lora_matrices lists linear matrices: targets reaching the 3-D experts are refused there, by name.
    with pytest.raises(FieldError, match="routed experts' 3-D tensors") as error:
        shape.lora_matrices(("experts",))
    assert error.value.field == "targets"


def test_all_is_all_linear_and_every_name_is_more_on_qwen2_moe():
    # peft's all-linear leaves Qwen2-MoE's router and experts alone; naming every target adapts them too.
    shape = mm.from_hf_config(PUBLISHED_CONFIGS["Qwen1.5-MoE-A2.7B"])
    every = mm.LoRA(rank=8, targets=mm.models.LORA_TARGETS)
    assert mm.LoRA(rank=8, targets="all") != every
    assert {a.module for a in shape.lora_adapters(every.targets)} - {a.module for a in shape.lora_adapters("all")} == {
        "gate.weight", "experts.gate_up_proj", "experts.down_proj"}
    # Elsewhere the two agree (every name the model has).
    mixtral = mm.from_hf_config(PUBLISHED_CONFIGS["Mixtral-8x7B-v0.1"])
    assert mixtral.lora_adapters(mm.models.LORA_TARGETS) == mixtral.lora_adapters("all")
    assert mm.LoRA(targets="all").describe().startswith("LoRA rank 8 on all (what peft's all-linear adapts)")


@pytest.mark.parametrize("target", ("router", "experts", "shared_gate"))
def test_moe_targets_are_refused_on_dense_models(target):
    with pytest.raises(FieldError, match=f"LoRA target '{target}' does not exist in a llama model"):
        mm.LoRA(targets=(target,)).trainable_params("llama-2-7b")
    # "all" on a dense model is what it was: every linear layer.
    assert mm.LoRA(rank=16, targets="all").trainable_params("llama-2-7b") == 32 * 16 * (4 * 8192 + 3 * (4096 + 11008))


def test_command_line_targets():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "memmath", "train", "mixtral-8x7b", "--method", "lora",
                               "--rank", "16", "--seq", "256", *args], capture_output=True, text=True)

    done = run("--targets", "all")
    assert done.returncode == 0 and "359,665,664 trainable" in done.stdout.replace("\n  ", " ")
    done = run("--targets", "attention")
    assert done.returncode == 0 and "13,631,488 trainable" in done.stdout.replace("\n  ", " ")
    done = run("--targets", "gate")
    assert done.returncode == 2 and "target 'experts'" in done.stderr


# ---- the CPU measurements (held out) --------------------------------------------------------------------------
CASES = load_measured_moe_lora()
ROWS = {row.case_id: row._asdict() for row in CASES.itertuples(index=False)}
IDS = [pytest.param(case_id, id=f"held-out:{case_id}") for case_id in ROWS]


def test_the_file_holds_every_family_and_only_held_out_cases():
    assert set(CASES["arch"]) == {"mixtral", "qwen2_moe", "qwen3_moe"}
    assert CASES["held_out"].all() and len(CASES) >= 20
    assert {"all-linear", "experts"} <= set(CASES["lora_targets"])


@pytest.mark.parametrize("case_id", IDS)
def test_parameters_gradients_and_states_to_the_byte(case_id):
    row = ROWS[case_id]
    m = predict_case(row)
    assert int(m.trainable_params) == row["trainable_params"]
    assert int(m.total_params) == row["total_params"]
    assert int(m.weights) == row["param_bytes"]
    assert int(m.gradients) == row["grad_bytes"]
    assert int(m.optimizer_states) == row["optimizer_state_bytes"]


@pytest.mark.parametrize("case_id", IDS)
def test_saved_activations_to_the_byte_block_by_block(case_id):
    row = ROWS[case_id]
    assert int(predict_case(row).activation_detail.saved_by_forward) == row["saved_bytes"]
    assert predicted_saved_per_layer(row) == list(row["saved_per_layer"])


@pytest.mark.parametrize("step, column", (("first", "peak_step1_bytes"), ("steady", "peak_step2_bytes")))
@pytest.mark.parametrize("case_id", IDS)
def test_peak_within_five_percent(case_id, step, column):
    row = ROWS[case_id]
    predicted = int(predict_peak_case(row, step=step).total)
    assert abs(predicted - row[column]) <= 0.05 * row[column], f"predicted {predicted:,} B, measured {row[column]:,} B"


# ---- live: the recording still matches PyTorch today ---------------------------------------------------------
LIVE_SAMPLE = ("mixtral-moe/bf16/adamw/lora8-all-linear-fp32/sdpa/nodrop/nockpt/b2s64",
               "qwen2moe-moe/fp32/adamw/lora8-q+k+v+o+router+experts-fp32/eager/drop/nockpt/b1s48",
               "qwen3moe-moe/bf16/sgd_momentum/lora8-router-bf16/sdpa/nodrop/nockpt/b3s40")
EXACT = ("param_bytes", "grad_bytes", "optimizer_state_bytes", "saved_bytes", "saved_per_layer", "total_params",
         "trainable_params")


@pytest.mark.live
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("case_id", LIVE_SAMPLE)
def test_recorded_cases_measure_the_same_today(torch, transformers, peft, case_id):
    from validation import moe_lora

    case = next(c for c in moe_lora.grid() if c.case_id == case_id)
    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    try:
        [record] = moe_lora.run([case])
    finally:
        torch.set_num_threads(threads)
        torch.backends.mkldnn.enabled = onednn
    recorded, now = ROWS[case_id], record["measured"]
    for key in EXACT:
        assert now[key] == (list(recorded[key]) if key == "saved_per_layer" else recorded[key]), key
    for key in ("peak_step1_bytes", "peak_step2_bytes"):
        assert abs(now[key] - recorded[key]) <= 0.01 * recorded[key], key

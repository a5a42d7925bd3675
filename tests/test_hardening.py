"""Library defects, each pinned by a test that failed before its fix.

- a choice checked case-insensitively must be stored normalized (a field compared later as "int8",
  "bitsandbytes", "head", "sandwich", ... must not count a differently spelt value as another);
- the answer caches must not answer a reassigned preset, recipe or optimizer with the old bytes;
- ZeroRedundancyOptimizer's assignment is exact and fast at any allowed GPU count;
- a sweep's inputs may broadcast to at most validate.MAX_SWEEP_POINTS points (a named ValueError, never a
  MemoryError);
- an unsigned or float array beyond int64 is refused cleanly, without a RuntimeWarning or a wrapped value.
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np
import pytest

import memmath as mm
from memmath import sharding, validate
from memmath.planner import Suggestion

# ---- Llama-2-7B by hand (meta-llama/Llama-2-7b-hf config.json) --------------------------------------
H, I, V, L = 4096, 11008, 32000, 32
LINEAR = L * (4 * H * H + 3 * H * I)  # q, k, v, o and gate, up, down in every block: 6,476,005,376
ROWS = L * (4 * H + 2 * I + H)  # output rows of those matrices (one fp32 scale each): 1,359,872
OTHER = 2 * V * H + (2 * L + 1) * H  # embeddings, the untied head, the RMSNorms: 262,410,240
LORA = L * 2 * 8 * (H + H)  # LoRA rank 8 on q and v, fp32: 4,194,304 parameters


def _nf4_constants(n):
    """NF4 with double quantization (blocks of 64; 8-bit absmax, one fp32 constant per 256 of them)."""
    blocks = -(-n // 64)
    return blocks + 4 * -(-blocks // 256)


NF4_PAPER = L * (4 * _nf4_constants(H * H) + 3 * _nf4_constants(H * I))  # 102,768,640
BNB_MAPS = 7 * L * (64 + 1024 + 4)  # each 4-bit matrix: 16-value and 256-value fp32 code maps, fp32 offset


def test_hand_numbers():
    assert (LINEAR, ROWS, OTHER, LORA, NF4_PAPER) == (6_476_005_376, 1_359_872, 262_410_240, 4_194_304,
                                                      102_768_640)


@pytest.mark.parametrize("quant_type", ["int8", "INT8", " Int8 "])
def test_qlora_int8_base_whatever_the_spelling(quant_type):
    method = mm.QLoRA(quant_type=quant_type)
    assert method.quant_type == "int8"
    assert method.double_quant is False  # int8 has no double quantization
    m = mm.training_memory("llama-2-7b", method=method)
    assert m.weights == LINEAR * 1 + OTHER * 2 + LORA * 4  # 7,017,603,072 B: int8 linears, bf16 rest, fp32 LoRA
    assert m.quantization_constants == ROWS * 4  # 5,439,488 B: one fp32 scale per output row
    assert method.describe().startswith("QLoRA: 8-bit base (LLM.int8")


@pytest.mark.parametrize("quant_type", ["NF4", "Fp4"])
def test_qlora_4bit_spellings(quant_type):
    method = mm.QLoRA(quant_type=quant_type)
    assert method.quant_type == quant_type.lower()
    assert mm.training_memory("llama-2-7b", method=method).quantization_constants == NF4_PAPER


@pytest.mark.parametrize("layout", ["bitsandbytes", "Bitsandbytes", "BITSANDBYTES "])
def test_qlora_bitsandbytes_layout_whatever_the_spelling(layout):
    method = mm.QLoRA(layout=layout)
    assert method.layout == "bitsandbytes"
    m = mm.training_memory("llama-2-7b", method=method)
    assert m.quantization_constants == NF4_PAPER + BNB_MAPS  # 103,013,248 B
    assert not any(n.kind == "quant_maps_not_counted" for n in m.notes)


@pytest.mark.parametrize("layout", ["Paper", "PAPER"])
def test_qlora_paper_layout_spellings(layout):
    m = mm.training_memory("llama-2-7b", method=mm.QLoRA(layout=layout))
    assert m.quantization_constants == NF4_PAPER
    assert any(n.kind == "quant_maps_not_counted" for n in m.notes)


# Qwen3-0.6B (Qwen/Qwen3-0.6B config.json): 28 blocks, width 1,024, 16 heads of 128, 8 kv heads, MLP 3,072,
# vocabulary 151,936 tied; a q_norm and a k_norm of head_dim each per block.
QWEN3_06B = (151_936 * 1_024 + 28 * (1_024 * 16 * 128 * 2 + 1_024 * 8 * 128 * 2 + 3 * 1_024 * 3_072
                                     + 2 * 1_024 + 2 * 128) + 1_024)
# Gemma-2-2B (google/gemma-2-2b config.json): 26 blocks, width 2,304, 8 heads of 256, 4 kv heads, MLP 9,216,
# vocabulary 256,000 tied; four norms per block (the sandwich) and a final norm.
GEMMA2_2B = (256_000 * 2_304 + 26 * (2_304 * 8 * 256 * 2 + 2_304 * 4 * 256 * 2 + 3 * 2_304 * 9_216
                                     + 4 * 2_304) + 2_304)


@pytest.mark.parametrize("qk_norm", ["head", "HEAD", "Head"])
def test_qk_norm_whatever_the_spelling(qk_norm):
    shape = dataclasses.replace(mm.PRESETS["qwen3-0.6b"], qk_norm=qk_norm)
    assert shape.qk_norm == "head"
    assert shape.n_params == QWEN3_06B == 596_049_920


@pytest.mark.parametrize("norm_layout", ["sandwich", "Sandwich", "SANDWICH"])
def test_norm_layout_whatever_the_spelling(norm_layout):
    shape = dataclasses.replace(mm.PRESETS["gemma-2-2b"], norm_layout=norm_layout)
    assert shape.norm_layout == "sandwich"
    assert shape.n_params == GEMMA2_2B == 2_614_341_888


def test_full_qk_norm_and_post_layout_spellings():
    base = mm.models.llama_model(n_layers=2, hidden_size=64, n_heads=4, intermediate_size=128, vocab_size=100)
    full = dataclasses.replace(base, arch="olmo2", qk_norm="full", norm_layout="post")
    shouted = dataclasses.replace(base, arch="OLMo2", qk_norm="FULL", norm_layout="Post")
    assert (shouted.arch, shouted.qk_norm, shouted.norm_layout) == ("olmo2", "full", "post")
    assert shouted.n_params == full.n_params
    # OLMo 2's full q/k norms: a*d and kv*d (64 + 64) per block, against none.
    assert full.n_params - dataclasses.replace(base, arch="olmo2", norm_layout="post").n_params == 2 * (64 + 64)


def _run():
    return mm.Run("gpt2", batch_size=1, seq_len=64)


# (object, how to build it with a spelling, the field, what must be stored): every field checked by
# validate.choice (and ModelShape.arch, compared with transformers' lowercase model_type names).
CHOICE_FIELDS = [
    ("QLoRA", lambda: mm.QLoRA(quant_type="FP4"), "quant_type", "fp4"),
    ("QLoRA", lambda: mm.QLoRA(layout="Bitsandbytes"), "layout", "bitsandbytes"),
    ("ModelShape", lambda: dataclasses.replace(mm.PRESETS["qwen3-0.6b"], qk_norm=" Head"), "qk_norm", "head"),
    ("ModelShape", lambda: dataclasses.replace(mm.PRESETS["gemma-2-2b"], norm_layout="SANDWICH"), "norm_layout",
     "sandwich"),
    ("ModelShape", lambda: dataclasses.replace(mm.PRESETS["gemma-2-2b"], arch="Gemma2"), "arch", "gemma2"),
    ("ModelShape", lambda: dataclasses.replace(mm.PRESETS["gpt2"], family="GPT2"), "family", "gpt2"),
    ("ModelShape", lambda: dataclasses.replace(mm.PRESETS["gpt2"], hidden_act="GELU_New"), "hidden_act", "gelu_new"),
    ("Requirement", lambda: dataclasses.replace(mm.requirement(_run()), basis="Peak"), "basis", "peak"),
    ("Suggestion", lambda: Suggestion("x", _run(), 1, 0, True, "", "Sum Of Parts"), "basis", "sum of parts"),
    ("PeakEstimate", lambda: dataclasses.replace(mm.peak_memory(_run()), step="FIRST"), "step", "first"),
    ("TrainingMemory", lambda: dataclasses.replace(mm.training_memory(_run()), activation_model="Transformers"),
     "activation_model", "transformers"),
    ("TrainingMemory", lambda: dataclasses.replace(mm.training_memory(_run()), attention="SDPA"), "attention", "sdpa"),
    ("ActivationEstimate", lambda: mm.activations.ActivationEstimate(1, 1, 0, 0, 0, model="Textbook"), "model", "textbook"),
    ("Run", lambda: mm.Run("gpt2", device="CPU"), "device", "cpu"),
    ("Run", lambda: mm.Run("gpt2", attention="Eager"), "attention", "eager"),
    ("Run", lambda: mm.Run("gpt2", activations="TextBook"), "activations", "textbook"),
    ("Run", lambda: mm.Run("gpt2", n_gpus=2, zero_stage=1, sharding="Zero_Redundancy"), "sharding",
     "zero_redundancy"),
    ("Run", lambda: mm.Run("gpt2", precision="BF16"), "precision", "bf16"),
    ("Run", lambda: mm.Run("gpt2", optimizer="AdamW"), "optimizer", "adamw"),
]


@pytest.mark.parametrize("make, field, expected", [c[1:] for c in CHOICE_FIELDS],
                         ids=[f"{c[0]}.{c[2]}" for c in CHOICE_FIELDS])
def test_every_choice_is_stored_normalized(make, field, expected):
    assert getattr(make(), field) == expected


def test_requirement_basis_spelling_keeps_its_note():
    need = dataclasses.replace(mm.requirement(_run()), basis="PEAK")
    assert need.note.kind == "requirement_peak"


def test_arch_spelling_keeps_gemma2_eager_attention():
    """Gemma 2 has no SDPA in transformers: its arch, however spelt, resolves to eager attention."""
    base = dataclasses.replace(mm.PRESETS["gemma-2-2b"], attn_softcap=None)
    assert mm.Run(base).attention == "eager"
    assert mm.Run(dataclasses.replace(base, arch="Gemma2")).attention == "eager"


def test_hidden_act_spelling_keeps_gpt2s_gelu_new():
    """gelu_new saves three tensors of the MLP's width more than a plain gelu (its tanh formula's)."""
    shouted = dataclasses.replace(mm.PRESETS["gpt2"], hidden_act="GELU_NEW")
    run = dict(batch_size=1, seq_len=64)
    assert mm.training_memory(shouted, **run).activations == mm.training_memory("gpt2", **run).activations


# ---- the answer caches: keyed by what was resolved, never by a name -------------------------------------
def test_reassigned_preset_gets_its_own_bytes(monkeypatch):
    before = mm.training_memory("gpt2", batch_size=1, seq_len=64).total
    need_before = mm.requirement("gpt2", batch_size=1, seq_len=64).bytes
    monkeypatch.setitem(mm.PRESETS, "gpt2", mm.PRESETS["gpt2-medium"])
    after = mm.training_memory("gpt2", batch_size=1, seq_len=64).total
    assert after != before
    assert after == mm.training_memory(mm.PRESETS["gpt2-medium"], batch_size=1, seq_len=64).total
    assert mm.requirement("gpt2", batch_size=1, seq_len=64).bytes == mm.requirement(
        "gpt2-medium", batch_size=1, seq_len=64).bytes != need_before


def test_reassigned_recipe_and_optimizer_get_their_own_bytes(monkeypatch):
    settings = dict(batch_size=1, seq_len=None)
    n = mm.PRESETS["gpt2"].n_params  # 124,439,808
    assert mm.training_memory("gpt2", **settings).weights == 2 * n
    assert mm.requirement("gpt2", **settings).bytes == mm.training_memory("gpt2", **settings).total
    # The same names, other contents: a Run asking for "bf16" and "adamw" is the same run as before.
    monkeypatch.setitem(mm.RECIPES, "bf16", dataclasses.replace(mm.RECIPES["bf16"], weight_bits=32))
    assert mm.training_memory("gpt2", **settings).weights == 4 * n
    assert mm.requirement("gpt2", **settings).bytes == mm.training_memory("gpt2", **settings).total
    monkeypatch.setitem(mm.OPTIMIZERS, "adamw", dataclasses.replace(mm.OPTIMIZERS["adamw"], states=0,
                                                                    step_bytes_per_tensor=0))
    assert mm.training_memory("gpt2", **settings).optimizer_states == 0
    assert mm.requirement("gpt2", **settings).memory.optimizer_states == 0


# ---- ZeroRedundancyOptimizer: exact and fast ------------------------------------------------------------
def _assignment_before(sizes, n_ranks):
    """The assignment computed the slow, plain way (tensors x ranks): the reference."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True)
    load, owner = [0] * n_ranks, [0] * len(sizes)
    for i in order:
        rank = load.index(min(load))
        owner[i] = rank
        load[rank] += sizes[i]
    return owner


def _model_sizes(name):
    return [int(np.prod(dims)) for _, dims in sharding.torch_tensors(mm.PRESETS[name])]


@pytest.mark.parametrize("name", ["gpt2", "bert-base-uncased", "llama-2-7b", "qwen3-0.6b"])
@pytest.mark.parametrize("n_ranks", [1, 2, 3, 4, 7, 8, 64, 100, 148, 149, 150, 1000])
def test_zero_redundancy_assignment_is_exact_on_models(name, n_ranks):
    sizes = _model_sizes(name)
    assert sharding.zero_redundancy_assignment(sizes, n_ranks) == _assignment_before(sizes, n_ranks)


def test_zero_redundancy_assignment_is_exact_on_a_grid():
    rng = np.random.default_rng(26)
    for trial in range(300):
        n = int(rng.integers(1, 60))
        kind = trial % 3  # ties everywhere, a few values, or spread out
        high = 3 if kind == 0 else (20 if kind == 1 else 10**6)
        sizes = [int(x) for x in rng.integers(0 if trial % 5 == 0 else 1, high, size=n)]
        for n_ranks in (1, 2, 3, 5, n - 1, n, n + 1, 2 * n + 3):
            if n_ranks >= 1:
                assert sharding.zero_redundancy_assignment(sizes, n_ranks) == _assignment_before(sizes, n_ranks), \
                    (sizes, n_ranks)


def test_zero_redundancy_at_the_gpu_limit_is_fast_and_exact():
    sizes = _model_sizes("llama-2-70b")
    start = time.perf_counter()
    owner = sharding.zero_redundancy_assignment(sizes, validate.MAX_GPUS)
    m = mm.training_memory("llama-2-70b", n_gpus=validate.MAX_GPUS, zero_stage=1, sharding="zero_redundancy",
                           rank=0, seq_len=None)
    elapsed = time.perf_counter() - start
    # More ranks than tensors: each tensor gets a rank of its own, the largest first (a stable sort).
    order = sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True)
    assert [owner[i] for i in order] == list(range(len(sizes)))
    largest = sizes[order[0]]  # the embedding (32,000 x 8,192), on rank 0: 2 bf16 states + a 4 B step
    assert m.optimizer_states == 2 * largest * 2 + 4 == 1_048_576_004
    assert elapsed < 2.0, f"{elapsed:.1f} s"  # tensors x GPUs took about 7-26 s here


# ---- the size of a sweep --------------------------------------------------------------------------------
BIG = (np.ones((30_000, 1), dtype=np.int64), np.ones((1, 30_000), dtype=np.int64))
JUST_OVER = (np.ones((1_025, 1), dtype=np.int64), np.ones((1, 1_024), dtype=np.int64))

SWEEPS = [
    ("training_memory", lambda b, s: mm.training_memory("gpt2", batch_size=b, seq_len=s)),
    ("peak_memory", lambda b, s: mm.peak_memory("gpt2", batch_size=b, seq_len=s)),
    ("Run", lambda b, s: mm.Run("gpt2", batch_size=b, seq_len=s)),
    ("lora rank", lambda b, s: mm.training_memory("llama-2-7b", method=mm.LoRA(rank=b), seq_len=s)),
    ("uniform", lambda b, s: mm.uniform_model(b * 10**9, s)),
    ("uniform in a run", lambda b, s: mm.training_memory(mm.uniform_model(b * 10**9, 1), batch_size=s)),
    ("kv_cache_bytes", lambda b, s: mm.kv_cache_bytes("gpt2", batch_size=b, context_len=s)),
    ("working_set_bytes", lambda b, s: mm.inference.working_set_bytes("gpt2", batch_size=b, context_len=s)),
    ("inference_memory", lambda b, s: mm.inference_memory("gpt2", batch_size=b, context_len=s)),
    ("korthikanti_per_layer", lambda b, s: mm.activations.korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=64,
                                                                    n_heads=4)),
    ("korthikanti_terms", lambda b, s: mm.activations.korthikanti_terms(seq_len=s, batch_size=b, hidden_size=64, n_heads=4)),
]


@pytest.mark.parametrize("inputs", [BIG, JUST_OVER], ids=["30000x30000", "1025x1024"])
@pytest.mark.parametrize("call", [c[1] for c in SWEEPS], ids=[c[0] for c in SWEEPS])
def test_a_sweep_too_large_is_refused_by_name(call, inputs):
    with pytest.raises(validate.FieldError) as error:
        call(*inputs)
    message = str(error.value)
    points = inputs[0].size * inputs[1].size
    assert f"{points:,} points" in message and f"at most {validate.MAX_SWEEP_POINTS:,}" in message, message
    assert error.value.field in message


def test_the_largest_sweep_allowed_runs():
    assert validate.MAX_SWEEP_POINTS == 1_024 * 1_024
    b, s = np.arange(1, 1_025)[:, None], np.arange(1, 1_025)[None, :]
    kv = mm.kv_cache_bytes("gpt2", batch_size=b, context_len=s)
    assert kv.shape == (1_024, 1_024)
    assert kv[-1, -1] == 2 * 12 * 768 * 1_024 * 1_024 * 2  # K and V, 12 layers, width 768, 16-bit


@pytest.mark.parametrize("call", [
    lambda: mm.training_memory("gpt2", batch_size=np.array([1, 2, 3]), seq_len=np.array([64, 128])),
    lambda: mm.kv_cache_bytes("gpt2", batch_size=np.array([1, 2, 3]), context_len=np.array([64, 128])),
    lambda: mm.uniform_model(np.array([1e9, 2e9, 3e9]), np.array([1, 2])),
], ids=["training", "kv", "uniform"])
def test_sweeps_that_do_not_broadcast_are_refused_by_name(call):
    with pytest.raises(validate.FieldError, match=r"must broadcast together") as error:
        call()
    assert "(3,)" in str(error.value) and "(2,)" in str(error.value) and error.value.field in str(error.value)


# ---- unsigned and float arrays beyond int64 -------------------------------------------------------------
BEYOND = [
    ("uint64 2**63", np.array([1, 2**63], dtype=np.uint64)),
    ("uint64 max", np.array([2**64 - 1], dtype=np.uint64)),
    ("float 2**63", np.array([1.0, 2.0**63])),
    ("float 1e30", np.array([1e30])),
]


@pytest.mark.parametrize("value", [b[1] for b in BEYOND], ids=[b[0] for b in BEYOND])
@pytest.mark.parametrize("check", [
    lambda v: validate.count("n_bytes", v, low=0, high=validate.MAX_BYTES),
    lambda v: validate.nbytes("n_bytes", v),
    lambda v: mm.training_memory("gpt2", batch_size=v),
    lambda v: mm.uniform_model(v, 1),
], ids=["count", "nbytes", "batch_size", "n_params"])
def test_an_array_beyond_int64_is_refused_without_a_warning(check, value):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises((validate.FieldError, validate.FieldTypeError)) as error:
            check(value)
    assert not caught, [str(w.message) for w in caught]
    assert error.value.field in ("n_bytes", "batch_size", "n_params")


def test_an_unsigned_array_in_range_comes_back_as_int64():
    for check in (lambda v: validate.count("x", v, low=0, high=validate.MAX_BYTES), lambda v: validate.nbytes("x", v)):
        out = check(np.array([0, 5, 2**62], dtype=np.uint64))
        assert out.dtype == np.int64 and out.tolist() == [0, 5, 2**62]

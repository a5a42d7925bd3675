"""memmath.traced: a traced answer for any model transformers can build (fake tensors, PyTorch's MemTracker).

Expected numbers come from elsewhere: the recorded CPU measurements (memmath_lessons/reference/data/measured_cpu.json,
two real steps each), transformers' own parameter count on the meta device, memmath's analytical model for a
recorded type, and a trace of the whole model for the block-by-block composition. Without torch these tests skip
by name (fail under MEMMATH_REQUIRE_TORCH=1); the refusal's message is checked without it.
"""

from __future__ import annotations

import json
import sys

import pytest

import memmath
from memmath import traced
from memmath_lessons.reference.measured import load_measured

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

# The recorded groups' tolerances (tests/test_fidelity.py): saved activations 1%, each step's peak 5%.
SAVED_TOLERANCE, PEAK_TOLERANCE = 0.01, 0.05
# Small widths, two blocks: each test traces little (a trace's time grows with the operations it runs).
SMALL = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=500,
             num_hidden_layers=2, max_position_embeddings=256, eos_token_id=1, bos_token_id=1, pad_token_id=0)
TWO_KINDS = ["sliding_attention", "full_attention"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMMATH_CACHE_DIR", str(tmp_path / "cache"))


def _recorded(case_id: str):
    frame = load_measured()
    return frame[frame.case_id == case_id].iloc[0]


@pytest.mark.parametrize("case_id, settings", [
    ("llama-gqa/bf16/adamw/full/sdpa/nodrop/nockpt/b2s64", {}),
    ("llama-gqa/bf16/adamw/freeze1/sdpa/nodrop/nockpt/b2s64", dict(method="freeze", frozen_layers=1)),
    ("qwen3-gqa/fp32/adamw/lora8-qv-fp32/sdpa/nodrop/ckpt/b2s32", dict(method="lora", checkpointing=True)),
])
def test_traced_equals_a_recorded_real_step(transformers, peft, case_id, settings):
    from validation import measure

    row = _recorded(case_id)
    case = next(c for c in measure.grid() if c.case_id == case_id)
    config = measure._hf_config(case).to_dict()
    answer = traced.traced_training(config, dict(precision=case.precision, batch_size=case.batch_size,
                                                 seq_len=case.seq_len, **settings), cache=False)
    assert answer.basis == "traced"
    for key in ("param_bytes", "grad_bytes", "optimizer_state_bytes", "total_params", "trainable_params"):
        assert getattr(answer, key) == row[key], key
    assert abs(answer.saved_bytes - row["saved_bytes"]) <= SAVED_TOLERANCE * row["saved_bytes"]
    for step in (1, 2):
        measured = row[f"peak_step{step}_bytes"]
        assert abs(getattr(answer, f"peak_step{step}_bytes") - measured) <= PEAK_TOLERANCE * measured, step


def test_composed_blocks_equal_a_full_trace_with_two_layer_kinds(transformers):
    # Ministral's layer_types: two sliding-window blocks, then a full-attention one (the same weights).
    config = dict(SMALL, model_type="ministral", num_hidden_layers=3, sliding_window=16, head_dim=16,
                  layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    settings = dict(precision="fp32", batch_size=2, seq_len=32)
    composed = traced.traced_training(config, settings, cache=False, full_trace=False)
    whole = traced.traced_training(config, settings, cache=False, full_trace=True)
    assert composed.layer_kinds == {"MinistralDecoderLayer sliding_attention": 2,
                                    "MinistralDecoderLayer full_attention": 1}
    assert composed.traces == 2 and whole.traces == 1
    for key in ("grad_bytes", "optimizer_state_bytes", "saved_bytes", "peak_step1_bytes", "peak_step2_bytes"):
        assert getattr(composed, key) == getattr(whole, key), key


def _meta_count(transformers, torch, config: dict) -> int:
    """transformers' own count: the model built on the meta device, each parameter once."""
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf = transformers.AutoConfig.for_model(config["model_type"], **fields)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type, extra", [
    ("ministral", dict(sliding_window=16, head_dim=16, layer_types=TWO_KINDS)),
    ("jamba", dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
                   num_experts=2, mamba_d_state=8, mamba_dt_rank=8, use_mamba_kernels=False)),
    ("arcee", dict()),
])
def test_a_type_without_a_record_gets_a_traced_answer(torch, transformers, model_type, extra):
    config = dict(model_type=model_type, **SMALL, **extra)
    with pytest.raises(ValueError, match=r"memmath\[torch\]|--traced"):
        memmath.from_hf_config(config)
    answer = traced.traced_training(config, dict(batch_size=1, seq_len=16), cache=False)
    assert answer.total_params == _meta_count(transformers, torch, config)
    assert answer.param_bytes == 2 * answer.total_params  # pure bf16: 2 B per parameter, a tied head counted once
    assert answer.grad_bytes == answer.param_bytes  # full finetuning in pure bf16: one gradient per weight
    assert answer.saved_bytes > 0 and answer.peak_step2_bytes > answer.param_bytes + answer.optimizer_state_bytes


def test_traced_counts_of_a_recorded_type_equal_memmaths(transformers):
    # Qwen3 with q/k norms and a tied head: memmath's record counts it, the trace counts what transformers builds.
    config = dict(model_type="qwen3", **SMALL, head_dim=16, tie_word_embeddings=True)
    run = memmath.Run(memmath.from_hf_config(config), precision="bf16", optimizer="adamw", batch_size=1, seq_len=16)
    expected = memmath.training_memory(run)
    answer = traced.traced_training(config, run, cache=False)
    assert answer.total_params == run.model.n_params
    assert (answer.param_bytes, answer.grad_bytes, answer.optimizer_state_bytes) == (
        expected.weights, expected.gradients, expected.optimizer_states)


def test_the_answer_is_cached_per_config_and_settings(transformers):
    config = dict(model_type="ministral", **SMALL, sliding_window=16, head_dim=16, layer_types=TWO_KINDS)
    first = traced.traced_training(config, dict(batch_size=1, seq_len=8))
    again = traced.traced_training(config, dict(batch_size=1, seq_len=8))
    assert not first.cached and again.cached
    assert again.as_dict() | {"cached": False} == first.as_dict() | {"cached": False}
    other = traced.traced_training(config, dict(batch_size=1, seq_len=16))
    assert not other.cached and other.saved_bytes > first.saved_bytes


def test_memmath_train_traced_on_the_command_line(transformers, tmp_path, capsys):
    from memmath.cli import main

    folder = tmp_path / "ministral"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(model_type="ministral", **SMALL, sliding_window=16,
                                                        head_dim=16, layer_types=TWO_KINDS)))
    # Without --traced a type without a record is refused, naming the way to an answer.
    assert main(["train", str(folder), "--seq", "8"]) == 2
    assert "memmath train CONFIG --traced" in capsys.readouterr().err
    # With it, the trace answers; its progress line goes to stderr.
    assert main(["train", str(folder), "--batch", "1", "--seq", "8", "--json", "--traced"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["basis"] == "traced" and data["settings"]["seq_len"] == 8 and "tracing ministral" in err
    # Freezing by memmath train's own option: the last block trains, the first and the embeddings do not.
    assert main(["train", str(folder), "--seq", "8", "--method", "freeze", "--trainable-layers", "1", "--traced",
                 "--json"]) == 0
    frozen = json.loads(capsys.readouterr().out)
    assert frozen["settings"]["frozen_layers"] == 1 and 0 < frozen["trainable_params"] < frozen["total_params"]
    assert main(["train", str(folder), "--seq", "8", "--tp", "2", "--traced"]) == 2
    assert "--tp has no traced answer" in capsys.readouterr().err


def test_without_torch_the_refusal_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(traced.TorchMissing, match=r"memmath\[torch\]"):
        traced.require_torch()
    with pytest.raises(ValueError, match=r"install memmath\[torch\] to get a traced answer"):
        memmath.from_hf_config({"model_type": "ministral", "hidden_size": 64})


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="precision"):
        traced.TraceSettings(precision="fp8")
    with pytest.raises(ValueError, match="lora_targets"):
        traced.TraceSettings(method="lora", lora_targets=("qkv",))
    with pytest.raises(ValueError, match="seq_len"):
        traced.TraceSettings(seq_len=0)


def test_a_traced_prefill_keeps_memmaths_kv_cache_and_composes_exactly(transformers):
    # Qwen3, 4 blocks: the cache is 2 (k, v) x 4 blocks x batch 2 x 2 kv heads x 64 tokens x 16 dims x 2 B = 65,536 B,
    # memmath's kv_cache_bytes for the same config (Pope et al. 2022's count).
    config = dict(model_type="qwen3", **{**SMALL, "num_hidden_layers": 4}, head_dim=16, tie_word_embeddings=True)
    composed = traced.traced_inference(config, batch_size=2, context_len=64, full_trace=False)
    whole = traced.traced_inference(config, batch_size=2, context_len=64, full_trace=True)
    assert 2 * 4 * 2 * 2 * 64 * 16 * 2 == 65_536
    assert composed.cache_bytes == whole.cache_bytes == 65_536
    expected = memmath.inference_memory(memmath.from_hf_config(config), batch_size=2, context_len=64)
    assert composed.cache_bytes == expected.kv_cache and composed.param_bytes == expected.weights
    assert composed.traces == 2 and composed.prefill_peak_bytes == whole.prefill_peak_bytes


def test_a_model_transformers_cannot_build_is_refused_in_one_line(transformers, tmp_path, capsys):
    from memmath.cli import main

    # nn.Embedding asserts that padding_idx lies inside the vocabulary: 50 does not in 10 words.
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(SMALL, model_type="llama", vocab_size=10, pad_token_id=50)))
    with pytest.raises(ValueError, match="could not build or trace llama"):
        traced.traced_training(str(path), cache=False)
    assert main(["train", str(path), "--traced", "--seq", "8"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_preset_read_from_its_config_is_traced_from_those_fields():
    # openai/gpt-oss-20b's config.json: hidden_size 2880, 24 layers, 32 local experts, 4 per token.
    config = traced.read_config("gpt-oss-20b")
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"]) == ("gpt_oss", 2880, 24)
    assert (config["num_local_experts"], config["num_experts_per_tok"]) == (32, 4)
    config["hidden_size"] = 1  # a copy: the preset keeps its own fields
    assert traced.read_config("gpt-oss-20b")["hidden_size"] == 2880
    # GPT-3 is built from its paper's table (Brown et al. 2020): no config.json for PyTorch to build.
    with pytest.raises(memmath.validate.FieldError, match="preset 'gpt3-175b' is built from its paper"):
        traced.read_config("gpt3-175b")

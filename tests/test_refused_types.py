"""The model types transformers 5.24 builds that memmath does not model yet, refused by name: the config reader, the
record lookup and the command line each say what the model has that memmath lacks (read from its modeling file)
and what would make it work, and point to the traced answer."""

from __future__ import annotations

import json

import pytest

import memmath as mm
from memmath import cli
from memmath.architectures import ARCHITECTURES, architecture
from memmath.architectures._refused import REFUSED_MODEL_TYPES, TRACED, refusal

# Each type with words its reason must hold: the layout feature memmath lacks, as its modeling file names it.
REASONS = {
    "gemma4": "vision and an audio tower.*per-layer input embeddings.*num_kv_shared_layers.*global_head_dim.*"
              "text_config alone reads as model_type gemma4_text",
    "gemma3n": "per-layer input embeddings.*num_kv_shared_layers.*AltUp.*LAuReL.*"
               "text_config alone reads as model_type gemma3n_text",
    "qwen3_5": "gated DeltaNet linear-attention blocks beside gated full-attention blocks",
    "qwen3_5_moe": "gated DeltaNet.*mixture of experts",
    "llama4": "Llama 4: its vision model .* llama4_text",
    "deepseek_v32": "multi-head latent attention with DeepSeek Sparse Attention.*lightning indexer",
    "deepseek_v4": "hyper-connections.*compressed and sliding-window attention",
    "kimi_linear": "Kimi Delta Attention.*multi-head latent attention",
    "glm_moe_dsa": "lightning indexer",
    "modernbert": "fused Wqkv and a GeGLU Wi.*local_attention",
    "t5": "encoder-decoder.*cross-attention",
    "t5gemma": "encoder-decoder",
    "jamba": "Mamba \\(v1\\) layers beside attention layers",
}


def test_every_type_here_is_refused_and_none_is_a_record():
    assert set(REASONS) <= set(REFUSED_MODEL_TYPES)
    assert not set(REFUSED_MODEL_TYPES) & set(ARCHITECTURES)


@pytest.mark.parametrize("model_type", sorted(REASONS))
def test_the_reader_and_the_record_lookup_name_the_reason(model_type):
    expected = f"'{model_type}' is not supported: .*{REASONS[model_type]}.*would make .*work.*--traced"
    for call in (lambda: mm.from_hf_config({"model_type": model_type}), lambda: architecture(model_type)):
        with pytest.raises(ValueError, match=expected):
            call()


@pytest.mark.parametrize("model_type", ["gemma4", "gemma3n", "qwen3_5", "qwen3_5_moe", "llama4"])
def test_a_vision_language_config_gets_the_named_reason_too(model_type):
    # these configs hold a vision_config (and Gemma's an audio_config): the named reason, not the generic refusal of
    # vision-language types memmath does not read
    config = {"model_type": model_type, "text_config": {"hidden_size": 64}, "vision_config": {"hidden_size": 32}}
    with pytest.raises(ValueError, match=REASONS[model_type]):
        mm.from_hf_config(config)


@pytest.mark.parametrize("command", ["train", "infer"])
@pytest.mark.parametrize("model_type", sorted(REASONS))
def test_the_command_line_says_the_whole_reason_in_one_line_with_exit_2(tmp_path, capsys, model_type, command):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": model_type, "num_hidden_layers": 2}))
    assert cli.main([command, str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err and captured.out == ""
    assert refusal(model_type) in lines[0]  # whole: no part of it shortened away


def test_each_refusal_ends_with_the_traced_answer():
    assert all(refusal(t).endswith(TRACED) for t in REFUSED_MODEL_TYPES)


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(REASONS))
def test_the_refused_types_are_ones_transformers_builds(transformers, model_type):
    assert transformers.AutoConfig.for_model(model_type).model_type == model_type

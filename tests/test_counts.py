"""Parameter counts, total and active per token, for any model: a preset, a config dict, a config.json or its folder."""

import json

import pytest

import memmath as mm

# Qwen/Qwen3-30B-A3B config.json, the fields that size it (its model card: 30.5B parameters, 3.3B activated)
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "num_hidden_layers": 48, "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8,
    "tie_word_embeddings": False, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
}


def test_active_parameters_of_a_config_file_and_its_folder(tmp_path, capsys):
    from memmath import cli

    (tmp_path / "config.json").write_text(json.dumps(QWEN3_30B_A3B))
    for given in (QWEN3_30B_A3B, str(tmp_path / "config.json"), str(tmp_path), tmp_path / "config.json"):
        counts = mm.parameter_counts(given)
        assert round(counts["params"] / 1e9, 1) == 30.5 and counts["active_params"] // 10**8 == 33  # 3.35B
        assert (counts["n_experts"], counts["experts_per_tok"]) == (128, 8)
    # one token runs 8 of 128 experts: 48 layers x 120 experts x 3 x 2048 x 768 parameters are idle
    assert counts["params"] - counts["active_params"] == 48 * 120 * 3 * 2048 * 768
    assert counts["active_params"] - counts["active_params_without_embeddings"] == 151936 * 2048
    assert cli.main(["models", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == counts
    assert cli.main(["models", str(tmp_path)]) == 0
    assert "active per token (8 of 128 experts)" in capsys.readouterr().out


def test_mixtral_matches_its_model_card_and_a_dense_model_is_all_active():
    mixtral = mm.parameter_counts("mixtral-8x7b")
    assert round(mixtral["params"] / 1e9, 1) == 46.7 and round(mixtral["active_params"] / 1e9, 1) == 12.9
    dense = mm.parameter_counts("llama-3-8b")
    assert dense["active_params"] == dense["params"] == 8_030_261_248 and dense["n_experts"] == 0


def test_a_quantized_checkpoint_says_its_format():
    config = {**QWEN3_30B_A3B, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    assert mm.parameter_counts(config)["stored_format"] == "fp8_block"


@pytest.mark.parametrize("bad", ["", None, [1]])
def test_bad_models_are_refused_by_name(bad):
    with pytest.raises((ValueError, TypeError), match="model"):
        mm.parameter_counts(bad)

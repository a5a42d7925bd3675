"""The published configs in tests/fixtures/configs: each has transformers' own count recorded, and each quantized one
is read by memmath/checkpoints.py as transformers loads it."""

import json
from pathlib import Path

import pytest

from memmath.checkpoints import MXFP4, stored_format
from memmath.models import ParamTensor

HERE = Path(__file__).parent / "fixtures" / "configs"
COUNTS = json.loads((HERE / "expected_counts.json").read_text())
CONFIGS = sorted(p.stem for p in HERE.glob("*.json") if p.name != "expected_counts.json")


@pytest.mark.parametrize("name", CONFIGS)
def test_every_fixture_has_its_meta_device_count_and_a_source(name):
    assert COUNTS[name]["params"] > 0 and COUNTS[name]["class"].endswith("ForCausalLM")
    assert f"`{name}.json`" in (HERE / "SOURCES.md").read_text()


@pytest.mark.parametrize("name, layers, experts", [("gpt-oss-20b", 24, 32), ("gpt-oss-120b", 36, 128)])
def test_gpt_oss_checkpoints_store_their_experts_in_mxfp4(name, layers, experts):
    config = json.loads((HERE / f"{name}.json").read_text())
    fmt = stored_format(config["quantization_config"])
    assert fmt.scheme == MXFP4.scheme and not fmt.trainable
    # gpt-oss's experts (GptOssExperts, E x out x in as the checkpoint's blocks): gate_up 2 x 2880 by 2880, down 2880
    # by 2880. 4 bits a value and an e8m0 byte per 32 values: 17 bytes per 32 values.
    h, inner = config["hidden_size"], config["intermediate_size"]
    gate_up = ParamTensor("mlp.experts.gate_up_proj", "mlp", (experts, 2 * inner, h))
    down = ParamTensor("mlp.experts.down_proj", "mlp", (experts, h, inner))
    per_layer = experts * (2 * inner * h + h * inner)
    stored = sum(fmt.tensor_bytes(gate_up)) + sum(fmt.tensor_bytes(down))
    assert stored * 32 == per_layer * 17
    # everything else (attention, router, biases, sinks, norms, embeddings, head) in bf16
    rest = COUNTS[name]["params"] - layers * per_layer
    total = layers * stored + 2 * rest
    if name == "gpt-oss-20b":  # the published checkpoint's size: its model.safetensors.index.json's metadata.total_size
        # (https://huggingface.co/openai/gpt-oss-20b/blob/main/model.safetensors.index.json)
        assert total == 13_761_264_768


def test_kimi_k2_fp8_checkpoint_is_its_published_size():
    """moonshotai/Kimi-K2-Instruct's safetensors, as a public report of the checkpoint lists them: each tensor's shape
    and dtype, each FP8 weight's weight_scale_inv shape, and 958.49 GiB of tensors in all. Priced from those shapes
    through the config's quantization_config (DeepSeek-V3's block FP8), tensor by tensor."""
    config = json.loads((HERE / "Kimi-K2-Instruct.json").read_text())
    fmt = stored_format(config["quantization_config"])
    # (weight shape, its weight_scale_inv shape) as listed
    for shape, scales in (((576, 7168), (5, 56)), ((16384, 512), (128, 4)), ((7168, 8192), (56, 64)),
                          ((1536, 7168), (12, 56)), ((12288, 1536), (96, 12)), ((7168, 18432), (56, 144)),
                          ((18432, 7168), (144, 56)), ((7168, 2048), (56, 16)), ((2048, 7168), (16, 56))):
        tensor = ParamTensor("self_attn.o_proj.weight", "attention", shape, linear=True)
        assert fmt.tensor_bytes(tensor) == (shape[0] * shape[1], 4 * scales[0] * scales[1])
    layers, experts, moe = 61, 384, 60  # first_k_dense_replace 1: layer 0 dense, 60 MoE layers
    rows = [  # (name, shape, an nn.Linear, copies); the 384 experts' gate and up as transformers 5.24 stacks them
        ("lm_head.weight", (163840, 7168), False, 1), ("embed_tokens", (163840, 7168), False, 1),
        ("input_layernorm.weight", (7168,), False, layers), ("post_attention_layernorm.weight", (7168,), False, layers),
        ("self_attn.kv_a_layernorm.weight", (512,), False, layers),
        ("self_attn.q_a_layernorm.weight", (1536,), False, layers),
        ("self_attn.kv_a_proj_with_mqa.weight", (576, 7168), True, layers),
        ("self_attn.kv_b_proj.weight", (16384, 512), True, layers),
        ("self_attn.o_proj.weight", (7168, 8192), True, layers),
        ("self_attn.q_a_proj.weight", (1536, 7168), True, layers),
        ("self_attn.q_b_proj.weight", (12288, 1536), True, layers),
        ("mlp.down_proj.weight", (7168, 18432), True, 1), ("mlp.gate_proj.weight", (18432, 7168), True, 1),
        ("mlp.up_proj.weight", (18432, 7168), True, 1),
        ("mlp.experts.down_proj", (experts, 7168, 2048), False, moe),
        ("mlp.experts.gate_up_proj", (experts, 2 * 2048, 7168), False, moe),
        ("mlp.gate.weight", (384, 7168), False, moe),  # the router: a Parameter, kept bf16
        ("mlp.shared_experts.down_proj.weight", (7168, 2048), True, moe),
        ("mlp.shared_experts.gate_proj.weight", (2048, 7168), True, moe),
        ("mlp.shared_experts.up_proj.weight", (2048, 7168), True, moe), ("norm.weight", (7168,), False, 1)]
    total = sum(copies * sum(fmt.tensor_bytes(ParamTensor(name, "x", shape, linear=linear)))
                for name, shape, linear, copies in rows)
    total += moe * 384 * 4 + layers * 56 * 2  # the file's e_score_correction_bias (fp32) and rotary inv_freq (bf16)
    assert round(total / 2**30, 2) == 958.49

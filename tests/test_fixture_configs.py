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
    if name == "gpt-oss-20b":  # the published checkpoint's size: model.safetensors.index.json's metadata.total_size
        assert total == 13_761_264_768  # (https://huggingface.co/openai/gpt-oss-20b/blob/main/model.safetensors.index.json)

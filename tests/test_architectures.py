"""One record per model type (memmath/architectures/), each checked against transformers' own classes.

The expected values come from transformers 5.24 itself: its config classes' defaults and attributes, the
module names and `_supports_sdpa` of the models a published config builds on the meta device.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import memmath as mm
from memmath.architectures import ARCHITECTURES, architecture
from tests.test_models import _hf_model_on_meta
from validation.published_configs import (CONFIG_CLASS_DEFAULTS, ERNIE_MOE_CONFIGS, LAYERED_CONFIGS,
                                          PUBLISHED_CONFIGS, PUBLISHED_HYBRID_CONFIGS)

# every config of a supported type: the published ones, DeepSeek's, ERNIE 4.5 MoE's and the Mamba-2 hybrids'
# (published apart) and a config class's defaults
READABLE_CONFIGS = (PUBLISHED_CONFIGS | LAYERED_CONFIGS | ERNIE_MOE_CONFIGS | PUBLISHED_HYBRID_CONFIGS
                    | CONFIG_CLASS_DEFAULTS)

FOLDER = Path(mm.__file__).parent / "architectures"

# Fields a record lists that are not attributes of transformers 5.24's config class, and why memmath reads them:
NOT_ATTRIBUTES = {
    "torch_dtype", "dtype", "quantization_config", "architectures", "id2label", "num_labels",  # PreTrainedConfig's
    "use_cache", "rope_parameters", "rotary_pct", "partial_rotary_factor",  # set or converted in __post_init__ (kwargs, rope standardizing)
    "(q_norm, k_norm)",  # not a field: the note that the layout always has them
    "head_dim",  # Qwen2, Qwen2-MoE, Phi-3, OLMo 2: modeling_<type>.py reads getattr(config, "head_dim", h // a)
    "max_window_layers",  # Qwen3-MoE: a field older checkpoints carry, read as Qwen3's
    "position_embedding_type",  # BERT/RoBERTa: dropped from the 5.24 class, still in older config.json files
    "sliding_window_pattern",  # Gemma 3: the legacy name Gemma3TextConfig.__post_init__ turns into layer_types
    "full_attention_interval",  # Qwen3-Next: a kwarg Qwen3NextConfig.__post_init__ pops into layer_types
    "block_ff_dim", "tie_embedding",  # LFM2: older names Lfm2Config.__post_init__ pops into their fields
    # Nemotron-H: legacy kwargs NemotronHConfig.__post_init__ pops into use_conv_bias, n_groups and conv_kernel
    "mamba_conv_bias", "mamba_n_groups", "mamba_d_conv",
    "rotary_dim",  # MiniMax-M2: the released checkpoints' kwarg convert_rope_params_to_dict turns into the factor
    "global_head_dim", "num_global_key_value_heads",  # Gemma 4: kwargs __post_init__ pops into per_layer_config
}


def _config(model_type):
    import transformers

    config = transformers.AutoConfig.for_model(model_type)
    # Gemma 4's head_dim and num_key_value_heads vary by block: its config refuses a global read unless allowed
    config.allow_global_per_layer_attribute_access = True
    return config


def _published(model_type):
    """The first published config.json of this model type (validation/published_configs.py; DeepSeek's, published
    apart, after the others)."""
    return next(c for c in READABLE_CONFIGS.values() if c["model_type"] == model_type)


def test_every_module_in_the_folder_is_one_record_and_every_record_a_module():
    # the private modules (_decoder.py, _moe.py, ...) are the pieces records share, not records
    modules = {p.stem for p in FOLDER.glob("*.py") if p.stem != "record" and not p.stem.startswith("_")}
    assert modules == set(ARCHITECTURES) == set(mm.architectures.SUPPORTED_MODEL_TYPES)
    assert all(record.model_type == name for name, record in ARCHITECTURES.items())


def test_an_unknown_model_type_says_where_the_supported_ones_are_listed():
    # too many to list in a one-line message: it counts them, and `memmath models` names every one
    with pytest.raises(ValueError, match=f"'falcon' is not supported: memmath reads {len(ARCHITECTURES)} model types, "
                                         "which `memmath models` lists"):
        architecture("falcon")
    from memmath import cli
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["models"]) == 0
    listed = " ".join(out.getvalue().split())
    assert all(f" {model_type}," in listed or f" {model_type};" in listed or f" {model_type}." in listed
               for model_type in (*ARCHITECTURES, *mm.multimodal.MULTIMODAL_MODEL_TYPES)), listed[-900:]


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(ARCHITECTURES))
def test_each_field_is_one_transformers_reads(transformers, model_type):
    config = _config(model_type)
    record = ARCHITECTURES[model_type]
    missing = [f for f in record.fields if f not in NOT_ATTRIBUTES and not hasattr(config, f)]
    assert missing == []


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(ARCHITECTURES))
def test_each_default_is_the_config_classes(transformers, model_type):
    config = _config(model_type)
    record = ARCHITECTURES[model_type]
    assert {k: getattr(config, k) for k in record.defaults} == dict(record.defaults)
    if record.activation_field:  # LFM2's MLP is SwiGLU in code, without a config field
        assert getattr(config, record.activation_field) == record.activations[0]  # the activation a config omits
    assert {k: getattr(config, k) for k in record.dropout_fields} == dict(record.dropout_fields)


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(ARCHITECTURES))
def test_module_names_and_attention_follow_the_model_transformers_builds(torch, transformers, model_type):
    record = ARCHITECTURES[model_type]
    model = _hf_model_on_meta(torch, transformers, _published(model_type))
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    assert record.embedding in names
    if record.family == "llama":
        assert record.final_norm_module in names
    assert record.sdpa == type(model)._supports_sdpa
    # Every module a LoRA adapter goes on exists in the model (peft matches names by suffix).
    shape = mm.from_hf_config(_published(model_type))
    full = {name for name, _ in model.named_modules()} | {name for name, _ in model.named_parameters()}
    for adapter, _ in shape.lora_adapter_copies(mm.models.LORA_TARGETS):
        assert any(n.endswith(adapter.module) for n in full), adapter.module


@pytest.mark.live
def test_gpt_neox_reads_no_key_value_heads_from_its_config(torch, transformers):
    # GPTNeoXConfig has no num_key_value_heads: a config.json carrying one still builds one k and v per head.
    # Found when the records were checked against the config classes; the old reader narrowed k and v.
    config = dict(_published("gpt_neox"), num_key_value_heads=2)
    shape = mm.from_hf_config(config)
    model = _hf_model_on_meta(torch, transformers, config)
    assert shape.n_kv_heads == shape.n_heads
    assert shape.n_params == sum(p.numel() for p in model.parameters())


@pytest.mark.live
def test_roberta_without_type_vocab_size_takes_the_config_classes_two_rows(torch, transformers):
    # RobertaConfig's default is 2 (the old reader assumed roberta-base's 1 for a config that omits it).
    config = {k: v for k, v in PUBLISHED_CONFIGS["roberta-base"].items() if k != "type_vocab_size"}
    shape = mm.from_hf_config(config)
    model = _hf_model_on_meta(torch, transformers, config)
    assert shape.type_vocab_size == 2
    assert shape.n_params == sum(p.numel() for p in model.parameters())


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(ARCHITECTURES))
def test_tp_plan_names_modules_of_the_model_transformers_builds(torch, transformers, model_type):
    """Each module a record's tensor-parallel plan splits exists in the model transformers builds, and where the
    config class has a base_model_tp_plan for that module, the split is the same kind (colwise, rowwise)."""
    record = ARCHITECTURES[model_type]
    model = _hf_model_on_meta(torch, transformers, _published(model_type))
    names = [name for name, _ in model.named_modules()]
    # every published config of the type: a module of a second block layout (Llama 4 Maverick's dense MLP) too
    names += [name for config in READABLE_CONFIGS.values() if config["model_type"] == model_type
              and config is not _published(model_type)
              for name, _ in _hf_model_on_meta(torch, transformers, config).named_modules()]
    for key, style in record.tp_plan.items():
        assert style in ("colwise", "rowwise"), key
        # in some block: a dense block's MLP and a MoE block's shared experts are in different blocks (GLM-4.5,
        # Llama 4 Maverick)
        assert any(re.search(re.escape(key).replace(r"\*", r"\d+") + "$", n) for n in names), key
    theirs = getattr(type(model.config), "base_model_tp_plan", None) or {}
    for key, style in theirs.items():
        if key in record.tp_plan:  # colwise_gather_output / rowwise_split_input split the weights as these do
            assert style.split("_")[0] == record.tp_plan[key], key

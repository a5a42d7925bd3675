"""Model shapes: exact parameter counts against published numbers, hand formulas and transformers."""

import json

import numpy as np
import pytest

import memmath as mm

# ---- published parameter counts -------------------------------------------------------------------
# The model cards, and what PyTorch's sum(p.numel() for p in model.parameters()) gives.
PUBLISHED = {
    "gpt2": 124_439_808,  # openai-community/gpt2 (GPT2LMHeadModel, tied head)
    "bert-base-uncased": 109_482_240,  # google-bert/bert-base-uncased (BertModel with pooler)
    "llama-2-7b": 6_738_415_616,  # meta-llama/Llama-2-7b-hf
}


@pytest.mark.parametrize("name, count", PUBLISHED.items())
def test_published_parameter_counts(name, count):
    assert mm.PRESETS[name].n_params == count


# Hand formulas (derived from the architectures in the GPT-2, LLaMA and BERT papers and configs), evaluated here independently of memmath's tensor lists:
#   GPT-2:  V*h + P*h + L*(12h^2 + 13h) + 2h                        (4h MLP, tied head)
#   LLaMA:  V*h*(1 if tied else 2) + h + L*(2*h*a*d + 2*h*kv*d + 3*h*I + 2*h)
#   BERT:   (V + P + T)*h + 2h + L*(12h^2 + 13h) + h^2 + h          (embeddings + LN, blocks, pooler)
def gpt2_count(L, h, V=50257, P=1024):
    return V * h + P * h + L * (12 * h * h + 13 * h) + 2 * h


def llama_count(L, h, a, I, V, kv=None, d=None, tied=False):
    kv, d = kv or a, d or h // a
    return V * h * (1 if tied else 2) + h + L * (2 * h * a * d + 2 * h * kv * d + 3 * h * I + 2 * h)


def bert_count(L, h, V=30522, P=512, T=2):
    return (V + P + T) * h + 2 * h + L * (12 * h * h + 13 * h) + h * h + h


HAND = {
    "gpt2": gpt2_count(12, 768),
    "gpt2-medium": gpt2_count(24, 1024),  # 354,823,168 (model card: 355M)
    "gpt2-large": gpt2_count(36, 1280),  # 774,030,080 (774M)
    "gpt2-xl": gpt2_count(48, 1600),  # 1,557,611,200 (1.5B)
    "gpt3-175b": gpt2_count(96, 12288, P=2048),  # Brown et al. 2020, table 2.1: 175.0B
    "bert-base-uncased": bert_count(12, 768),
    "bert-large-uncased": bert_count(24, 1024),  # 335,141,888 (336M in the BERT paper's rounding)
    "llama-65b": llama_count(80, 8192, 64, 22016, 32000),  # Touvron et al. 2023a, table 2: 65.2B
    "llama-2-7b": llama_count(32, 4096, 32, 11008, 32000),
    "llama-2-13b": llama_count(40, 5120, 40, 13824, 32000),  # 13,015,864,320
    "llama-2-70b": llama_count(80, 8192, 64, 28672, 32000, kv=8),  # 68,976,648,192
    "llama-3-8b": llama_count(32, 4096, 32, 14336, 128256, kv=8),  # 8,030,261,248
    "llama-3-70b": llama_count(80, 8192, 64, 28672, 128256, kv=8),  # 70,553,706,496
    "mistral-7b": llama_count(32, 4096, 32, 14336, 32000, kv=8),  # 7,241,732,096
}


@pytest.mark.parametrize("name, count", HAND.items())
def test_presets_match_the_hand_formulas(name, count):
    assert mm.PRESETS[name].n_params == count


def test_the_hand_formulas_give_the_published_numbers():
    # The formulas above are themselves checked against published counts.
    for name, count in PUBLISHED.items():
        assert HAND[name] == count
    assert HAND["llama-2-13b"] == 13_015_864_320 and HAND["llama-3-8b"] == 8_030_261_248
    assert HAND["mistral-7b"] == 7_241_732_096 and HAND["llama-2-70b"] == 68_976_648_192
    assert round(HAND["gpt3-175b"] / 1e9, 1) == 174.6  # GPT-3's "175B"


# ---- per-component breakdown ----------------------------------------------------------------------
def test_gpt2_components_by_hand():
    h, L, V, P = 768, 12, 50257, 1024
    parts = mm.PRESETS["gpt2"].component_params()
    assert parts == {
        "embeddings": V * h + P * h,
        "attention": L * (h * 3 * h + 3 * h + h * h + h),  # fused qkv + output projection, with biases
        "mlp": L * (h * 4 * h + 4 * h + 4 * h * h + h),
        "norms": L * 4 * h + 2 * h,  # ln_1, ln_2 (weight + bias) per block, ln_f
        "head": 0,  # tied to the token embedding
    }
    assert sum(parts.values()) == 124_439_808
    assert mm.PRESETS["gpt2"].params_per_layer == 12 * h * h + 13 * h == 7_087_872


def test_llama_components_by_hand():
    shape = mm.PRESETS["llama-3-8b"]  # GQA: 8 kv heads of 128
    h, L, V, I = 4096, 32, 128256, 14336
    parts = shape.component_params()
    assert parts["attention"] == L * (2 * h * h + 2 * h * 8 * 128)
    assert parts["mlp"] == L * 3 * h * I
    assert parts["norms"] == L * 2 * h + h
    assert parts["embeddings"] == parts["head"] == V * h
    assert sum(parts.values()) == 8_030_261_248  # meta-llama/Meta-Llama-3-8B: PyTorch's parameters() sum


def test_breakdown_table_adds_up():
    for shape in mm.PRESETS.values():
        table = shape.breakdown()
        assert int(table["total"].sum()) == shape.n_params
        assert set(table["group"]) <= {"embeddings", "layer", "final_norm", "head"}


def test_tied_and_untied_differ_by_one_vocabulary_matrix():
    untied = mm.models.llama_model(n_layers=2, hidden_size=64, n_heads=4, intermediate_size=128, vocab_size=1000)
    tied = untied.with_changes(tied_embeddings=True)
    assert untied.n_params - tied.n_params == 1000 * 64


def test_explicit_head_size():
    # Gemma-7B-like attention: hidden 3072, 16 heads of 256 (a * d = 4096 != h). q: 3072 -> 4096,
    # k, v: 3072 -> 16 * 256, o: 4096 -> 3072.
    shape = mm.models.llama_model(n_layers=1, hidden_size=3072, n_heads=16, head_dim=256, intermediate_size=24576,
                           vocab_size=256000, tied_embeddings=True)
    assert shape.component_params()["attention"] == 4 * 3072 * 4096


def test_uniform_model_is_the_articles_generic_model():
    seven_b = mm.uniform_model(7e9, 32)
    assert seven_b.n_params == 7_000_000_000
    ten = mm.uniform_model(1000, 10)  # ten equal layers of 100 parameters
    assert (ten.n_layers, ten.params_per_layer) == (10, 100)
    assert mm.uniform_model("7B", 32).n_params == 7 * 10**9
    uneven = mm.uniform_model(1003, 10)  # the remainder of an uneven split sits outside the layers
    assert uneven.n_params == 1003 and uneven.params_per_layer == 100


def test_with_changes_rederives_defaults():
    # A slider that changes the heads of GPT-2 keeps head_dim = h / a and n_kv_heads = a.
    wider = mm.PRESETS["gpt2"].with_changes(n_heads=16)
    assert (wider.head_dim, wider.n_kv_heads, wider.n_params) == (48, 16, 124_439_808)
    mha = mm.PRESETS["llama-2-7b"].with_changes(n_heads=64)
    assert (mha.head_dim, mha.n_kv_heads) == (64, 64)
    gqa = mm.PRESETS["mistral-7b"].with_changes(hidden_size=2048, n_heads=16)
    assert (gqa.head_dim, gqa.n_kv_heads) == (128, 8)  # the explicit GQA kv count is kept


def test_lora_matrices_map_names_onto_each_family():
    assert mm.PRESETS["gpt2"].lora_matrices(("q", "v")) == [("attn.c_attn", 768, 2304)]  # one fused matrix
    assert mm.PRESETS["llama-3-8b"].lora_matrices(("q", "v")) == [("q_proj", 4096, 4096), ("v_proj", 4096, 1024)]
    assert len(mm.PRESETS["llama-2-7b"].lora_matrices("all")) == 7


def test_resolve_model():
    assert mm.resolve_model("GPT2") is mm.PRESETS["gpt2"]
    plain = mm.resolve_model(7e9)
    assert plain.n_params == 7 * 10**9 and not plain.has_shape


# ---- from_hf_config on real config.json files ------------------------------------------------------
# Typed in from the model repositories' config.json (fields copied as published).
GPT2_CONFIG = {  # huggingface.co/openai-community/gpt2/blob/main/config.json
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
    "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": None,
    "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
    "summary_use_proj": True, "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257,
}
BERT_CONFIG = {  # huggingface.co/google-bert/bert-base-uncased/blob/main/config.json
    "architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": False,
    "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
    "intermediate_size": 3072, "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
    "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 0, "position_embedding_type": "absolute",
    "transformers_version": "4.6.0.dev0", "type_vocab_size": 2, "use_cache": True, "vocab_size": 30522,
}
LLAMA2_CONFIG = {  # huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
    "_name_or_path": "meta-llama/Llama-2-7b-hf", "architectures": ["LlamaForCausalLM"], "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "float16",
    "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000,
}
MISTRAL_CONFIG = {  # huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000,
}
LLAMA3_CONFIG = {  # huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": 128256,
}
LLAMA32_1B_CONFIG = {  # huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json (tied, explicit head_dim)
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256,
}
TINYLLAMA_CONFIG = {  # huggingface.co/TinyLlama/TinyLlama-1.1B-Chat-v1.0/blob/main/config.json
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5632,
    "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22,
    "num_key_value_heads": 4, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.35.0", "use_cache": True, "vocab_size": 32000,
}
BERT_SST_CONFIG = dict(BERT_CONFIG, architectures=["BertForSequenceClassification"],
                       id2label={"0": "NEGATIVE", "1": "POSITIVE"}, label2id={"NEGATIVE": 0, "POSITIVE": 1})

REAL_CONFIGS = {
    "gpt2": (GPT2_CONFIG, 124_439_808),
    "bert-base-uncased": (BERT_CONFIG, 109_482_240),
    "Llama-2-7b-hf": (LLAMA2_CONFIG, 6_738_415_616),
    "Mistral-7B-v0.1": (MISTRAL_CONFIG, 7_241_732_096),
    "Meta-Llama-3-8B": (LLAMA3_CONFIG, 8_030_261_248),
    # Hand: tied 128256 x 2048 + 2048 + 16 x (2*2048*2048 + 2*2048*512 + 3*2048*8192 + 2*2048)
    "Llama-3.2-1B": (LLAMA32_1B_CONFIG, 1_235_814_400),
    # Hand: 2 x 32000 x 2048 + 2048 + 22 x (2*2048*2048 + 2*2048*256 + 3*2048*5632 + 2*2048)
    "TinyLlama-1.1B": (TINYLLAMA_CONFIG, 1_100_048_384),
    # BertModel + classifier: 109,482,240 + 2 x 768 + 2
    "bert-base-uncased-sst2": (BERT_SST_CONFIG, 109_483_778),
}


@pytest.mark.parametrize("name", REAL_CONFIGS)
def test_from_hf_config_counts(name):
    config, count = REAL_CONFIGS[name]
    assert mm.from_hf_config(config).n_params == count


def test_from_hf_config_reads_json_text_and_files(tmp_path):
    assert mm.from_hf_config(json.dumps(GPT2_CONFIG)).n_params == 124_439_808
    (tmp_path / "config.json").write_text(json.dumps(MISTRAL_CONFIG))
    assert mm.from_hf_config(tmp_path).n_params == 7_241_732_096  # a model directory
    assert mm.from_hf_config(tmp_path / "config.json").n_kv_heads == 8
    assert mm.from_hf_config(str(tmp_path / "config.json")).n_params == 7_241_732_096


def test_from_hf_config_matches_presets():
    assert mm.from_hf_config(LLAMA3_CONFIG).n_params == mm.PRESETS["llama-3-8b"].n_params
    assert mm.from_hf_config(MISTRAL_CONFIG).head_dim == 128


# ---- live: transformers models built on the meta device -------------------------------------------
def _meta_count(torch, model_class, config):
    with torch.device("meta"):
        model = model_class(config)
    params = list(model.parameters())  # tied matrices appear once
    return sum(p.numel() for p in params), len(params)


def _tensor_count(shape):
    return sum(copies for _, _, copies in shape.tensor_copies(("embeddings", "layer", "final_norm", "head")))


LIVE_CASES = [
    # (name, transformers class, config class, config dict)
    ("gpt2", "GPT2LMHeadModel", "GPT2Config", GPT2_CONFIG),
    ("gpt2-n_inner", "GPT2LMHeadModel", "GPT2Config", dict(GPT2_CONFIG, n_inner=1000, n_layer=3)),
    ("gpt2-untied", "GPT2LMHeadModel", "GPT2Config", dict(GPT2_CONFIG, n_layer=2, tie_word_embeddings=False)),
    ("llama-2-7b", "LlamaForCausalLM", "LlamaConfig", LLAMA2_CONFIG),
    ("llama-3-8b-gqa", "LlamaForCausalLM", "LlamaConfig", LLAMA3_CONFIG),
    ("llama-3.2-1b-tied", "LlamaForCausalLM", "LlamaConfig", LLAMA32_1B_CONFIG),
    ("tinyllama", "LlamaForCausalLM", "LlamaConfig", TINYLLAMA_CONFIG),
    ("llama-bias", "LlamaForCausalLM", "LlamaConfig",
     dict(TINYLLAMA_CONFIG, num_hidden_layers=2, attention_bias=True, mlp_bias=True)),
    ("llama-head-dim", "LlamaForCausalLM", "LlamaConfig",
     dict(TINYLLAMA_CONFIG, num_hidden_layers=2, head_dim=96, tie_word_embeddings=True)),
    ("mistral-7b", "MistralForCausalLM", "MistralConfig", MISTRAL_CONFIG),
    ("bert-base", "BertModel", "BertConfig", BERT_CONFIG),
    ("bert-large", "BertModel", "BertConfig",
     dict(BERT_CONFIG, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)),
    ("bert-sst2", "BertForSequenceClassification", "BertConfig", BERT_SST_CONFIG),
]


@pytest.mark.live
@pytest.mark.parametrize("name, model_class, config_class, config", LIVE_CASES, ids=[c[0] for c in LIVE_CASES])
def test_counts_match_transformers_on_the_meta_device(torch, transformers, name, model_class, config_class, config):
    hf_config = getattr(transformers, config_class)(**{k: v for k, v in config.items() if k != "architectures"})
    count, tensors = _meta_count(torch, getattr(transformers, model_class), hf_config)
    shape = mm.from_hf_config(config)
    assert shape.n_params == count
    # The number of parameter tensors decides Adam's 4-byte step counters.
    assert _tensor_count(shape) == tensors


@pytest.mark.live
def test_presets_match_transformers(torch, transformers):
    cases = {
        "gpt2-medium": (transformers.GPT2LMHeadModel, transformers.GPT2Config(n_layer=24, n_embd=1024, n_head=16)),
        "llama-2-70b": (transformers.LlamaForCausalLM, transformers.LlamaConfig(
            num_hidden_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
            intermediate_size=28672, vocab_size=32000)),
        "bert-large-uncased": (transformers.BertModel, transformers.BertConfig(
            hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)),
    }
    for name, (model_class, config) in cases.items():
        assert mm.PRESETS[name].n_params == _meta_count(torch, model_class, config)[0], name


# ---- every family against transformers, from published configs -----------------------------------
from validation.published_configs import (CONFIG_CLASS_DEFAULTS, ERNIE_MOE_CONFIGS, LAYERED_CONFIGS,  # noqa: E402
                                          PUBLISHED_ACTIVE, PUBLISHED_CONFIGS, PUBLISHED_HYBRID_CONFIGS,
                                          PUBLISHED_TOTALS)

# every config of a supported type: the published ones, DeepSeek's, ERNIE 4.5 MoE's and the Mamba-2 hybrids'
# (published apart) and a config class's defaults
READABLE_CONFIGS = (PUBLISHED_CONFIGS | LAYERED_CONFIGS | ERNIE_MOE_CONFIGS | PUBLISHED_HYBRID_CONFIGS
                    | CONFIG_CLASS_DEFAULTS)

_ENCODERS = ("bert", "roberta")


def _hf_model_on_meta(torch, transformers, config):
    """The transformers model a config.json builds (AutoModelForCausalLM; AutoModel for encoders), on meta."""
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    auto = transformers.AutoModel if config["model_type"] in _ENCODERS else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(hf_config)
    return model


@pytest.mark.live
@pytest.mark.parametrize("name", PUBLISHED_CONFIGS)
def test_every_family_counts_like_transformers(torch, transformers, name):
    config = PUBLISHED_CONFIGS[name]
    model = _hf_model_on_meta(torch, transformers, config)
    params = list(model.parameters())  # tied matrices appear once
    shape = mm.from_hf_config(config)
    assert shape.n_params == sum(p.numel() for p in params)
    assert _tensor_count(shape) == len(params)  # one 4-byte Adam step counter per tensor
    # The tensor shapes too, as a multiset (dims sorted: GPT-2's Conv1D stores d_in x d_out).
    ours = sorted(tuple(sorted(t.shape)) for _, t, copies in shape.tensor_copies(("embeddings", "layer", "final_norm",
                                                                                  "head")) for _ in range(copies))
    assert ours == sorted(tuple(sorted(p.shape)) for p in params)


@pytest.mark.parametrize("name", PUBLISHED_CONFIGS)
def test_counts_are_near_the_published_totals(name):
    # Model cards round; 2% covers their rounding (Qwen2-57B-A14B's "57B" is 57.4B).
    shape = mm.from_hf_config(PUBLISHED_CONFIGS[name])
    assert abs(shape.n_params / PUBLISHED_TOTALS[name] - 1) < 0.02
    if name in PUBLISHED_ACTIVE:
        assert abs(shape.active_params / PUBLISHED_ACTIVE[name] - 1) < 0.02
    else:
        assert shape.active_params == shape.n_params


def test_every_supported_model_type_has_two_published_configs():
    # DeepSeek's configs mix dense and MoE blocks, published apart (validation/published_configs.py)
    types = [c["model_type"] for c in READABLE_CONFIGS.values()]
    # Qwen 3.5's, Gemma 4's and Gemma 3n's text models: no published config at hand (no hub access);
    # tests/test_families_hybrid.py and tests/test_families_gemma4.py check their config classes' defaults and tiny
    # widths against transformers' own build instead.
    # LFM2-MoE: LFM2-8B-A1B is the one published config at hand, and Lfm2MoeConfig's defaults build no model (it
    # derives no layer_types); tests/test_families_lfm2.py checks tiny widths against transformers' own build.
    # Falcon-H1: its config class's defaults only; tests/test_families_mamba2.py checks them and tiny widths.
    # GLM-4.7-Flash (glm4_moe_lite): its config class's defaults only (tests/test_families_glm_lite.py)
    no_published = {"qwen3_5_text", "qwen3_5_moe_text", "gemma4_text", "gemma3n_text", "lfm2_moe", "falcon_h1",
                    "glm4_moe_lite"}
    for model_type in set(mm.architectures.SUPPORTED_MODEL_TYPES) - no_published:
        assert types.count(model_type) >= 2, model_type


def test_mixtral_experts_by_hand():
    # Mixtral-8x7B: per block a router 8 x 4096 and 8 experts of 3 x 4096 x 14336; 2 of 8 active.
    shape = mm.from_hf_config(PUBLISHED_CONFIGS["Mixtral-8x7B-v0.1"])
    h, inner, L = 4096, 14336, 32
    attention = 2 * h * h + 2 * h * 1024
    assert shape.params_per_layer == attention + 8 * h + 8 * 3 * h * inner + 2 * h
    assert shape.n_params - shape.active_params == L * 6 * 3 * h * inner


def test_lora_names_follow_each_family():
    phi3 = mm.from_hf_config(PUBLISHED_CONFIGS["Phi-3-mini-4k-instruct"])
    assert phi3.lora_matrices(("q", "v")) == [("qkv_proj", 3072, 3 * 3072)]
    assert phi3.lora_matrices("all") == [("qkv_proj", 3072, 9216), ("o_proj", 3072, 3072),
                                         ("gate_up_proj", 3072, 16384), ("down_proj", 8192, 3072)]
    neox = mm.from_hf_config(PUBLISHED_CONFIGS["pythia-160m"])
    assert [m for m, _, _ in neox.lora_matrices("all")] == ["query_key_value", "dense", "dense_h_to_4h",
                                                            "dense_4h_to_h"]
    # Mixtures of experts (tests/test_moe_lora.py holds them against peft): lora_matrices lists linear matrices
    # only, so targets that reach the routed experts' 3-D tensors are refused there, and lora_adapters lists them.
    moe = mm.from_hf_config(PUBLISHED_CONFIGS["Qwen3-30B-A3B"])
    for targets in (("experts",), "all"):
        with pytest.raises(ValueError, match="routed experts"):
            moe.lora_matrices(targets)
    assert [m for m, _, _ in moe.lora_matrices(("q", "k", "v", "o"))] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert [m for m, _, _ in moe.lora_matrices("attention")] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert moe.lora_matrices(("router",)) == [("gate.weight", 2048, 128)]
    mixtral = mm.from_hf_config(PUBLISHED_CONFIGS["Mixtral-8x7B-v0.1"])
    assert [a.module for a in mixtral.lora_adapters("all")] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate.weight",
                                                                "experts.gate_up_proj", "experts.down_proj"]
    shared = mm.from_hf_config(PUBLISHED_CONFIGS["Qwen1.5-MoE-A2.7B"])
    assert shared.lora_matrices(("up",)) == [("up_proj", 2048, 5632)]  # the shared expert's


# ---- every memory field is modelled or refused ------------------------------------------------------
def _field_cases():
    for model_type, fields in mm.config_reader.CONFIG_FIELDS.items():
        base = next(c for c in READABLE_CONFIGS.values() if c["model_type"] == model_type)
        for key in fields:
            if key in mm.config_reader.UNSUPPORTED_EXAMPLES:
                yield model_type, key, dict(base, **{key: mm.config_reader.UNSUPPORTED_EXAMPLES[key]})


@pytest.mark.parametrize("model_type, key, config", list(_field_cases()),
                         ids=[f"{t}-{k}" for t, k, _ in _field_cases()])
def test_unsupported_field_values_are_refused_by_name(model_type, key, config):
    with pytest.raises(ValueError, match=key):
        mm.from_hf_config(config)


def test_mixed_dropout_is_refused_and_probabilities_are_kept():
    gpt2 = PUBLISHED_CONFIGS["gpt2"]
    assert mm.from_hf_config(gpt2).dropout_p == 0.1
    assert mm.from_hf_config(dict(gpt2, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)).dropout_p == 0.0
    with pytest.raises(ValueError, match="attn_pdrop"):
        mm.from_hf_config(dict(gpt2, resid_pdrop=0.0, embd_pdrop=0.0))
    assert mm.from_hf_config(PUBLISHED_CONFIGS["Meta-Llama-3-8B"]).dropout_p == 0.0


def test_dense_blocks_among_moe_blocks_are_a_second_layout():
    # Qwen3MoeDecoderLayer: a dense Qwen3MoeMLP at intermediate_size in mlp_only_layers and off decoder_sparse_step
    qwen = PUBLISHED_CONFIGS["Qwen3-30B-A3B"]
    stepped = mm.from_hf_config(dict(qwen, decoder_sparse_step=2))
    assert [(layout.n_experts, blocks[:3]) for layout, blocks in stepped.layouts()] == [(0, (0, 2, 4)), (128, (1, 3, 5))]
    listed = mm.from_hf_config(dict(qwen, mlp_only_layers=[0, 1]))
    assert [blocks[:3] for layout, blocks in listed.layouts() if not layout.n_experts] == [(0, 1)]
    with pytest.raises(ValueError, match="decoder_sparse_step"):
        mm.from_hf_config(dict(qwen, decoder_sparse_step=0))


def test_layer_types_follow_the_config_classes():
    # Gemma2Config: even blocks slide; Gemma3TextConfig: every 6th block is full; Qwen2: only with use_sliding_window.
    g2 = mm.from_hf_config(PUBLISHED_CONFIGS["gemma-2-2b"])
    assert g2.attention_windows[:4] == (4096, None, 4096, None)
    g3 = mm.from_hf_config(PUBLISHED_CONFIGS["gemma-3-1b-pt"])
    assert g3.attention_windows.count(None) == 4 and g3.attention_windows[5] is None
    assert mm.from_hf_config(PUBLISHED_CONFIGS["Qwen2.5-7B"]).attention_windows == (None,) * 28
    assert set(mm.from_hf_config(PUBLISHED_CONFIGS["Mistral-7B-v0.1"]).attention_windows) == {4096}
    assert set(mm.from_hf_config(PUBLISHED_CONFIGS["Phi-3-mini-4k-instruct"]).attention_windows) == {2047}


@pytest.mark.parametrize("preset, source", __import__("memmath.presets", fromlist=["x"]).PUBLISHED_CONFIG_NAMES.items())
def test_presets_are_their_published_configs(preset, source):
    # The live test above checks each published config against transformers; the preset must be the same model.
    from dataclasses import replace

    # Those built in code (gpt2_model, llama_model, bert_model) included: the same shape, the same defaults.
    # a preset is the model in 16 bits: a checkpoint's quantization_config (DeepSeek-V3's block FP8) is the file's
    config = {k: v for k, v in READABLE_CONFIGS[source].items() if k != "quantization_config"}
    expected = replace(mm.from_hf_config(config), name=preset)
    assert mm.PRESETS[preset] == expected


# ---- saved activations of the newly read model_types, measured (held out) ---------------------------
def test_new_model_types_save_what_pytorch_measured():
    # validation/measure.py grid block 7 (NEW_FAMILIES), recorded after from_hf_config read these
    # model_types and the trace modelled gelu_pytorch_tanh, Qwen3's q/k norms, Phi-3's fused matrices
    # and OLMo 2's norms: 28 held-out cases. Three missed at first and were then modelled: phi3-gqa bf16
    # full SDPA (+49,152 B: its SDPA output is copied for o_proj) and OLMo 2's two bf16 SDPA cases
    # (+4,096 B: its rotary tables are fp32); two more cases of each were measured after the change.
    import memmath_lessons.reference

    cases = memmath_lessons.reference.load_measured()
    new = cases[cases["shape"].isin(["gpt2-tanh", "qwen2-gqa", "mistral-gqa", "qwen3-gqa", "phi3-gqa", "olmo2-gqa"])]
    assert len(new) == 28
    for row in new.to_dict("records"):
        predicted = memmath_lessons.reference.predict_case(row)
        assert int(predicted.activation_detail.saved_by_forward) == row["saved_bytes"], row["case_id"]
        assert int(predicted.optimizer_states) == row["optimizer_state_bytes"], row["case_id"]


# ---- RoBERTa for sequence classification ------------------------------------------------------------
ROBERTA_SST = dict(PUBLISHED_CONFIGS["roberta-base"], architectures=["RobertaForSequenceClassification"], num_labels=3)


def test_roberta_classifier_replaces_the_pooler():
    # RobertaForSequenceClassification builds RobertaModel(add_pooling_layer=False) and a
    # RobertaClassificationHead: dense 768 x 768 + 768 (as large as the pooler it replaces) and out_proj
    # 768 x 3 + 3. RobertaModel (the pooler included) has 124,645,632 parameters (its model card's count).
    shape = mm.from_hf_config(ROBERTA_SST)
    assert shape.n_params == 124_645_632 + 768 * 3 + 3
    assert [t.name for t in shape.tensors("head")] == ["classifier.dense.weight", "classifier.dense.bias",
                                                       "classifier.out_proj.weight", "classifier.out_proj.bias"]


@pytest.mark.live
def test_roberta_classifier_counts_like_transformers(torch, transformers):
    fields = {k: v for k, v in ROBERTA_SST.items() if k not in ("model_type", "architectures")}
    count, tensors = _meta_count(torch, transformers.RobertaForSequenceClassification,
                                 transformers.RobertaConfig(**fields))
    shape = mm.from_hf_config(ROBERTA_SST)
    assert shape.n_params == count and _tensor_count(shape) == tensors


def test_sliding_window_defaults_follow_the_config_classes():
    # Gemma2Config and Gemma3TextConfig default sliding_window to 4096 (transformers 5.24
    # configuration_gemma2.py / configuration_gemma3.py); an explicit null turns sliding off, as in
    # MistralConfig (sliding_window: null in Mistral-7B-Instruct-v0.2's config.json).
    gemma2 = {k: v for k, v in PUBLISHED_CONFIGS["gemma-2-2b"].items() if k != "sliding_window"}
    shape = mm.from_hf_config(gemma2)
    assert shape.sliding_window == 4096 and shape.layer_types[:2] == ("sliding_attention", "full_attention")
    mistral = mm.from_hf_config(dict(PUBLISHED_CONFIGS["Mistral-7B-v0.1"], sliding_window=None))
    assert mistral.sliding_window is None and mistral.layer_types is None


def test_qwen2_moe_sliding_layout_follows_its_config_class():
    # Qwen2MoeConfig.__post_init__ (transformers 5.24): sliding_window is saved as 0 without
    # use_sliding_window, and with it the even blocks below max_window_layers slide.
    config = dict(PUBLISHED_CONFIGS["Qwen1.5-MoE-A2.7B"], sliding_window=0, use_sliding_window=False)
    assert mm.from_hf_config(config).layer_types is None
    sliding = mm.from_hf_config(dict(config, sliding_window=4096, use_sliding_window=True, max_window_layers=4))
    assert sliding.layer_types[:6] == ("sliding_attention", "full_attention", "sliding_attention", "full_attention",
                                       "full_attention", "full_attention")


def test_qwen3_moe_reads_the_expert_count_transformers_5_saves():
    # Qwen3MoeConfig (transformers 5.24) has attribute_map {"num_experts": "num_local_experts"}: a config.json it
    # saves names num_local_experts; the Hub's Qwen3-30B-A3B config names num_experts (128).
    config = {k: v for k, v in PUBLISHED_CONFIGS["Qwen3-30B-A3B"].items() if k != "num_experts"}
    assert mm.from_hf_config(dict(config, num_local_experts=64)).n_experts == 64
    assert mm.from_hf_config(dict(config, num_experts=128)).n_experts == 128
    with pytest.raises(ValueError, match="num_local_experts"):
        mm.from_hf_config(dict(config, num_experts=128, num_local_experts=64))

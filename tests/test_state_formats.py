"""The formats of a hybrid model's cache: keys and values in the cache's format, conv states in the model's dtype and
recurrent states in fp32, measured on what transformers 5.24 fills.

Each family's tiny model is built on the CPU in fp32 and in bf16 and run with use_cache=True (a 10-token prompt for 2
sequences, then 2 decode steps); the expected bytes are the storages behind the DynamicCache's tensors, the keys and
values apart from the conv and recurrent states. transformers allocates a conv state like the convolution's input
(LinearAttentionLayer.lazy_initialization: zeros of its dtype, the model's) and a recurrent state as zeros_like of
the fp32 state the PyTorch paths compute, so a model's states follow its dtype and not the keys' format. A cache
format below 16 bits needs transformers' QuantizedCache, which builds only for models whose layers are all full
attention (cache_utils.QuantizedCache): memmath refuses it by name for these models, as transformers does.
"""

from __future__ import annotations

import pytest

import memmath as mm
from memmath.serving import serving_changes

PROMPT, STEPS, BATCH = 10, 2, 2
BASE = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=2, head_dim=8)
MAMBA = dict(mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2)
DELTANET = dict(linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=16,
                linear_conv_kernel_dim=4, layer_types=["linear_attention", "full_attention"])
FAMILIES = {
    "qwen3_next": dict(BASE, **DELTANET, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
                       shared_expert_intermediate_size=16),
    "qwen3_5_text": dict(BASE, **DELTANET),
    "qwen3_5_moe_text": dict(BASE, **DELTANET, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
                             shared_expert_intermediate_size=16),
    "lfm2": dict(BASE, layer_types=["conv", "full_attention"], conv_L_cache=3),
    "granitemoehybrid": dict(BASE, **MAMBA, mamba_n_groups=2, layer_types=["mamba", "attention"],
                             num_local_experts=2, num_experts_per_tok=1),
    "nemotron_h": dict(BASE, num_hidden_layers=3, hybrid_override_pattern="M*-", mamba_num_heads=4,
                       mamba_head_dim=16, ssm_state_size=8, conv_kernel=4, expand=2, n_groups=2),
    "falcon_h1": dict(BASE, **dict(MAMBA, mamba_n_heads=3, mamba_d_ssm=48, mamba_n_groups=1)),
}
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def _filled(torch, transformers, model_type, dtype):
    """The DynamicCache a tiny model in `dtype` fills: bytes of its keys and values, of its states, and the dtypes
    of its conv and recurrent states."""
    hf = transformers.AutoConfig.for_model(model_type, **FAMILIES[model_type])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf, dtype=getattr(torch, DTYPES[dtype])).eval()
    with torch.no_grad():
        cache = model(torch.randint(0, 64, (BATCH, PROMPT)), use_cache=True).past_key_values
        for _ in range(STEPS):
            cache = model(torch.randint(0, 64, (BATCH, 1)), cache=cache, use_cache=True).past_key_values
    seen, kv, states, dtypes = set(), 0, 0, {"conv_states": set(), "recurrent_states": set()}

    def stored(tensor):
        if not isinstance(tensor, torch.Tensor) or tensor.untyped_storage().data_ptr() in seen:
            return 0
        seen.add(tensor.untyped_storage().data_ptr())
        return tensor.untyped_storage().nbytes()

    for layer in cache.layers:
        kv += stored(getattr(layer, "keys", None)) + stored(getattr(layer, "values", None))
        for kind in dtypes:
            for tensor in (getattr(layer, kind, None) or {}).values():
                if tensor is None:  # a state the layer has no use for (LFM2's short convolution has no recurrent one)
                    continue
                states += stored(tensor)
                dtypes[kind].add(str(tensor.dtype).removeprefix("torch."))
    return hf, kv, states, dtypes


def _shape(model_type):
    return mm.from_hf_config(dict(FAMILIES[model_type], model_type=model_type))


@pytest.mark.live
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_states_are_in_the_model_s_dtype(torch, transformers, model_type, dtype):
    _, kv, states, dtypes = _filled(torch, transformers, model_type, dtype)
    assert states > 0 and kv > 0
    assert dtypes["conv_states"] == {DTYPES[dtype]}
    assert dtypes["recurrent_states"] <= {"float32"}  # LFM2's short convolution has none
    shape = _shape(model_type)
    tokens = PROMPT + STEPS
    assert mm.kv_cache_bytes(shape, context_len=tokens, batch_size=BATCH, kv_format=dtype) == kv + states
    served = mm.inference_memory(shape, weights_format=dtype, kv_format=dtype, context_len=tokens, batch_size=BATCH)
    assert served.kv_cache == kv + states


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_the_keys_format_leaves_the_states_in_the_model_s_dtype(torch, transformers, model_type):
    # An fp32 model with its keys and values priced in bf16: the states an fp32 model fills, the keys a bf16 one's.
    _, _, fp32_states, _ = _filled(torch, transformers, model_type, "fp32")
    _, bf16_kv, bf16_states, _ = _filled(torch, transformers, model_type, "bf16")
    shape, tokens = _shape(model_type), PROMPT + STEPS
    served = mm.inference_memory(shape, weights_format="fp32", kv_format="bf16", context_len=tokens,
                                 batch_size=BATCH)
    assert served.kv_cache == bf16_kv + fp32_states
    assert mm.kv_cache_bytes(shape, context_len=tokens, batch_size=BATCH, kv_format="bf16",
                             state_format="fp32") == bf16_kv + fp32_states
    # Quantized weights compute in bf16: the states of a bf16 model.
    served = mm.inference_memory(shape, weights_format="int4", kv_format="bf16", context_len=tokens, batch_size=BATCH)
    assert served.kv_cache == bf16_kv + bf16_states


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_a_quantized_cache_is_refused_as_transformers_refuses_it(torch, transformers, model_type):
    hf = transformers.AutoConfig.for_model(model_type, **FAMILIES[model_type])
    with pytest.raises(ValueError, match="only full attention"):
        transformers.QuantizedCache("fp8", hf)
    shape = _shape(model_type)
    for kv_format in ("fp8_e4m3", "fp8", "int8", "int4"):
        with pytest.raises(ValueError, match="kv_format .*QuantizedCache.*model's dtype"):
            mm.kv_cache_bytes(shape, context_len=12, kv_format=kv_format)
        with pytest.raises(ValueError, match="kv_format"):
            mm.inference_memory(shape, kv_format=kv_format)


@pytest.mark.live
def test_a_full_attention_model_builds_a_quantized_cache(torch, transformers):
    # The refusal is the hybrid layers': a Llama's fp8 QuantizedCache builds, and memmath prices its cache in fp8.
    config = dict(BASE, model_type="llama")
    hf = transformers.AutoConfig.for_model("llama", **BASE)
    assert len(transformers.QuantizedCache("fp8", hf).layers) == 2
    shape = mm.from_hf_config(config)
    assert mm.kv_cache_bytes(shape, context_len=12, kv_format="fp8_e4m3") == 2 * 2 * 2 * 8 * 12


# A window of the cache: Mistral's sliding_window on every layer, Gemma 2's alternating layer_types, Llama 4's chunks
WINDOWED = {"mistral": dict(sliding_window=16), "gemma2": dict(sliding_window=16),
            "llama4_text": dict(attention_chunk_size=16, intermediate_size_mlp=64, num_local_experts=2)}


@pytest.mark.live
@pytest.mark.parametrize("model_type", sorted(WINDOWED))
def test_a_windowed_model_has_no_quantized_cache_either(torch, transformers, model_type):
    # transformers 5.24's QuantizedCache raises for any layer type but full_attention, and memmath refuses it by name
    fields = dict(BASE, **WINDOWED[model_type])
    with pytest.raises(ValueError, match="only full attention layers"):
        transformers.QuantizedCache("fp8", transformers.AutoConfig.for_model(model_type, **fields))
    shape = mm.from_hf_config(dict(fields, model_type=model_type))
    with pytest.raises(ValueError, match="sliding-window") as refused:
        mm.kv_cache_bytes(shape, context_len=12, kv_format="fp8_e4m3")
    assert refused.value.field == "kv_format"
    assert mm.kv_cache_bytes(shape, context_len=12, kv_format="bf16") > 0  # its own dtype: a DynamicCache


@pytest.mark.live
def test_mistral_without_a_window_builds_a_quantized_cache(torch, transformers):
    # Mistral-7B-v0.2 and later publish sliding_window null: every layer full, an fp8 cache builds and is priced
    hf = transformers.AutoConfig.for_model("mistral", **BASE, sliding_window=None)
    assert len(transformers.QuantizedCache("fp8", hf).layers) == 2
    shape = mm.from_hf_config(dict(BASE, model_type="mistral", sliding_window=None))
    assert mm.kv_cache_bytes(shape, context_len=12, kv_format="fp8_e4m3") == 2 * 2 * 2 * 8 * 12


def test_state_format_must_be_a_model_dtype():
    shape = _shape("lfm2")
    for bad in ("int8", "fp8_e4m3", "nf4"):
        with pytest.raises(ValueError, match="state_format"):
            mm.kv_cache_bytes(shape, context_len=12, state_format=bad)


def test_the_planner_offers_no_cache_transformers_cannot_build():
    changes = serving_changes("qwen3-next-80b-a3b", "RTX 4090", context_len=32768)
    assert changes and not [c for c in changes if c.change.startswith("KV cache")]
    llama = serving_changes("llama-3-8b", "RTX 4090", context_len=131072)
    assert [c for c in llama if c.change == "KV cache in fp8_e4m3"]


def test_the_command_line_refuses_a_quantized_cache_for_a_hybrid_model(capsys):
    from memmath.cli import main
    assert main(["infer", "lfm2-1.2b", "--kv", "fp8"]) == 2
    err = capsys.readouterr().err
    assert "QuantizedCache" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("kv_format", ["nf4", "fp8_e5m2"])
def test_a_format_no_cache_stores_is_refused_by_name(kv_format, capsys):
    # QuantizedCache's backends (cache_utils.py): fp8 keeps float8_e4m3fn, quanto and hqq integers; none keeps these
    with pytest.raises(ValueError, match="no cache that stores keys and values") as refused:
        mm.kv_cache_bytes("llama-3-8b", context_len=12, kv_format=kv_format)
    assert refused.value.field == "kv_format"
    from memmath.cli import main
    assert main(["infer", "llama-3-8b", "--kv", kv_format]) == 2
    err = capsys.readouterr().err
    assert "no cache that stores" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.live
def test_the_fp8_cache_keeps_e4m3(torch, transformers):
    from transformers.cache_utils import Fp8QuantizedLayer
    assert Fp8QuantizedLayer.fp8_dtype == torch.float8_e4m3fn


def test_an_integer_cache_names_what_it_leaves_out():
    memory = mm.inference_memory("llama-3-8b", kv_format="int4", context_len=4096)
    note = next(str(n) for n in memory.notes if n.kind == "integer_cache_values_only")
    assert "residual window" in note and "127 tokens" in note
    assert not [n for n in mm.inference_memory("llama-3-8b", kv_format="fp8_e4m3").notes
                if n.kind == "integer_cache_values_only"]

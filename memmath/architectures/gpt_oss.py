"""gpt-oss (transformers 5.24 configuration_gpt_oss.py, modeling_gpt_oss.py): grouped-query attention with biases and
a learned sink logit per head (GptOssAttention.sinks), a mixture of experts whose router and experts carry biases and
whose gate and up are interleaved in one input-first Parameter (GptOssMLP, _moe.biased_tensors), even blocks sliding
over 128 tokens. Its saved activations are not traced yet (activations='textbook')."""

from functools import partial

from . import _decoder, _moe
from ._parts import ParamTensor
from .record import (ATTENTION_BIAS, LAYER_TYPES_FIELD, MOE, SLIDING_WINDOW, Architecture, decoder_fields,
                    full_every, refuse_true)

GPT_OSS_FIELDS = {"attention_bias": ATTENTION_BIAS, "sliding_window": SLIDING_WINDOW, "layer_types": LAYER_TYPES_FIELD,
                  **MOE, "num_local_experts": "routed experts",
                  "swiglu_limit": "a clamp inside the experts' SwiGLU: no memory",
                  "router_aux_loss_coef": "a loss weight: no memory (the aux loss itself: output_router_logits)"}


def attention_tensors(m) -> list:
    """GptOssAttention in parameters() order: the sinks (one logit per query head, added to each row of the scores
    before the softmax), then q, k, v and o with biases."""
    return [ParamTensor("self_attn.sinks", "attention", (m.n_heads,))] + _decoder.attention_tensors(m)


def read_options(config, get):
    refuse_true(get, "output_router_logits")
    # GptOssConfig: intermediate_size is one expert's width (GptOssExperts); no dense MLP, no shared expert
    return {"n_experts": get("num_local_experts", 128), "expert_intermediate_size": get("intermediate_size"),
            "experts_per_tok": get("num_experts_per_tok", 4), "norm_topk_prob": True}


def even_blocks_slide(get, layers):
    """GptOssConfig.__post_init__: even blocks (0, 2, ...) slide."""
    return full_every(2, layers)


ARCHITECTURE = Architecture(
    model_type="gpt_oss", family="llama", title="gpt-oss", source="configuration_gpt_oss.py, modeling_gpt_oss.py",
    fields=decoder_fields(GPT_OSS_FIELDS),
    # GptOssConfig's defaults (those of openai/gpt-oss-120b) where the reader's differ
    defaults={"attention_bias": True, "sliding_window": 128, "head_dim": 64},
    read_options=read_options, derive_layer_types=even_blocks_slide,
    tensors=partial(_decoder.tensors, attention=attention_tensors, mlp=_moe.biased_tensors),
    lora_modules=lambda m: {**_decoder.lora_table(m), **_moe.biased_lora_table(m)},
    # peft 0.21 on the meta device: the router's adapter, then gate_up_proj's (inner ParamWrapper), then down_proj's
    lora_order=("router.weight", "experts.gate_up_proj", "experts.down_proj"),
    # peft 0.21 does not convert gpt_oss (utils/transformers_weight_conversion.py), so "all-linear" adapts the
    # attention only; the router and experts take target_parameters
    not_all_linear=("router", "experts"),
    # GptOssPreTrainedModel._keep_in_fp32_modules: the norms stay fp32 when the model loads in fp16 (not in bf16)
    fp32_modules_fp16=("post_attention_layernorm", "input_layernorm", "norm"),
    tp_plan=_moe.TP_PLAN,
    sdpa=False,  # GptOssPreTrainedModel._supports_sdpa = False (the sinks need eager or flash kernels)
    traced=False,  # the clamped SwiGLU and the sinks are not replayed: activations='textbook'
    # the prefill working set of its experts' loop is not measured: the plain estimate (inference.working_set_bytes)
    prefill_phases=None,
)

"""Seed-OSS (transformers 5.24 configuration_seed_oss.py, modeling_seed_oss.py): LLaMA's layers with biases on q, k
and v (attention_bias, true by default) and on o only with attention_out_bias, head_dim 128 by default, and dropout
on the attention probabilities (attention_dropout) and after o_proj and down_proj (residual_dropout), 0.1 each by
default: SeedOssConfig's defaults are Seed-OSS-36B's.

Its trace (block below) was written before it was measured on the CPU (tests/test_families_dense.py steps tiny
Seed-OSS models under SDPA and eager, in fp32 and bf16, with dropout on and off, with use_cache and with every bias:
the saved bytes equal the trace's to the byte)."""

from ..trace import Tensor, Trace
from . import _decoder
from ._steps import Pass
from .record import Architecture, decoder_fields


def read_options(config, get):
    """SeedOssAttention: q_proj, k_proj, v_proj with bias=attention_bias, o_proj with bias=attention_out_bias."""
    qkv, out = get.flag("attention_bias", True), get.flag("attention_out_bias", False)
    if out and not qkv:
        raise ValueError("config field 'attention_out_bias' is true while 'attention_bias' is false; memmath models "
                         "a bias on o_proj only beside biases on q, k and v (set attention_bias true, or "
                         "attention_out_bias false)")
    return {"qkv_bias": qkv, "attention_bias": qkv and out}


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """SeedOssDecoderLayer: LLaMA's layer with dropout (residual_dropout) on the attention output after o_proj and
    on the MLP output after down_proj, before each residual add."""
    attn = _decoder.attention(tr, shape, tr.rms_norm(x, trainable, "input_layernorm"), trainable, p)
    r1 = tr.add(x, tr.dropout(attn, p.dropout, "residual"))
    out = _decoder.mlp(tr, shape, tr.rms_norm(r1, trainable, "post_attention_layernorm"), trainable, p)
    return tr.add(r1, tr.dropout(out, p.dropout, "MLP residual"))


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="seed_oss", family="llama", title="Seed-OSS", source="configuration_seed_oss.py, modeling_seed_oss.py",
    fields=decoder_fields({"attention_bias": "biases on q, k, v", "attention_out_bias": "bias on o (refused without "
                           "attention_bias)", "mlp_bias": "biases on gate, up, down", "residual_dropout": "dropout_p"}),
    defaults={"head_dim": 128, "num_key_value_heads": 8, "attention_bias": True, "tie_word_embeddings": False},
    dropout_fields={"attention_dropout": 0.1, "residual_dropout": 0.1},
    read_options=read_options, trace_block=block,
)

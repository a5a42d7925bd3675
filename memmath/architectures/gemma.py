"""Gemma (transformers 5.24 configuration_gemma.py, modeling_gemma.py): GeGLU, head_dim 256, a tied head,
embeddings scaled by sqrt(h), RMSNorm weights applied as (1 + w)."""

from ..trace import Tensor, Trace
from . import _decoder
from ._steps import Pass, dims, houlsby, kv_cache
from .record import ATTENTION_BIAS, Architecture, decoder_fields


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """GemmaDecoderLayer (Gemma2/Gemma3 with four norms, Gemma 3 with q/k norms), from modeling_gemma*.py.

    Every norm is a GemmaRMSNorm ((1 + weight) in fp32, rms_norm's plus_one); the MLP is
    gelu_pytorch_tanh(gate) * up; Gemma 2/3 normalize each sublayer's output before the residual add
    and may softcap the eager scores (tanh). Gemma 3's q/k norms run over each head before the rotation.
    """
    dm, t = dims(shape), tr.t
    h, a, kv, d = dm["h"], dm["a"], dm["k"], dm["d"]
    sandwich = shape.norm_layout == "sandwich"
    lora = p.lora_of

    def norm(y, name, rows=None, width=h):
        return tr.rms_norm(y, trainable, name, rows=rows, plus_one=width)

    q, k, v = _decoder.qkv(tr, shape, norm(x, "input_layernorm"), trainable, p)
    if shape.qk_norm == "head":  # Gemma3RMSNorm over each head's d values
        q = norm(q, "q_norm", rows=t * a, width=d)
        k = norm(k, "k_norm", rows=t * kv, width=d)
    q, k = tr.rotary(q, p.tables), tr.rotary(k, p.tables)
    if p.cache:
        k, v = kv_cache(tr, k, v)
    ctx = tr.attention(q, k, v, heads=a, head_dim=d, kind=p.kind, dropout=p.dropout, softmax_fp32=True,
                       name="attention", softcap=shape.attn_softcap, kv_contiguous=p.cache)
    out = houlsby(tr, tr.linear(ctx, t * h, trainable, lora("o_proj"), "o_proj"), p, "attention")
    if sandwich:
        out = norm(out, "post_attention_layernorm")
    r1 = tr.add(x, out)
    h2 = norm(r1, "pre_feedforward_layernorm" if sandwich else "post_attention_layernorm")
    prod = tr.silu_times(*_decoder.gate_up(tr, shape, h2, trainable, p), "GeGLU", act_name=shape.hidden_act)
    out = houlsby(tr, tr.linear(prod, t * h, trainable, lora("down_proj"), "down_proj"), p, "MLP")
    if sandwich:
        out = norm(out, "post_feedforward_layernorm")
    return tr.add(r1, out)


def read_options(config, get):
    return {}


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="gemma", family="llama", title="Gemma", source="configuration_gemma.py, modeling_gemma.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS,
                           "hidden_act": "the MLP activation ('gelu' is read as gelu_pytorch_tanh, as GemmaConfig "
                                         "does)"}),
    defaults={"head_dim": 256, "tie_word_embeddings": True},
    # GemmaConfig.__post_init__ replaces the legacy 'gelu' with the tanh form (config_reader reads it so)
    activations=("gelu_pytorch_tanh", "gelu"), activation_aliases={"gelu": "gelu_pytorch_tanh"},
    trace_block=block, traced_activations=("gelu_pytorch_tanh", "gelu"), scaled_embedding=True, final_norm="rms_plus_one",
)

"""Phi-3 (transformers 5.24 configuration_phi3.py, modeling_phi3.py): one fused qkv_proj and gate_up_proj,
dropout on both residual branches, a sliding window over every layer."""

from ..trace import Tensor, Trace
from . import _decoder
from ._steps import Pass
from .record import SLIDING_WINDOW, Architecture, decoder_fields


# Phi3Config.base_model_tp_plan (configuration_phi3.py), whose colwise_gather_output / rowwise_split_input split
# the weights as colwise / rowwise do
TP_PLAN = {"layers.*.self_attn.qkv_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
           "layers.*.mlp.gate_up_proj": "colwise", "layers.*.mlp.down_proj": "rowwise"}


def read_options(config, get):
    return {"fused_qkv": True, "fused_gate_up": True}


def block(tr: Trace, shape, x: Tensor, trainable: bool, p: Pass) -> Tensor:
    """Phi3DecoderLayer: LLaMA's layer with one qkv_proj and one gate_up_proj (their outputs sliced into views)
    and dropout on both residual branches (resid_attn_dropout, resid_mlp_dropout)."""
    h1 = tr.rms_norm(x, trainable, "input_layernorm")
    out = _decoder.attention(tr, shape, h1, trainable, p, fused=True)
    r1 = tr.add(x, tr.dropout(out, p.dropout, "residual"))
    h2 = tr.rms_norm(r1, trainable, "post_attention_layernorm")
    out = _decoder.mlp(tr, shape, h2, trainable, p, fused=True)
    return tr.add(r1, tr.dropout(out, p.dropout, "MLP residual"))


ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="phi3", family="llama", title="Phi-3", source="configuration_phi3.py, modeling_phi3.py",
    fields=decoder_fields({"sliding_window": SLIDING_WINDOW, "resid_pdrop": "dropout_p",
                           "embd_pdrop": "unused by Phi3Model (transformers 5.24): no memory"}),
    # embd_pdrop: Phi3Model (transformers 5.24) builds no embedding dropout
    dropout_fields={"attention_dropout": 0.0, "resid_pdrop": 0.0},
    read_options=read_options, trace_block=block, amp_measured=True, tp_plan=TP_PLAN,
)

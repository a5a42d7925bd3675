"""Phi-3 (transformers 5.24 configuration_phi3.py, modeling_phi3.py): one fused qkv_proj and gate_up_proj,
dropout on both residual branches, a sliding window over every layer."""

from .record import SLIDING_WINDOW, Architecture, decoder_fields


# Phi3Config.base_model_tp_plan (configuration_phi3.py), whose colwise_gather_output / rowwise_split_input split
# the weights as colwise / rowwise do
TP_PLAN = {"layers.*.self_attn.qkv_proj": "colwise", "layers.*.self_attn.o_proj": "rowwise",
           "layers.*.mlp.gate_up_proj": "colwise", "layers.*.mlp.down_proj": "rowwise"}


def read_options(config, get):
    return {"fused_qkv": True, "fused_gate_up": True}


ARCHITECTURE = Architecture(
    model_type="phi3", family="llama", title="Phi-3", source="configuration_phi3.py, modeling_phi3.py",
    fields=decoder_fields({"sliding_window": SLIDING_WINDOW, "resid_pdrop": "dropout_p",
                           "embd_pdrop": "unused by Phi3Model (transformers 5.24): no memory"}),
    # embd_pdrop: Phi3Model (transformers 5.24) builds no embedding dropout
    dropout_fields={"attention_dropout": 0.0, "resid_pdrop": 0.0},
    read_options=read_options, residual_dropout=True, amp_measured=True, tp_plan=TP_PLAN,
)

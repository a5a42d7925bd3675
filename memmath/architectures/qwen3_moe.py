"""Qwen3-MoE (transformers 5.24 configuration_qwen3_moe.py, modeling_qwen3_moe.py): Qwen3's attention (q/k
norms), routed experts only; Qwen3MoeConfig maps num_experts onto num_local_experts and saves that name."""

from .qwen2_moe import QWEN_MOE, read_qwen_moe
from . import _decoder, _moe
from .record import ATTENTION_BIAS, MOE, QK_NORM, QWEN_SLIDING, SLIDING_WINDOW, Architecture, decoder_fields


def read_options(config, get):
    key = "num_local_experts" if config.get("num_local_experts") is not None else "num_experts"
    options = read_qwen_moe(config, get, experts_key=key, experts_default=128, width_default=768, k_default=8)
    experts = options["n_experts"]
    if key == "num_local_experts" and config.get("num_experts") not in (None, experts):
        raise ValueError(f"config fields 'num_experts' ({config['num_experts']}) and 'num_local_experts' "
                         f"({experts}) disagree; Qwen3MoeConfig keeps one number of routed experts")
    return dict(options, qk_norm="head")


def lora_table(m) -> dict:
    """peft's names in a Qwen3-MoE block: a sparse block's (its MLP is the routed experts), or a dense block's
    (mlp_only_layers, decoder_sparse_step), whose MLP names peft turns into the routed experts'
    (_moe.converted_mlp_names)."""
    table = _decoder.lora_table(m)
    return table if m.n_experts else _moe.converted_mlp_names(table, "qwen3_moe")


ARCHITECTURE = Architecture(
    model_type="qwen3_moe", family="llama", title="Qwen3-MoE",
    source="configuration_qwen3_moe.py, modeling_qwen3_moe.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, "sliding_window": SLIDING_WINDOW, **QWEN_SLIDING,
                           **MOE, **QWEN_MOE, **QK_NORM,
                           "num_local_experts": "routed experts (the name transformers 5 saves for num_experts)"}),
    defaults={"num_key_value_heads": 4}, read_options=read_options, sliding_needs_flag=True, lora_modules=lora_table,
    lora_order=("experts.gate_up_proj", "experts.down_proj", "gate.weight"),
    tp_plan=_moe.TP_PLAN,
)

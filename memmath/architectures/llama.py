"""LLaMA (transformers 5.24 configuration_llama.py, modeling_llama.py: LlamaForCausalLM)."""

from .record import ATTENTION_BIAS, Architecture, decoder_fields

ARCHITECTURE = Architecture(
    model_type="llama", family="llama", title="LLaMA", source="configuration_llama.py, modeling_llama.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, "mlp_bias": "biases on gate, up, down"}),
    amp_measured=True, houlsby_placed=True,
    tp_traced=True,  # one tensor-parallel rank traced (validation/parallel.py)
)

"""Granite 3.x (transformers 5.24 configuration_granite.py, modeling_granite.py): LLaMA's layers and tensors with four
scalar multipliers, none of which adds a parameter or a saved activation:

- embedding_multiplier: inputs_embeds * m (GraniteModel.forward), a new t x h tensor; multiplying by a Python
  float keeps nothing for backward;
- residual_multiplier: residual + out * m in each block (GraniteDecoderLayer), the same;
- attention_multiplier: the attention's softmax scale (GraniteAttention.scaling), in place of 1 / sqrt(head_dim);
- logits_scaling: logits / s (GraniteForCausalLM.forward), a new t x V tensor in the model's dtype; the unscaled
  logits are freed once divided, and a division by a Python float keeps nothing.

So a Granite step saves exactly LLaMA's tensors and the rotary decoder's trace is Granite's: measured on the CPU
(tests/test_families_dense.py steps a tiny Granite under SDPA and eager in fp32 and bf16: the saved bytes equal
the trace's to the byte, the peak within 1%; beside a tiny LLaMA of the same widths it saved the same bytes and
peaked 48 B higher)."""

from .record import ATTENTION_BIAS, Architecture, decoder_fields

MULTIPLIERS = {
    "embedding_multiplier": "scales the embeddings (a temporary, no saved tensor)",
    "residual_multiplier": "scales each sublayer's output (a temporary, no saved tensor)",
    "attention_multiplier": "the attention's softmax scale (no memory)",
    "logits_scaling": "divides the logits (a t x V tensor in place of the unscaled, nothing saved)",
}

ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="granite", family="llama", title="Granite", source="configuration_granite.py, modeling_granite.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, "mlp_bias": "biases on gate, up, down",
                           **MULTIPLIERS}),
)

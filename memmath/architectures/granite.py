"""Granite 3.x (transformers 5.24 configuration_granite.py, modeling_granite.py): LLaMA's layers and tensors with four
scalar multipliers, none of which adds a parameter or a saved activation:

- embedding_multiplier: inputs_embeds * m (GraniteModel.forward), a new t x h tensor; multiplying by a Python
  float keeps nothing for backward;
- residual_multiplier: residual + out * m in each block (GraniteDecoderLayer), the same;
- attention_multiplier: the attention's softmax scale (GraniteAttention.scaling), in place of 1 / sqrt(head_dim);
- logits_scaling: logits / s (GraniteForCausalLM.forward), a second t x V tensor in the model's dtype while the
  loss is computed, saving nothing (a division by a Python float).

The products are extra temporaries the rotary decoder's trace does not place: traced=False
(activations='textbook') until a Granite block is traced and measured."""

from .record import ATTENTION_BIAS, Architecture, decoder_fields

MULTIPLIERS = {
    "embedding_multiplier": "scales the embeddings (a temporary, no saved tensor)",
    "residual_multiplier": "scales each sublayer's output (a temporary, no saved tensor)",
    "attention_multiplier": "the attention's softmax scale (no memory)",
    "logits_scaling": "divides the logits (a t x V temporary, no saved tensor)",
}

ARCHITECTURE = Architecture(
    model_type="granite", family="llama", title="Granite", source="configuration_granite.py, modeling_granite.py",
    fields=decoder_fields({"attention_bias": ATTENTION_BIAS, "mlp_bias": "biases on gate, up, down",
                           **MULTIPLIERS}),
    traced=False,  # the multipliers' temporaries are not traced yet (activations='textbook')
)

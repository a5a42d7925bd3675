"""Mistral (transformers 5.24 configuration_mistral.py, modeling_mistral.py): LLaMA's layers with a sliding
window over every layer (no layer_types: transformers' cache slides every layer)."""

from .record import SLIDING_WINDOW, Architecture, decoder_fields

ARCHITECTURE = Architecture(
    houlsby_placed=True,  # after o_proj and down_proj, as validation/houlsby.py places them in LLaMA
    model_type="mistral", family="llama", title="Mistral", source="configuration_mistral.py, modeling_mistral.py",
    fields=decoder_fields({"sliding_window": SLIDING_WINDOW}), defaults={"sliding_window": 4096},
    amp_measured=True,
    tp_traced=True,  # one tensor-parallel rank traced (validation/parallel.py)
)

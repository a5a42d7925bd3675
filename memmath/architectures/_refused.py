"""Model types transformers 5.24 builds that memmath refuses by name, each with the reason and what would make it
work. memmath/architectures/__init__.py's `architecture()` and the config reader say the reason; every refusal
points to the traced answer (memmath/traced.py), which steps the model itself under fake tensors."""

from __future__ import annotations

TRACED = "memmath train CONFIG --traced gives PyTorch's traced answer"
_BLOCK_SHAPES = ("memmath lists blocks of one shape (ModelShape's n_layers copies of one block's tensors); a record "
                 "that lists each block's tensors would make it work")
_MAMBA2 = "Mamba-2 layers are not modelled yet (their cache is: memmath.states.Mamba2)"

# GLM-4.5: dense MLPs in the first blocks, MoE after (DeepSeek-V2/V3 read one layout and refuse a mix alike)
_TWO_LAYOUTS = ("; memmath lists blocks of one layout, so config field 'first_k_dense_replace' has no exact count "
                "until ModelShape holds a dense and a MoE block layout (its pieces are ready: architectures/_latent.py, "
                "_moe.shared_experts_tensors)")

REFUSED_MODEL_TYPES = {
    "glm4_moe": "GLM-4.5: dense MLPs in its first first_k_dense_replace blocks" + _TWO_LAYOUTS,
    "qwen3_next": "Qwen3-Next interleaves gated DeltaNet linear-attention blocks with gated full-attention blocks "
                  "(config layer_types, every full_attention_interval-th block full), whose tensors differ; "
                  + _BLOCK_SHAPES + " (its cache is: memmath.states.GatedDeltaNet and FullAttention)",
    "granitemoehybrid": "Granite 4.0 hybrid: " + _MAMBA2 + ", beside attention blocks (config layer_types)",
    "falcon_h1": "Falcon-H1: " + _MAMBA2 + ", run in parallel with attention in every block",
    "nemotron_h": "Nemotron-H: " + _MAMBA2 + ", beside attention and MLP blocks (config layers_block_type)",
}


def refusal(model_type) -> str | None:
    """Why memmath refuses a model type transformers builds (with the traced alternative), or None."""
    reason = REFUSED_MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None
    return None if reason is None else f"{reason}; {TRACED}"

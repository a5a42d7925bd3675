"""Model types transformers 5.24 builds that memmath refuses by name, each with the reason and what would make it
work. memmath/architectures/__init__.py's `architecture()` and the config reader say the reason; every refusal
points to the traced answer (memmath/traced.py), which steps the model itself under fake tensors."""

from __future__ import annotations

TRACED = "memmath train CONFIG --traced gives the traced answer, the model stepped by PyTorch under fake tensors"
_BLOCK_SHAPES = ("memmath has no record of these blocks yet; a record that names each block layout and its tensors "
                 "(ModelShape.block_layouts, as architectures/qwen3_next.py does) would make it work")
# Gemma 4 and Gemma 3n's language models (modeling_gemma4.py, modeling_gemma3n.py)
_PER_LAYER = ("per-layer input embeddings (embed_tokens_per_layer: vocab_size_per_layer_input rows of "
              "num_hidden_layers x hidden_size_per_layer_input, gated into each block), the last num_kv_shared_layers "
              "blocks reading the keys and values of an earlier block")
_GEMMA4 = ("with " + _PER_LAYER + " and full-attention layers of another head size (global_head_dim); the "
           "towers (Gemma4VisionModel, Gemma4AudioModel) are not modelled, so the whole model is refused; its "
           "text_config alone reads as model_type gemma4_text, and a record of the towers in memmath/multimodal.py "
           "would make the whole model work")
_GEMMA3N = ("with " + _PER_LAYER + ", AltUp (altup_num_inputs predicted copies of the hidden state), a LAuReL "
            "low-rank residual (laurel_rank) and activation sparsity; the towers are not modelled, so the whole "
            "model is refused; its text_config alone reads as model_type gemma3n_text, and a record of the towers in "
            "memmath/multimodal.py would make the whole model work")
# Qwen 3.5 (modeling_qwen3_5.py, modeling_qwen3_5_moe.py): the language models are recorded, the vision tower not
_QWEN3_5 = ("with gated DeltaNet linear-attention blocks beside gated full-attention blocks (config layer_types){}; "
            "the vision tower (Qwen3_5VisionModel) is not modelled, so the whole model is refused; its text_config "
            "alone reads as model_type {}, and a record of the vision tower in memmath/multimodal.py would make the "
            "whole model work")
_MOE_MLP = ", the MLP of each a mixture of experts with a gated shared expert"

REFUSED_MODEL_TYPES = {
    # ---- this year's releases (transformers 5.24 modeling_<type>.py), each with what memmath lacks ----------------
    "gemma4": "Gemma 4 (Gemma4ForConditionalGeneration): a vision and an audio tower, and a language model " + _GEMMA4,
    "gemma3n": "Gemma 3n (Gemma3nForConditionalGeneration): a MobileNet vision and a conformer audio tower, and a "
               "language model " + _GEMMA3N,
    "qwen3_5": "Qwen 3.5 (Qwen3_5ForConditionalGeneration): a vision tower, and a language model "
               + _QWEN3_5.format("", "qwen3_5_text"),
    "qwen3_5_moe": "Qwen 3.5 MoE (Qwen3_5MoeForConditionalGeneration): a vision tower, and a language model "
                   + _QWEN3_5.format(_MOE_MLP, "qwen3_5_moe_text"),
    "llama4": "Llama 4: its vision model (Llama4VisionModel: an unfolding patch convolution, a pixel-shuffle adapter "
              "MLP) is not modelled; its text_config alone reads as model_type llama4_text (the layout of Scout: every "
              "block a mixture of experts); a record of the vision model would make the whole model work",
    "deepseek_v32": "DeepSeek-V3.2: multi-head latent attention with DeepSeek Sparse Attention (a lightning indexer in "
                    "every block, config index_n_heads, index_head_dim, index_topk: tensors and a key cache of its "
                    "own) and dense MLPs in its first first_k_dense_replace blocks; a record of the indexer beside "
                    "architectures/_latent.py, and a shape of two block layouts, would make it work",
    "deepseek_v4": "DeepSeek-V4: hyper-connections (hc_mult residual streams mixed by Sinkhorn-normalized matrices) in "
                   "place of one residual stream, compressed and sliding-window attention layers (config layer_types, "
                   "compress_rates) with a lightning indexer, grouped low-rank output projections (o_groups, "
                   "o_lora_rank) and sqrtsoftplus routing; memmath models blocks of one residual stream and one "
                   "attention layout, so a record of these layers (and their caches in memmath.states) would make it "
                   "work",
    "kimi_linear": "Kimi Linear: Kimi Delta Attention (linear attention with a short convolution, fixed-size state) "
                   "beside multi-head latent attention blocks (config layer_types), and dense MLPs beside mixtures of "
                   "experts (mlp_layer_types); " + _BLOCK_SHAPES + " (and a KDA state in memmath.states)",
    "glm_moe_dsa": "GLM-5 (GlmMoeDsaForCausalLM): multi-head latent attention with the DeepSeek Sparse Attention "
                   "lightning indexer (index_n_heads, index_head_dim, index_topk) and dense MLPs in its first "
                   "first_k_dense_replace blocks; a record of the indexer and a shape of two block layouts would make "
                   "it work",
    "modernbert": "ModernBERT: an encoder whose layout is not that of BERT (the encoder record of memmath): one "
                  "fused Wqkv and a GeGLU Wi, no biases, the first layer without an attention norm, global attention "
                  "every global_attn_every_n_layers-th layer and a local_attention window in the others, its forward "
                  "on unpadded tokens; a record of its tensors and its forward would make it work",
    "t5": "T5: an encoder-decoder (an encoder stack, and a decoder stack with cross-attention over the output of the "
          "encoder, each with a relative position bias), where memmath models decoder-only and encoder-only models; "
          "a record of the two stacks and their cross-attention cache would make it work",
    "t5gemma": "T5Gemma: an encoder-decoder of Gemma 2 blocks (the decoder with cross-attention over the output of the "
               "encoder), where memmath models decoder-only and encoder-only models; a record of the two stacks "
               "would make it work",
    "jamba": "Jamba: Mamba (v1) layers beside attention layers (attn_layer_offset, attn_layer_period) and mixtures of "
             "experts in every expert_layer_period-th block; " + _BLOCK_SHAPES + " (and a Mamba state in "
             "memmath.states)",
}


def refusal(model_type) -> str | None:
    """Why memmath refuses a model type transformers builds (with the traced alternative), or None."""
    reason = REFUSED_MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None
    return None if reason is None else f"{reason}; {TRACED}"

"""Published config.json values of the model families memmath reads, typed in as dicts.

Each dict holds the fields of the model repository's config.json that shape the model (copied as
published; token ids and other fields that change no tensor are left out where noted), with the
model id in a comment and the total its model card publishes. Nothing is downloaded: the live
test (tests/test_models.py) builds each transformers model from these dicts on the meta device
and checks memmath's count against `sum(p.numel() for p in model.parameters())`.
"""

# LFM2's dense models: attention in blocks 3, 6, 9, 11, 13 and 15 (full_attn_idxs [2, 5, 8, 10, 12, 14]), conv elsewhere
LFM2_LAYER_TYPES = ["full_attention" if i in (2, 5, 8, 10, 12, 14) else "conv" for i in range(16)]

PUBLISHED_CONFIGS = {
    # ---- llama ----
    "Llama-3.2-1B": {  # meta-llama/Llama-3.2-1B (1.23B)
        "model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
        "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False, "hidden_act": "silu",
        "max_position_embeddings": 131072, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
    },
    "Meta-Llama-3-8B": {  # meta-llama/Meta-Llama-3-8B (8.03B)
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False,
        "attention_bias": False, "hidden_act": "silu", "max_position_embeddings": 8192, "rope_theta": 500000.0,
        "attention_dropout": 0.0, "torch_dtype": "bfloat16",
    },
    # ---- mistral ----
    "Mistral-7B-v0.1": {  # mistralai/Mistral-7B-v0.1 (7.24B); sliding window 4,096
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "sliding_window": 4096,
        "tie_word_embeddings": False, "hidden_act": "silu", "max_position_embeddings": 32768,
        "rope_theta": 10000.0, "torch_dtype": "bfloat16",
    },
    "Mistral-Nemo-Base-2407": {  # mistralai/Mistral-Nemo-Base-2407 (12.2B); explicit head_dim 128 (a*d != h)
        "model_type": "mistral", "hidden_size": 5120, "intermediate_size": 14336, "num_hidden_layers": 40,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
        "sliding_window": None, "tie_word_embeddings": False, "hidden_act": "silu",
        "max_position_embeddings": 1024000, "rope_theta": 1000000.0, "torch_dtype": "bfloat16",
    },
    # ---- mixtral ----
    "Mixtral-8x7B-v0.1": {  # mistralai/Mixtral-8x7B-v0.1 (46.7B total, 12.9B active per token)
        "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
        "vocab_size": 32000, "sliding_window": None, "tie_word_embeddings": False, "hidden_act": "silu",
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
        "output_router_logits": False, "torch_dtype": "bfloat16",
    },
    "Mixtral-8x22B-v0.1": {  # mistralai/Mixtral-8x22B-v0.1 (141B total, 39B active)
        "model_type": "mixtral", "hidden_size": 6144, "intermediate_size": 16384, "num_hidden_layers": 56,
        "num_attention_heads": 48, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
        "vocab_size": 32768, "sliding_window": None, "tie_word_embeddings": False, "hidden_act": "silu",
        "max_position_embeddings": 65536, "rope_theta": 1000000.0, "torch_dtype": "bfloat16",
    },
    # ---- qwen2 ----
    "Qwen2.5-0.5B": {  # Qwen/Qwen2.5-0.5B (0.49B total, 0.36B non-embedding)
        "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
        "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 24, "hidden_act": "silu",
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "attention_dropout": 0.0,
        "torch_dtype": "bfloat16",
    },
    "Qwen2.5-7B": {  # Qwen/Qwen2.5-7B (7.61B total, 6.53B non-embedding)
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False,
        "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 28, "hidden_act": "silu",
        "max_position_embeddings": 131072, "rope_theta": 1000000.0, "attention_dropout": 0.0,
        "torch_dtype": "bfloat16",
    },
    # ---- qwen2_moe ----
    "Qwen1.5-MoE-A2.7B": {  # Qwen/Qwen1.5-MoE-A2.7B (14.3B total, 2.7B active)
        "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
        "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 151936, "tie_word_embeddings": False,
        "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1, "norm_topk_prob": False,
        "output_router_logits": False, "use_sliding_window": False, "sliding_window": 32768,
        "max_window_layers": 21, "hidden_act": "silu", "max_position_embeddings": 8192, "rope_theta": 1000000.0,
        "torch_dtype": "bfloat16",
    },
    "Qwen2-57B-A14B": {  # Qwen/Qwen2-57B-A14B (57B total, 14B active)
        "model_type": "qwen2_moe", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 151936, "tie_word_embeddings": False,
        "num_experts": 64, "num_experts_per_tok": 8, "moe_intermediate_size": 2560,
        "shared_expert_intermediate_size": 20480, "decoder_sparse_step": 1, "norm_topk_prob": False,
        "use_sliding_window": False, "sliding_window": 65536, "max_window_layers": 28, "hidden_act": "silu",
        "max_position_embeddings": 65536, "rope_theta": 1000000.0, "torch_dtype": "bfloat16",
    },
    # ---- qwen3 ----
    "Qwen3-0.6B": {  # Qwen/Qwen3-0.6B (0.6B total, 0.44B non-embedding)
        "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "tie_word_embeddings": True, "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": 28, "hidden_act": "silu", "max_position_embeddings": 40960, "rope_theta": 1000000,
        "attention_dropout": 0.0, "torch_dtype": "bfloat16",
    },
    "Qwen3-8B": {  # Qwen/Qwen3-8B (8.2B total, 6.95B non-embedding)
        "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "tie_word_embeddings": False, "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": 36, "hidden_act": "silu", "max_position_embeddings": 40960, "rope_theta": 1000000,
        "torch_dtype": "bfloat16",
    },
    # ---- qwen3_moe ----
    "Qwen3-30B-A3B": {  # Qwen/Qwen3-30B-A3B (30.5B total, 3.3B active)
        "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
        "tie_word_embeddings": False, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "output_router_logits": False,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": 48, "hidden_act": "silu",
        "max_position_embeddings": 40960, "rope_theta": 1000000.0, "torch_dtype": "bfloat16",
    },
    "Qwen3-235B-A22B": {  # Qwen/Qwen3-235B-A22B (235B total, 22B active)
        "model_type": "qwen3_moe", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 94,
        "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
        "tie_word_embeddings": False, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1536,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "use_sliding_window": False,
        "sliding_window": None, "max_window_layers": 94, "hidden_act": "silu", "max_position_embeddings": 40960,
        "rope_theta": 1000000.0, "torch_dtype": "bfloat16",
    },
    # ---- gpt_oss (configs as published, less token ids and quantization_config: the tensors are the same) ----
    "gpt-oss-20b": {  # openai/gpt-oss-20b (model card: 20.91B total, 3.61B active without the token embedding)
        "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088,
        "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4, "attention_bias": True,
        "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12,
        "tie_word_embeddings": False, "hidden_act": "silu", "max_position_embeddings": 131072,
        "rope_theta": 150000, "swiglu_limit": 7.0, "output_router_logits": False, "attention_dropout": 0.0,
    },
    "gpt-oss-120b": {  # openai/gpt-oss-120b (model card: 116.83B total, 5.13B active without the token embedding)
        "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088,
        "num_local_experts": 128, "num_experts_per_tok": 4, "experts_per_token": 4, "attention_bias": True,
        "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18,
        "tie_word_embeddings": False, "hidden_act": "silu", "max_position_embeddings": 131072,
        "rope_theta": 150000, "swiglu_limit": 7.0, "output_router_logits": False, "attention_dropout": 0.0,
    },
    # ---- gemma ----
    "gemma-2b": {  # google/gemma-2b (2.51B)
        "model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18,
        "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 256000,
        "hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
        "rope_theta": 10000.0, "attention_bias": False, "attention_dropout": 0.0, "torch_dtype": "bfloat16",
    },
    "gemma-7b": {  # google/gemma-7b (8.54B)
        "model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000,
        "hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
        "rope_theta": 10000.0, "attention_bias": False, "torch_dtype": "bfloat16",
    },
    # ---- gemma2 ----
    "gemma-2-2b": {  # google/gemma-2-2b (2.61B)
        "model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 4096,
        "query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
        "max_position_embeddings": 8192, "attention_bias": False, "attention_dropout": 0.0,
        "torch_dtype": "float32",
    },
    "gemma-2-9b": {  # google/gemma-2-9b (9.24B)
        "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
        "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 4096, "query_pre_attn_scalar": 256,
        "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "max_position_embeddings": 8192,
        "torch_dtype": "float32",
    },
    # ---- gemma3_text ----
    "gemma-3-1b-pt": {  # google/gemma-3-1b-pt (1.0B: 999,885,952)
        "model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
        "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 512, "sliding_window_pattern": 6,
        "query_pre_attn_scalar": 256, "max_position_embeddings": 32768, "rope_theta": 1000000,
        "attn_logit_softcapping": None, "final_logit_softcapping": None, "torch_dtype": "bfloat16",
    },
    "gemma-3-270m": {  # google/gemma-3-270m (270M: 268,098,176)
        "model_type": "gemma3_text", "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
        "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 512, "query_pre_attn_scalar": 256,
        "max_position_embeddings": 32768,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 5
        + ["full_attention"] + ["sliding_attention"] * 5 + ["full_attention"],
        "torch_dtype": "bfloat16",
    },
    # ---- phi3 ----
    "Phi-3-mini-4k-instruct": {  # microsoft/Phi-3-mini-4k-instruct (3.8B); sliding window 2,047
        "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "sliding_window": 2047,
        "hidden_act": "silu", "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "rope_theta": 10000.0, "torch_dtype": "bfloat16",
    },
    "phi-4": {  # microsoft/phi-4 (14.7B), model_type phi3
        "model_type": "phi3", "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40,
        "num_attention_heads": 40, "num_key_value_heads": 10, "vocab_size": 100352, "sliding_window": None,
        "hidden_act": "silu", "max_position_embeddings": 16384, "original_max_position_embeddings": 16384,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "rope_theta": 250000, "torch_dtype": "bfloat16",
    },
    # ---- olmo2 ----
    "OLMo-2-1124-7B": {  # allenai/OLMo-2-1124-7B (7.30B)
        "model_type": "olmo2", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100352, "tie_word_embeddings": False,
        "attention_bias": False, "hidden_act": "silu", "max_position_embeddings": 4096, "rope_theta": 500000,
        "torch_dtype": "float32",
    },
    "OLMo-2-0425-1B": {  # allenai/OLMo-2-0425-1B (1.48B)
        "model_type": "olmo2", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 100352, "tie_word_embeddings": False,
        "attention_bias": False, "hidden_act": "silu", "max_position_embeddings": 4096, "rope_theta": 500000,
        "torch_dtype": "float32",
    },
    # ---- smollm3 ----
    "SmolLM3-3B": {  # HuggingFaceTB/SmolLM3-3B (3.08B); every 4th layer NoPE (SmolLM3Config's defaults are this model)
        "model_type": "smollm3", "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
        "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 128256, "tie_word_embeddings": True,
        "attention_bias": False, "mlp_bias": False, "hidden_act": "silu", "max_position_embeddings": 65536,
        "no_rope_layer_interval": 4, "use_sliding_window": False, "sliding_window": None, "torch_dtype": "bfloat16",
    },
    "SmolLM3-3B-Base": {  # HuggingFaceTB/SmolLM3-3B-Base (3.08B): the same shape before instruction tuning
        "model_type": "smollm3", "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
        "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 128256, "tie_word_embeddings": True,
        "attention_bias": False, "mlp_bias": False, "hidden_act": "silu", "max_position_embeddings": 65536,
        "no_rope_layer_interval": 4, "use_sliding_window": False, "sliding_window": None, "torch_dtype": "bfloat16",
    },
    # ---- granite ----
    "granite-3.3-8b-instruct": {  # ibm-granite/granite-3.3-8b-instruct (8.17B)
        "model_type": "granite", "hidden_size": 4096, "intermediate_size": 12800, "num_hidden_layers": 40,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 49159, "tie_word_embeddings": True,
        "attention_bias": False, "mlp_bias": False, "hidden_act": "silu", "max_position_embeddings": 131072,
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
        "logits_scaling": 16.0, "torch_dtype": "bfloat16",
    },
    "granite-3.3-2b-instruct": {  # ibm-granite/granite-3.3-2b-instruct (2.53B)
        "model_type": "granite", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 40,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 49159, "tie_word_embeddings": True,
        "attention_bias": False, "mlp_bias": False, "hidden_act": "silu", "max_position_embeddings": 131072,
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.015625,
        "logits_scaling": 8.0, "torch_dtype": "bfloat16",
    },
    # ---- llama4_text: the text_config of Llama 4's config.json (the whole model, vision tower included, is
    # 109B total and 17B active on the model card; Llama4TextConfig's defaults are this text model) ----
    "Llama-4-Scout-17B-16E": {  # meta-llama/Llama-4-Scout-17B-16E, text_config
        "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 202048, "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
        "attention_chunk_size": 8192, "no_rope_layers": [], "use_qk_norm": True, "attention_bias": False,
        "hidden_act": "silu", "max_position_embeddings": 10485760, "output_router_logits": False,
        "rope_theta": 500000.0, "torch_dtype": "bfloat16",
    },
    "Llama-4-Scout-17B-16E-Instruct": {  # meta-llama/Llama-4-Scout-17B-16E-Instruct, text_config (the same shape)
        "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 202048, "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
        "attention_chunk_size": 8192, "no_rope_layers": [], "use_qk_norm": True, "attention_bias": False,
        "hidden_act": "silu", "max_position_embeddings": 10485760, "output_router_logits": False,
        "rope_theta": 500000.0, "torch_dtype": "bfloat16",
    },
    # meta-llama/Llama-4-Maverick-17B-128E, text_config: Scout's widths with 128 experts in every second block
    # (interleave_moe_layer_step 2) and dense Llama4TextMLPs at intermediate_size_mlp between them; use_qk_norm and
    # max_position_embeddings are recalled, not copied (no hub access here), and change no tensor
    "Llama-4-Maverick-17B-128E": {
        "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": 202048, "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
        "attention_chunk_size": 8192, "no_rope_layers": [], "use_qk_norm": False, "attention_bias": False,
        "hidden_act": "silu", "max_position_embeddings": 1048576, "output_router_logits": False,
        "rope_theta": 500000.0, "torch_dtype": "bfloat16",
    },
    # ---- qwen3_next ----
    # Qwen/Qwen3-Next-80B-A3B-Instruct and -Thinking (80B total, 3B activated): recalled, not copied (no hub access
    # here); three gated DeltaNet blocks to one gated full-attention block, 512 experts of 512, 10 a token
    "Qwen3-Next-80B-A3B-Instruct": {
        "model_type": "qwen3_next", "hidden_size": 2048, "intermediate_size": 5120, "num_hidden_layers": 48,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 151936,
        "tie_word_embeddings": False, "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "norm_topk_prob": True, "full_attention_interval": 4, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "partial_rotary_factor": 0.25, "hidden_act": "silu",
        "max_position_embeddings": 262144, "rope_theta": 10000000, "output_router_logits": False,
        "torch_dtype": "bfloat16",
    },
    # ---- lfm2, lfm2_moe ----
    # LiquidAI/LFM2-1.2B, LFM2-700M and LFM2-350M (their cards: 16 layers, 10 conv and 6 attention; 1,170,340,608,
    # 742,489,344 and 354,483,968 parameters) and LiquidAI/LFM2-8B-A1B (8.3B total, 1.5B active; 24 layers, 18 conv
    # and 6 attention, 32 experts, 4 a token, the first two blocks dense): recalled, not copied (no hub access here).
    # The 1.2B, 700M and 350M counts equal their cards' to the parameter through transformers' own build; which blocks
    # of LFM2-8B-A1B are attention is the value to check first against the file (its count depends only on the
    # first two blocks being conv). block_ff_dim is intermediate_size's older name, which Lfm2Config prefers.
    "LFM2-1.2B": {
        "model_type": "lfm2", "hidden_size": 2048, "block_dim": 2048, "intermediate_size": 12288,
        "block_ff_dim": 12288, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 65536, "layer_types": LFM2_LAYER_TYPES, "conv_L_cache": 3, "conv_bias": False,
        "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256,
        "tie_embedding": True, "max_position_embeddings": 128000, "rope_theta": 1000000.0, "norm_eps": 1e-05,
        "torch_dtype": "bfloat16",
    },
    "LFM2-700M": {
        "model_type": "lfm2", "hidden_size": 1536, "block_dim": 1536, "intermediate_size": 10240,
        "block_ff_dim": 10240, "num_hidden_layers": 16, "num_attention_heads": 24, "num_key_value_heads": 8,
        "vocab_size": 65536, "layer_types": LFM2_LAYER_TYPES, "conv_L_cache": 3, "conv_bias": False,
        "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256,
        "tie_embedding": True, "max_position_embeddings": 128000, "rope_theta": 1000000.0, "norm_eps": 1e-05,
        "torch_dtype": "bfloat16",
    },
    "LFM2-350M": {
        "model_type": "lfm2", "hidden_size": 1024, "block_dim": 1024, "intermediate_size": 6656,
        "block_ff_dim": 6656, "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 8,
        "vocab_size": 65536, "layer_types": LFM2_LAYER_TYPES, "conv_L_cache": 3, "conv_bias": False,
        "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256,
        "tie_embedding": True, "max_position_embeddings": 128000, "rope_theta": 1000000.0, "norm_eps": 1e-05,
        "torch_dtype": "bfloat16",
    },
    "LFM2-8B-A1B": {
        "model_type": "lfm2_moe", "hidden_size": 2048, "intermediate_size": 7168, "moe_intermediate_size": 1792,
        "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 65536,
        "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv",
                        "conv", "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv", "conv",
                        "full_attention", "conv", "conv", "full_attention", "conv", "conv"],
        "conv_L_cache": 3, "conv_bias": False, "num_dense_layers": 2, "num_experts": 32, "num_experts_per_tok": 4,
        "norm_topk_prob": True, "use_expert_bias": True, "routed_scaling_factor": 1.0, "tie_embedding": True,
        "max_position_embeddings": 128000, "rope_theta": 1000000.0, "norm_eps": 1e-05, "torch_dtype": "bfloat16",
    },
    # ---- olmo3 ----
    "Olmo-3-1025-7B": {  # allenai/Olmo-3-1025-7B (7.30B); three sliding blocks (4,096 tokens) to one full
        "model_type": "olmo3", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100278, "tie_word_embeddings": False,
        "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu", "max_position_embeddings": 65536,
        "sliding_window": 4096, "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 8,
        "rope_theta": 500000,
        "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16",
    },
    "Olmo-3-7B-Instruct": {  # allenai/Olmo-3-7B-Instruct (7.30B): Olmo-3-1025-7B's shape after post-training
        "model_type": "olmo3", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100278, "tie_word_embeddings": False,
        "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu", "max_position_embeddings": 65536,
        "sliding_window": 4096, "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 8,
        "rope_theta": 500000, "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16",
    },
    # ---- seed_oss ----
    "Seed-OSS-36B-Base": {  # ByteDance-Seed/Seed-OSS-36B-Base (36B); SeedOssConfig's defaults are this model's
        "model_type": "seed_oss", "hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 64,
        "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 155136,
        "tie_word_embeddings": False, "attention_bias": True, "attention_out_bias": False, "mlp_bias": False,
        "attention_dropout": 0.1, "residual_dropout": 0.1, "hidden_act": "silu", "max_position_embeddings": 524288,
        "rope_theta": 10000000.0, "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16",
    },
    "Seed-OSS-36B-Instruct": {  # ByteDance-Seed/Seed-OSS-36B-Instruct (36B): the base model's shape
        "model_type": "seed_oss", "hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 64,
        "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 155136,
        "tie_word_embeddings": False, "attention_bias": True, "attention_out_bias": False, "mlp_bias": False,
        "attention_dropout": 0.1, "residual_dropout": 0.1, "hidden_act": "silu", "max_position_embeddings": 524288,
        "rope_theta": 10000000.0, "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16",
    },
    # ---- gpt_neox ----
    "pythia-160m": {  # EleutherAI/pythia-160m (162,322,944 with the untied head)
        "model_type": "gpt_neox", "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12, "vocab_size": 50304, "rotary_pct": 0.25, "rotary_emb_base": 10000,
        "use_parallel_residual": True, "hidden_act": "gelu", "max_position_embeddings": 2048,
        "tie_word_embeddings": False, "torch_dtype": "float16",
    },
    "pythia-1b": {  # EleutherAI/pythia-1b (1,011,781,632)
        "model_type": "gpt_neox", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 8, "vocab_size": 50304, "rotary_pct": 0.25, "rotary_emb_base": 10000,
        "use_parallel_residual": True, "hidden_act": "gelu", "max_position_embeddings": 2048,
        "tie_word_embeddings": False, "torch_dtype": "float16",
    },
    # ---- gpt2 ----
    "gpt2": {  # openai-community/gpt2 (124,439,808)
        "model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024, "n_ctx": 1024,
        "vocab_size": 50257, "activation_function": "gelu_new", "attn_pdrop": 0.1, "resid_pdrop": 0.1,
        "embd_pdrop": 0.1, "layer_norm_epsilon": 1e-05,
    },
    "gpt2-medium": {  # openai-community/gpt2-medium (354,823,168)
        "model_type": "gpt2", "n_layer": 24, "n_embd": 1024, "n_head": 16, "n_positions": 1024, "n_ctx": 1024,
        "vocab_size": 50257, "activation_function": "gelu_new", "attn_pdrop": 0.1, "resid_pdrop": 0.1,
        "embd_pdrop": 0.1,
    },
    # ---- bert ----
    "bert-base-uncased": {  # google-bert/bert-base-uncased (BertModel: 109,482,240)
        "model_type": "bert", "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12, "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "position_embedding_type": "absolute",
    },
    "bert-large-uncased": {  # google-bert/bert-large-uncased (BertModel: 335,141,888)
        "model_type": "bert", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
        "num_attention_heads": 16, "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    },
    # ---- roberta ----
    "roberta-base": {  # FacebookAI/roberta-base (RobertaModel: 124,645,632)
        "model_type": "roberta", "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12, "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "pad_token_id": 1,
    },
    "roberta-large": {  # FacebookAI/roberta-large (RobertaModel: 355,359,744)
        "model_type": "roberta", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
        "num_attention_heads": 16, "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "pad_token_id": 1,
    },
    # ---- cohere2: Cohere2Config's head is tied by default (the configs' use_embedding_sharing, which transformers
    # does not read); every 4th block full, the others sliding over 4,096 tokens ----
    "c4ai-command-r7b-12-2024": {  # CohereLabs/c4ai-command-r7b-12-2024 (8.03B on the Hub)
        "model_type": "cohere2", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 256000,
        "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu", "logit_scale": 0.25,
        "max_position_embeddings": 132096, "sliding_window": 4096, "sliding_window_pattern": 4,
        "rope_theta": 50000, "layer_norm_eps": 1e-05, "torch_dtype": "bfloat16",
    },
    "c4ai-command-a-03-2025": {  # CohereLabs/c4ai-command-a-03-2025 (111B); logit_scale and rope_theta left out
        "model_type": "cohere2", "hidden_size": 12288, "intermediate_size": 36864, "num_hidden_layers": 64,
        "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 256000,
        "attention_bias": False, "hidden_act": "silu", "max_position_embeddings": 131072, "sliding_window": 4096,
        "sliding_window_pattern": 4, "torch_dtype": "bfloat16",
    },
    # ---- apertus: ApertusConfig reads neither qk_norm, post_norm nor mlp_bias (its q/k norms always exist) ----
    "Apertus-8B-2509": {  # swiss-ai/Apertus-8B-2509 (8B)
        "model_type": "apertus", "hidden_size": 4096, "intermediate_size": 21504, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 131072, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "qk_norm": True, "post_norm": False, "hidden_act": "xielu",
        "max_position_embeddings": 65536, "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16",
        "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "rope_theta": 12000000,
    },
    "Apertus-70B-2509": {  # swiss-ai/Apertus-70B-2509 (70B); max_position_embeddings and rope left out
        "model_type": "apertus", "hidden_size": 8192, "intermediate_size": 43008, "num_hidden_layers": 80,
        "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 131072, "tie_word_embeddings": False,
        "attention_bias": False, "hidden_act": "xielu", "torch_dtype": "bfloat16",
    },
    # ---- ernie4_5: Ernie4_5Config's defaults are ERNIE-4.5-0.3B ----
    "ERNIE-4.5-0.3B-PT": {  # baidu/ERNIE-4.5-0.3B-PT (0.36B); one use_bias flag for every projection, tied head
        "model_type": "ernie4_5", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 18,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 103424,
        "tie_word_embeddings": True, "use_bias": False, "hidden_act": "silu", "max_position_embeddings": 131072,
        "rope_theta": 500000.0, "torch_dtype": "bfloat16",
    },
    "ERNIE-4.5-0.3B-Base-PT": {  # baidu/ERNIE-4.5-0.3B-Base-PT (0.36B): the same shape before post-training
        "model_type": "ernie4_5", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 18,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 103424,
        "tie_word_embeddings": True, "use_bias": False, "hidden_act": "silu", "max_position_embeddings": 131072,
        "rope_theta": 500000.0, "torch_dtype": "bfloat16",
    },
    # ---- exaone4 ----
    "EXAONE-4.0-32B": {  # LGAI-EXAONE/EXAONE-4.0-32B (card: 30.95B without embeddings); 3 sliding (4,096) : 1 full.
        # layer_types as the Hub's config.json lists them (LLLG repeated); its sliding_window_pattern is transcribed
        # as "LLLG" (unsure: a copy elsewhere has 4), which neither transformers nor memmath reads with layer_types
        "model_type": "exaone4", "hidden_size": 5120, "intermediate_size": 27392, "num_hidden_layers": 64,
        "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 102400,
        "tie_word_embeddings": False, "hidden_act": "silu", "max_position_embeddings": 131072,
        "attention_dropout": 0.0, "sliding_window": 4096, "sliding_window_pattern": "LLLG",
        "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 16,
        "torch_dtype": "bfloat16",
    },
    "EXAONE-4.0-1.2B": {  # LGAI-EXAONE/EXAONE-4.0-1.2B (card: 1.07B without embeddings); global attention only
        # (the card: no hybrid attention at 1.2B), tied head; sliding_window null and every layer full as transcribed
        "model_type": "exaone4", "hidden_size": 2048, "intermediate_size": 4096, "num_hidden_layers": 30,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 102400,
        "tie_word_embeddings": True, "hidden_act": "silu", "max_position_embeddings": 65536,
        "attention_dropout": 0.0, "sliding_window": None, "layer_types": ["full_attention"] * 30,
        "torch_dtype": "bfloat16",
    },
    # ---- minimax_m2: one layout, a sigmoid router over 256 routed experts and no shared expert. Typed in from the
    # Hub's config.json as remembered (no hub access here), transformers' MiniMaxM2Config defaults being the same
    # widths; fields that change no tensor or that MiniMaxM2ForCausalLM does not read (attn_type_list, use_mtp,
    # num_mtp_modules, mtp_transformer_layers, qk_norm_type, scoring_func, use_routing_bias, token ids) left out ----
    "MiniMax-M2": {  # MiniMaxAI/MiniMax-M2 (card: 230B total, 10B active); rotary_dim 64 of head_dim 128
        "model_type": "minimax_m2", "architectures": ["MiniMaxM2ForCausalLM"], "hidden_size": 3072,
        "intermediate_size": 1536, "num_hidden_layers": 62, "num_attention_heads": 48, "num_key_value_heads": 8,
        "head_dim": 128, "rotary_dim": 64, "num_local_experts": 256, "num_experts_per_tok": 8, "vocab_size": 200064,
        "tie_word_embeddings": False, "hidden_act": "silu", "max_position_embeddings": 196608, "rope_theta": 5000000,
        "rms_norm_eps": 1e-06, "router_jitter_noise": 0.0, "attention_dropout": 0.0, "torch_dtype": "bfloat16",
    },
}
# MiniMaxAI/MiniMax-M2.1 (card: 230B total, 10B active): the same architecture and widths as MiniMax-M2, as recalled
PUBLISHED_CONFIGS["MiniMax-M2.1"] = dict(PUBLISHED_CONFIGS["MiniMax-M2"])

# What the model cards and papers publish (rounded as published), to compare with the exact counts.
PUBLISHED_TOTALS = {
    "Llama-3.2-1B": 1.23e9, "Meta-Llama-3-8B": 8.03e9, "Mistral-7B-v0.1": 7.24e9, "Mistral-Nemo-Base-2407": 12.2e9,
    "Mixtral-8x7B-v0.1": 46.7e9, "Mixtral-8x22B-v0.1": 141e9, "Qwen2.5-0.5B": 0.49e9, "Qwen2.5-7B": 7.61e9,
    "Qwen1.5-MoE-A2.7B": 14.3e9, "Qwen2-57B-A14B": 57e9, "Qwen3-0.6B": 0.6e9, "Qwen3-8B": 8.2e9,
    "Qwen3-30B-A3B": 30.5e9, "Qwen3-235B-A22B": 235e9, "gemma-2b": 2.51e9, "gemma-7b": 8.54e9,
    "gemma-2-2b": 2.61e9, "gemma-2-9b": 9.24e9, "gemma-3-1b-pt": 1.0e9, "gemma-3-270m": 0.27e9,
    "Phi-3-mini-4k-instruct": 3.8e9, "phi-4": 14.7e9, "OLMo-2-1124-7B": 7.3e9, "OLMo-2-0425-1B": 1.48e9,
    "pythia-160m": 162e6, "pythia-1b": 1.01e9, "gpt2": 124e6, "gpt2-medium": 355e6, "bert-base-uncased": 110e6,
    "bert-large-uncased": 336e6, "roberta-base": 125e6, "roberta-large": 355e6,
    "gpt-oss-20b": 20.91e9, "gpt-oss-120b": 116.83e9,
    "SmolLM3-3B": 3.08e9, "SmolLM3-3B-Base": 3.08e9, "granite-3.3-8b-instruct": 8.17e9,
    "granite-3.3-2b-instruct": 2.53e9,
    "Llama-4-Scout-17B-16E": 109e9, "Llama-4-Scout-17B-16E-Instruct": 109e9,  # with the vision tower
    "Llama-4-Maverick-17B-128E": 400e9,  # the card's 400B total, with the vision tower
    "Qwen3-Next-80B-A3B-Instruct": 80e9, "Qwen3-Next-80B-A3B-Thinking": 80e9,  # the cards' 80B total
    "Olmo-3-1025-7B": 7.3e9, "Olmo-3-7B-Instruct": 7.3e9,  # the Hub pages' 7.3B
    "Seed-OSS-36B-Base": 36e9, "Seed-OSS-36B-Instruct": 36e9,  # the models' names' 36B
    "c4ai-command-r7b-12-2024": 8.03e9, "c4ai-command-a-03-2025": 111e9, "Apertus-8B-2509": 8e9,
    "Apertus-70B-2509": 70e9,
    "ERNIE-4.5-0.3B-PT": 0.36e9, "ERNIE-4.5-0.3B-Base-PT": 0.36e9,
    "LFM2-1.2B": 1.17e9, "LFM2-700M": 0.742e9, "LFM2-350M": 0.354e9, "LFM2-8B-A1B": 8.3e9,  # the cards
    # the EXAONE 4.0 cards count parameters without the embeddings (102,400 x h each, the 32B's head untied)
    "EXAONE-4.0-32B": 30.95e9 + 2 * 102400 * 5120, "EXAONE-4.0-1.2B": 1.07e9 + 102400 * 2048,
    "MiniMax-M2": 230e9, "MiniMax-M2.1": 230e9,  # the cards' 230B total (228.7B built)
}
# Active parameters per token that the model cards publish for the mixtures of experts.
PUBLISHED_ACTIVE = {"Mixtral-8x7B-v0.1": 12.9e9, "Mixtral-8x22B-v0.1": 39e9, "Qwen1.5-MoE-A2.7B": 2.7e9,
                    "Qwen2-57B-A14B": 14e9, "Qwen3-30B-A3B": 3.3e9, "Qwen3-235B-A22B": 22e9,
                    # the gpt-oss model card (table 1) counts active parameters without the token embedding
                    # (201,088 x 2,880); memmath's active_params, like the other cards, counts it
                    "gpt-oss-20b": 3.61e9 + 201088 * 2880, "gpt-oss-120b": 5.13e9 + 201088 * 2880,
                    "Llama-4-Scout-17B-16E": 17e9, "Llama-4-Scout-17B-16E-Instruct": 17e9,
                    "Llama-4-Maverick-17B-128E": 17e9,
                    # the Qwen3-Next cards' "3B activated" is a round figure; by hand: 79,674,391,296 (transformers'
                    # count) less 48 blocks x 502 unrouted experts x 3 x 2,048 x 512 = 3,874,929,408
                    "Qwen3-Next-80B-A3B-Instruct": 79_674_391_296 - 48 * 502 * 3 * 2048 * 512,
                    "Qwen3-Next-80B-A3B-Thinking": 79_674_391_296 - 48 * 502 * 3 * 2048 * 512,
                    # the LFM2-8B-A1B card's "1.5B active" is a round figure; by hand: 8,339,929,856 (transformers'
                    # count) less 22 MoE blocks x 28 unrouted experts x 3 x 2,048 x 1,792 = 1,557,740,288
                    "LFM2-8B-A1B": 8_339_929_856 - 22 * 28 * 3 * 2048 * 1792,
                    # the MiniMax-M2 cards' "10B active" is a round figure (9.8B without the embedding and the head);
                    # by hand: 228,689,748,992 (transformers' count) less 62 blocks x 248 unrouted experts x
                    # 3 x 3,072 x 1,536
                    "MiniMax-M2": 228_689_748_992 - 62 * 248 * 3 * 3072 * 1536,
                    "MiniMax-M2.1": 228_689_748_992 - 62 * 248 * 3 * 3072 * 1536}

# ---- blocks of two layouts: dense MLPs in the first first_k_dense_replace blocks, mixtures of experts after ----------
# memmath's reader takes first_k_dense_replace 0 or >= num_hidden_layers only (architectures/glm4_moe.py), so these
# join PUBLISHED_CONFIGS once ModelShape lists a dense and a MoE block layout; tests/test_families_glm.py counts them
# now as one shape of each layout. Typed in from the repositories' config.json as remembered (no hub access here):
# every value agrees with the model cards' totals through transformers' own count (352.8B and 106.9B built, the
# cards' 355B and 106B, whose checkpoints add one multi-token-prediction block each), and GLM-4.5-Air's widths with
# Glm4MoeConfig's defaults (its docstring's "GLM-4-MOE-100B-A10B"). use_qk_norm (true for GLM-4.5, false for the
# Air) and routed_scaling_factor (2.5 and 1.0) are the values to check first against the files.
PUBLISHED_MIXED_LAYOUT_CONFIGS = {
    "GLM-4.5": {  # zai-org/GLM-4.5 (355B total, 32B active: the model card)
        "model_type": "glm4_moe", "hidden_size": 5120, "intermediate_size": 12288, "num_hidden_layers": 92,
        "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151552,
        "attention_bias": True, "use_qk_norm": True, "partial_rotary_factor": 0.5, "moe_intermediate_size": 1536,
        "n_routed_experts": 160, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
        "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
        "num_nextn_predict_layers": 1, "tie_word_embeddings": False, "hidden_act": "silu", "attention_dropout": 0.0,
        "max_position_embeddings": 131072, "rope_theta": 1000000, "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16",
    },
    "GLM-4.5-Air": {  # zai-org/GLM-4.5-Air (106B total, 12B active: the model card)
        "model_type": "glm4_moe", "hidden_size": 4096, "intermediate_size": 10944, "num_hidden_layers": 46,
        "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151552,
        "attention_bias": True, "use_qk_norm": False, "partial_rotary_factor": 0.5, "moe_intermediate_size": 1408,
        "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
        "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 1.0,
        "num_nextn_predict_layers": 1, "tie_word_embeddings": False, "hidden_act": "silu", "attention_dropout": 0.0,
        "max_position_embeddings": 131072, "rope_theta": 1000000, "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16",
    },
}
PUBLISHED_MIXED_LAYOUT_TOTALS = {"GLM-4.5": 355e9, "GLM-4.5-Air": 106e9}  # the model cards, with the MTP block
PUBLISHED_MIXED_LAYOUT_ACTIVE = {"GLM-4.5": 32e9, "GLM-4.5-Air": 12e9}  # the model cards (without the embedding)
# Read whole (ModelShape.block_layouts: the dense first blocks beside the MoE blocks) like every other config; the
# cards' active counts leave out the token embedding and the head (151,552 x h each), which active_params counts
PUBLISHED_CONFIGS.update(PUBLISHED_MIXED_LAYOUT_CONFIGS)
PUBLISHED_TOTALS.update(PUBLISHED_MIXED_LAYOUT_TOTALS)
PUBLISHED_ACTIVE.update({name: active + 2 * 151552 * PUBLISHED_MIXED_LAYOUT_CONFIGS[name]["hidden_size"]
                         for name, active in PUBLISHED_MIXED_LAYOUT_ACTIVE.items()})

# ---- dense blocks first, a mixture of experts after (first_k_dense_replace) -------------------------------------
# Kept apart from PUBLISHED_CONFIGS (their model cards' activated counts round more loosely than its 2% check);
# memmath reads them whole, the dense first blocks a second block layout (memmath/architectures/_deepseek.py). Typed in from the Hub's config.json; fields that change no tensor (token ids, rope_scaling,
# aux_loss_alpha, seq_aux, scoring_func, moe_layer_freq 1, which transformers 5.24 does not read) are left out.
# Recalled from the published files rather than copied from them (no copy was at hand): tests check each total
# against transformers' build on the meta device and against its model card.
LAYERED_CONFIGS = {
    "DeepSeek-V2-Lite": {  # deepseek-ai/DeepSeek-V2-Lite (card: 15.7B total, 2.4B activated); q_proj, no q_lora_rank
        "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 2048,
        "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
        "num_attention_heads": 16, "num_key_value_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2,
        "num_experts_per_tok": 6, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "topk_method": "greedy",
        "norm_topk_prob": False, "routed_scaling_factor": 1.0, "kv_lora_rank": 512, "q_lora_rank": None,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400,
        "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
        "max_position_embeddings": 163840, "attention_dropout": 0.0, "torch_dtype": "bfloat16",
    },
    "DeepSeek-V2": {  # deepseek-ai/DeepSeek-V2 (card: 236B total, 21B activated); group-limited routing
        "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 5120,
        "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 60,
        "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 160, "n_shared_experts": 2,
        "num_experts_per_tok": 6, "first_k_dense_replace": 1, "n_group": 8, "topk_group": 3,
        "topk_method": "group_limited_greedy", "norm_topk_prob": False, "routed_scaling_factor": 16.0,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 102400, "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
        "max_position_embeddings": 163840, "attention_dropout": 0.0, "torch_dtype": "bfloat16",
    },
    "DeepSeek-V3": {  # deepseek-ai/DeepSeek-V3 (card: 671B total, 37B activated, plus the 14B multi-token
        # prediction module of num_nextn_predict_layers, which DeepseekV3ForCausalLM does not build); DeepSeek-R1's
        # config.json has the same fields
        "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "n_group": 8, "topk_group": 4,
        "norm_topk_prob": True, "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
        "num_nextn_predict_layers": 1, "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
        "max_position_embeddings": 163840, "attention_dropout": 0.0, "torch_dtype": "bfloat16",
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128]},
    },
    # moonshotai/Kimi-K2-Instruct (card: 1T total, 32B activated): tests/fixtures/configs/Kimi-K2-Instruct.json, the
    # file verbatim (model_type kimi_k2, read as deepseek_v3)
}
# Qwen/Qwen3-Next-80B-A3B-Thinking: the Instruct model's shape
PUBLISHED_CONFIGS["Qwen3-Next-80B-A3B-Thinking"] = dict(PUBLISHED_CONFIGS["Qwen3-Next-80B-A3B-Instruct"])
# deepseek-ai/DeepSeek-R1 (card: 671B total, 37B activated): its config.json has DeepSeek-V3's fields
LAYERED_CONFIGS["DeepSeek-R1"] = dict(LAYERED_CONFIGS["DeepSeek-V3"])
LAYERED_TOTALS = {"DeepSeek-V2-Lite": 15.7e9, "DeepSeek-V2": 236e9, "DeepSeek-V3": 671e9, "DeepSeek-R1": 671e9,
                  "Kimi-K2-Instruct": 1.0e12}
# the cards' activated parameters leave the token embedding out (tests/test_families_deepseek.py)
LAYERED_ACTIVE = {"DeepSeek-V2-Lite": 2.4e9, "DeepSeek-V2": 21e9, "DeepSeek-V3": 37e9, "DeepSeek-R1": 37e9,
                  "Kimi-K2-Instruct": 32e9}

# ---- ERNIE 4.5 MoE: experts in the blocks from moe_layer_start_index, dense MLPs before --------------------------
# Kept apart from PUBLISHED_CONFIGS: the model cards round their totals more loosely than its 2% check (the 21B-A3B's
# "21B" is 21.83B as transformers builds it). Typed in from the repositories' config.json as remembered (no hub
# access here); fields that change no tensor (token ids, rope_theta, moe_capacity, moe_gate, moe_use_aux_free, the
# multi-token-prediction fields, which transformers 5.24 does not read) are left out. The 21B-A3B's widths are
# Ernie4_5_MoeConfig's defaults (its docstring's checkpoint); the 300B-A47B's agree with its card's totals through
# transformers' own count (299.48B and 47.08B without the token embedding; the card: 300B, 47B). Its
# moe_num_shared_experts 0 and moe_layer_start_index 3 are the values to check first against the file.
ERNIE_MOE_CONFIGS = {
    "ERNIE-4.5-21B-A3B-PT": {  # baidu/ERNIE-4.5-21B-A3B-PT (card: 21B total, 3B activated); block 0 dense
        "model_type": "ernie4_5_moe", "architectures": ["Ernie4_5_MoeForCausalLM"], "hidden_size": 2560,
        "intermediate_size": 12288, "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4,
        "vocab_size": 103424, "use_bias": False, "tie_word_embeddings": True, "hidden_act": "silu",
        "moe_num_experts": 64, "moe_num_shared_experts": 2, "moe_k": 6, "moe_intermediate_size": 1536,
        "moe_layer_start_index": 1, "moe_layer_end_index": 27, "moe_layer_interval": 1,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "use_cache": False, "torch_dtype": "bfloat16",
    },
    "ERNIE-4.5-300B-A47B-PT": {  # baidu/ERNIE-4.5-300B-A47B-PT (card: 300B total, 47B activated); blocks 0-2 dense,
        # no shared experts
        "model_type": "ernie4_5_moe", "architectures": ["Ernie4_5_MoeForCausalLM"], "hidden_size": 8192,
        "intermediate_size": 28672, "num_hidden_layers": 54, "num_attention_heads": 64, "num_key_value_heads": 8,
        "vocab_size": 103424, "use_bias": False, "tie_word_embeddings": False, "hidden_act": "silu",
        "moe_num_experts": 64, "moe_num_shared_experts": 0, "moe_k": 8, "moe_intermediate_size": 3584,
        "moe_layer_start_index": 3, "moe_layer_end_index": 53, "moe_layer_interval": 1,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "use_cache": False, "torch_dtype": "bfloat16",
    },
}
ERNIE_MOE_TOTALS = {"ERNIE-4.5-21B-A3B-PT": 21e9, "ERNIE-4.5-300B-A47B-PT": 300e9}  # the model cards
# the model cards' activated parameters; tests/test_families_ernie.py compares them without the token embedding
ERNIE_MOE_ACTIVE = {"ERNIE-4.5-21B-A3B-PT": 3e9, "ERNIE-4.5-300B-A47B-PT": 47e9}
# ---- Mamba-2 hybrids: recalled from the repositories' config.json (no hub access here). Kept apart from
# PUBLISHED_CONFIGS, whose 2% check the cards' active counts do not meet: granite-4.0-h-tiny's card says 7B total and
# 1B active (4 attention and 36 Mamba-2 blocks), which rounds 6.94B and 1.31B (without the embedding). The attention
# blocks' places are the values to check first against the file; they change no count. tests/test_families_mamba2.py
# builds each with transformers on the meta device.
PUBLISHED_HYBRID_CONFIGS = {
    "granite-4.0-h-tiny": {
        "model_type": "granitemoehybrid", "hidden_size": 1536, "intermediate_size": 512, "num_hidden_layers": 40,
        "num_attention_heads": 12, "num_key_value_heads": 4, "vocab_size": 100352, "tie_word_embeddings": True,
        "num_local_experts": 64, "num_experts_per_tok": 6, "shared_intermediate_size": 1024,
        "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4,
        "mamba_expand": 2, "mamba_conv_bias": True, "mamba_proj_bias": False, "mamba_chunk_size": 256,
        "layer_types": ["attention" if i in (5, 15, 25, 35) else "mamba" for i in range(40)],
        "position_embedding_type": "nope", "attention_bias": False, "hidden_act": "silu",
        "max_position_embeddings": 131072, "embedding_multiplier": 12, "residual_multiplier": 0.22,
        "attention_multiplier": 0.0078125, "logits_scaling": 6, "output_router_logits": False,
        "torch_dtype": "bfloat16",
    },
    # nvidia/Nemotron-H-8B-Base-8K (card: an 8B hybrid of 24 Mamba-2, 4 attention and 24 MLP blocks); its widths are
    # NemotronHConfig's defaults
    "Nemotron-H-8B-Base-8K": {
        "model_type": "nemotron_h", "hidden_size": 4096, "intermediate_size": 21504, "num_hidden_layers": 52,
        "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
        "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
        "expand": 2, "use_conv_bias": True, "use_bias": False, "mlp_bias": False, "mlp_hidden_act": "relu2",
        "tie_word_embeddings": False, "attention_bias": False, "max_position_embeddings": 8192,
        "torch_dtype": "bfloat16",
    },
}
PUBLISHED_HYBRID_TOTALS = {"granite-4.0-h-tiny": 7e9, "Nemotron-H-8B-Base-8K": 8e9}  # the cards' 7B and 8B totals

# ---- no published config at hand (no hub access here): the config class's own defaults -------------------------
# Qwen3_5TextConfig (configuration_qwen3_5.py) as a config.json naming only its type and sizes; the checks that need a
# config of every supported model type read it, and tests/test_families_hybrid.py builds it with transformers
CONFIG_CLASS_DEFAULTS = {
    "Qwen3_5TextConfig": {"model_type": "qwen3_5_text", "hidden_size": 4096, "intermediate_size": 12288,
                          "num_hidden_layers": 32, "num_attention_heads": 16, "vocab_size": 248320},
    "Qwen3_5MoeTextConfig": {"model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40,
                             "num_attention_heads": 16, "vocab_size": 248320},
    # Lfm2Config (configuration_lfm2.py): without layer_types or full_attn_idxs every block is attention
    "Lfm2Config": {"model_type": "lfm2", "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "vocab_size": 65536},
    # GraniteMoeHybridConfig (configuration_granitemoehybrid.py): every block a Mamba-2 block (no layer_types), 8
    # experts of 11,008 a block, top 2, beside a shared MLP of 1,024; its head untied
    "GraniteMoeHybridConfig": {"model_type": "granitemoehybrid", "hidden_size": 4096, "num_hidden_layers": 32,
                               "num_attention_heads": 32, "vocab_size": 32000},
    # NemotronHConfig (configuration_nemotron_h.py): its four default blocks, a Mamba-2 block, a MoE block (8 experts of
    # 7,688, top 2, a shared expert of 7,688), an attention block and an MLP block of 21,504
    "NemotronHConfig": {"model_type": "nemotron_h", "hidden_size": 4096, "num_hidden_layers": 4,
                        "num_attention_heads": 32, "vocab_size": 131072},
    # FalconH1Config (configuration_falcon_h1.py): 32 blocks of Mamba-2 (mamba_d_ssm 1,024: 128 heads of 8, a state
    # of 256) beside attention (32 heads, 8 key/value heads of 128), a SwiGLU MLP of 14,336
    "FalconH1Config": {"model_type": "falcon_h1", "hidden_size": 4096, "num_hidden_layers": 32,
                       "num_attention_heads": 32, "vocab_size": 128000},
    # Glm4MoeLiteConfig (configuration_glm4_moe_lite.py): its defaults, written out; GLM-4.7-Flash's shape as the
    # class names it (29,943,390,976 built; the zai-org/GLM-4.7-Flash card's "30B-A3B"), the published config.json not
    # being at hand to copy. mlp_layer_types left to the class: the first block dense, the other 46 sparse
    "Glm4MoeLiteConfig": {"model_type": "glm4_moe_lite", "architectures": ["Glm4MoeLiteForCausalLM"],
                          "hidden_size": 2048, "intermediate_size": 10240, "moe_intermediate_size": 1536,
                          "num_hidden_layers": 47, "num_attention_heads": 20, "num_key_value_heads": 20,
                          "n_routed_experts": 64, "n_shared_experts": 1, "num_experts_per_tok": 4, "n_group": 1,
                          "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 1.8,
                          "q_lora_rank": 768, "kv_lora_rank": 512, "qk_nope_head_dim": 192, "qk_rope_head_dim": 64,
                          "v_head_dim": 256, "vocab_size": 154880, "tie_word_embeddings": False,
                          "hidden_act": "silu", "max_position_embeddings": 202752, "torch_dtype": "bfloat16"},
    # Gemma4TextConfig (configuration_gemma4.py): 30 blocks, every sixth full at global_head_dim 512, per-layer input
    # embeddings 262,144 x 30 x 256 (5,077,177,856 parameters as transformers 5.24 builds it)
    "Gemma4TextConfig": {"model_type": "gemma4_text", "hidden_size": 2304, "intermediate_size": 9216,
                         "num_hidden_layers": 30, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                         "vocab_size": 262144},
    # Gemma3nTextConfig (configuration_gemma3n.py), gemma-3n-E4B's text model by its docstring: 35 blocks, every fifth
    # full, the last 15 sharing keys and values, AltUp over 4 copies, LAuReL rank 64 (6,835,235,568 parameters as
    # transformers 5.24 builds it)
    "Gemma3nTextConfig": {"model_type": "gemma3n_text", "hidden_size": 2048, "intermediate_size": 16384,
                          "num_hidden_layers": 35, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
                          "vocab_size": 262400},
}

# ---- vision-language models (memmath/multimodal.py) ----------------------------------------------------------
# Each config.json as the Hub serves it (token ids kept as published; what changes no tensor is left out where
# noted). Their sub-configs omit what equals transformers' defaults (a sub-config is saved as its difference from
# them): gemma-3-4b-it's text_config has no vocab_size, heads or head_dim; llava-1.5's none of the Llama widths.
# tests/test_multimodal.py builds each ...ForConditionalGeneration on the meta device and compares the counts.
PUBLISHED_MULTIMODAL_CONFIGS = {
    "gemma-3-4b-it": {  # google/gemma-3-4b-it (4.3B)
        "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
        "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
        "model_type": "gemma3",
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                        "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                        "sliding_window": 1024},
        "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
        "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                          "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                          "patch_size": 14, "vision_use_head": False},
    },
    "gemma-3-27b-it": {  # google/gemma-3-27b-it (27.4B)
        "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
        "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
        "model_type": "gemma3",
        "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
                        "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
                        "query_pre_attn_scalar": 168, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                        "sliding_window": 1024},
        "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
        "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                          "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                          "patch_size": 14, "vision_use_head": False},
    },
    "llava-1.5-7b-hf": {  # llava-hf/llava-1.5-7b-hf (7.06B): CLIP ViT-L/14-336, Vicuna-7B (LlamaConfig defaults)
        "architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100, "image_token_index": 32000,
        "model_type": "llava", "pad_token_id": 32001, "projector_hidden_act": "gelu",
        "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
                        "max_position_embeddings": 4096, "model_type": "llama", "rms_norm_eps": 1e-05,
                        "torch_dtype": "float16", "vocab_size": 32064},
        "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.36.0.dev0",
        "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                          "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
                          "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
        "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "vocab_size": 32064,
    },
    "Mistral-Small-3.1-24B-Instruct-2503": {  # mistralai/Mistral-Small-3.1-24B-Instruct-2503 (24B, lm_head untied)
        # No tie_word_embeddings: Mistral3Config's default (true) ties lm_head when transformers 5.24 builds the model
        # from this config (23.3B); the checkpoint stores both matrices, which load untied (24.0B, the card's).
        "architectures": ["Mistral3ForConditionalGeneration"], "image_token_index": 10, "model_type": "mistral3",
        "multimodal_projector_bias": False, "projector_hidden_act": "gelu", "spatial_merge_size": 2,
        "text_config": {"attention_dropout": 0.0, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
                        "initializer_range": 0.02, "intermediate_size": 32768, "max_position_embeddings": 131072,
                        "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 40,
                        "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0,
                        "sliding_window": None, "use_cache": True, "vocab_size": 131072},
        "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
        "vision_config": {"attention_dropout": 0.0, "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024,
                          "image_size": 1540, "initializer_range": 0.02, "intermediate_size": 4096,
                          "model_type": "pixtral", "num_attention_heads": 16, "num_channels": 3,
                          "num_hidden_layers": 24, "patch_size": 14, "rope_theta": 10000.0},
        "vision_feature_layer": -1,
    },
    "Qwen2-VL-7B-Instruct": {  # Qwen/Qwen2-VL-7B-Instruct (8.29B): the text fields at the top level
        "architectures": ["Qwen2VLForConditionalGeneration"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151645, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
        "vision_token_id": 151654, "image_token_id": 151655, "video_token_id": 151656, "hidden_act": "silu",
        "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 32768,
        "max_window_layers": 28, "model_type": "qwen2_vl", "num_attention_heads": 28, "num_hidden_layers": 28,
        "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.41.2", "use_cache": True,
        "use_sliding_window": False,
        "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                          "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
                          "temporal_patch_size": 2},
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "vocab_size": 152064,
    },
    "Qwen2.5-VL-7B-Instruct": {  # Qwen/Qwen2.5-VL-7B-Instruct (8.29B)
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151645, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
        "vision_token_id": 151654, "image_token_id": 151655, "video_token_id": 151656, "hidden_act": "silu",
        "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 128000,
        "max_window_layers": 28, "model_type": "qwen2_5_vl", "num_attention_heads": 28, "num_hidden_layers": 28,
        "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.41.2", "use_cache": True,
        "use_sliding_window": False,
        "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                          "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14,
                          "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
                          "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2, "temporal_patch_size": 2},
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "vocab_size": 152064,
    },
    "Qwen2.5-VL-3B-Instruct": {  # Qwen/Qwen2.5-VL-3B-Instruct (3.75B): tied embeddings
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151645, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
        "vision_token_id": 151654, "image_token_id": 151655, "video_token_id": 151656, "hidden_act": "silu",
        "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 128000,
        "max_window_layers": 70, "model_type": "qwen2_5_vl", "num_attention_heads": 16, "num_hidden_layers": 36,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.41.2", "use_cache": True,
        "use_sliding_window": False,
        "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                          "num_heads": 16, "in_chans": 3, "out_hidden_size": 2048, "patch_size": 14,
                          "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
                          "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2, "temporal_patch_size": 2},
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "vocab_size": 151936,
    },
}
# What the model cards publish (the Hub's safetensors totals, rounded as published). Mistral-Small-3.1's 24B is the
# untied checkpoint (tie_word_embeddings false); the Gemma 3 report (Gemma Team 2025, Table 1) gives the SigLIP
# encoder as 417M for every size.
PUBLISHED_MULTIMODAL_TOTALS = {
    "gemma-3-4b-it": 4.3e9, "gemma-3-27b-it": 27.4e9, "llava-1.5-7b-hf": 7.06e9,
    "Mistral-Small-3.1-24B-Instruct-2503": 24.0e9, "Qwen2-VL-7B-Instruct": 8.29e9, "Qwen2.5-VL-7B-Instruct": 8.29e9,
    "Qwen2.5-VL-3B-Instruct": 3.75e9,
}

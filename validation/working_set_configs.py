"""The small models the inference working set was measured on, as config.json fields: torch-free, so the
tests that replay those measurements read the same configs as validation/inference_working_set.py.
"""

# The shared sizes of every measured model (h=256, 4 layers, 8 heads, V=32,000; bf16).
SIZES = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, vocab_size=32000)

# The model types read from config.json, as its fields (transformers' AutoConfig.for_model).
CONFIGS = {
    "gemma": dict(model_type="gemma", head_dim=32, num_key_value_heads=2, intermediate_size=688),
    "gemma2": dict(model_type="gemma2", head_dim=32, num_key_value_heads=2, intermediate_size=688,
                   sliding_window=4096, query_pre_attn_scalar=32),
    "gemma3": dict(model_type="gemma3_text", head_dim=32, num_key_value_heads=2, intermediate_size=688,
                   sliding_window=4096, query_pre_attn_scalar=32),
    "neox": dict(model_type="gpt_neox", intermediate_size=1024),
    "mixtral": dict(model_type="mixtral", num_key_value_heads=2, intermediate_size=344, num_local_experts=4,
                    num_experts_per_tok=2),
    # Expert widths a multiple of 8: the CPU grouped_mm needs 16-byte strides (bf16).
    "qwen2moe": dict(model_type="qwen2_moe", num_key_value_heads=2, intermediate_size=688, num_experts=4,
                     num_experts_per_tok=2, moe_intermediate_size=176, shared_expert_intermediate_size=344),
    "qwen3moe": dict(model_type="qwen3_moe", num_key_value_heads=2, head_dim=32, intermediate_size=688,
                     num_experts=8, num_experts_per_tok=4, moe_intermediate_size=96, norm_topk_prob=True),
}

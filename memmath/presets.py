"""Published model shapes, from each model's config.json (or paper for GPT-3 and LLaMA-1).

memmath/sources.py turns a preset name, a parameter count or a config into a ModelShape (resolve_model).

Counts in the comments are what PyTorch's parameters() sum to for that config; the tests check
the first ones against the model cards' published counts.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import replace
from functools import partial

from .config_reader import from_hf_config
from .models import ModelShape, bert_model, gpt2_model, llama_model


class _Recipe(partial):
    """A preset not built yet: its builder and arguments, called the first time the preset is asked for."""


class Presets(MutableMapping):
    """The presets by name, each built from its recipe the first time it is asked for: a question about a config.json
    builds none of them, one about a preset builds that one (each ModelShape checks its own counts when built). An
    entry may be set to another ModelShape, as in a dict."""

    def __init__(self, entries: dict):
        self._entries = dict(entries)  # name -> its ModelShape once built, its _Recipe until then

    def __getitem__(self, name: str) -> ModelShape:
        entry = self._entries[name]
        if isinstance(entry, _Recipe):
            entry = self._entries[name] = entry()
        return entry

    def __setitem__(self, name: str, shape) -> None:
        self._entries[name] = shape

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self):
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Presets({', '.join(self._entries)})"


# The config.json fields of each preset read from one (its published config's fields that shape the model): what
# PyTorch builds the preset from for a traced answer (memmath/traced.py).
PRESET_CONFIGS: dict[str, dict] = {}


def _from_config(name, **fields) -> _Recipe:
    """A preset read from the fields of its published config.json, as from_hf_config reads the file."""
    PRESET_CONFIGS[name] = fields
    return _Recipe(_read_config, name, fields)


def _read_config(name, fields) -> ModelShape:
    return replace(from_hf_config(fields), name=name)


PRESETS: MutableMapping[str, ModelShape] = Presets({
    # GPT-2 family (openai-community/gpt2*): tied head, 1024 positions, vocabulary 50,257.
    "gpt2": _Recipe(gpt2_model, n_layers=12, hidden_size=768, n_heads=12, name="gpt2"),  # 124,439,808 params
    "gpt2-medium": _Recipe(gpt2_model, n_layers=24, hidden_size=1024, n_heads=16, name="gpt2-medium"),  # 354,823,168
    "gpt2-large": _Recipe(gpt2_model, n_layers=36, hidden_size=1280, n_heads=20, name="gpt2-large"),  # 774,030,080
    "gpt2-xl": _Recipe(gpt2_model, n_layers=48, hidden_size=1600, n_heads=25, name="gpt2-xl"),  # 1,557,611,200
    # GPT-3 175B (Brown et al. 2020, table 2.1): GPT-2's architecture at 96 layers x 12,288, 2,048 positions.
    "gpt3-175b": _Recipe(gpt2_model, n_layers=96, hidden_size=12288, n_heads=96, max_positions=2048,
                         name="gpt3-175b"),  # 174,604,259,328
    # BERT (google-bert/bert-*-uncased): BertModel with its pooler.
    "bert-base-uncased": _Recipe(bert_model, n_layers=12, hidden_size=768, n_heads=12,
                                 name="bert-base-uncased"),  # 109,482,240
    "bert-large-uncased": _Recipe(bert_model, n_layers=24, hidden_size=1024, n_heads=16,
                                  name="bert-large-uncased"),  # 335,141,888
    # LLaMA family (meta-llama/*): untied head, SwiGLU, RMSNorm.
    "llama-65b": _Recipe(llama_model, n_layers=80, hidden_size=8192, n_heads=64, intermediate_size=22016,
                         vocab_size=32000, name="llama-65b"),  # 65,285,660,672 (LLaMA-1, QLoRA's 65B)
    "llama-2-7b": _Recipe(llama_model, n_layers=32, hidden_size=4096, n_heads=32, intermediate_size=11008,
                          vocab_size=32000, name="llama-2-7b"),  # 6,738,415,616
    "llama-2-13b": _Recipe(llama_model, n_layers=40, hidden_size=5120, n_heads=40, intermediate_size=13824,
                           vocab_size=32000, name="llama-2-13b"),  # 13,015,864,320
    "llama-2-70b": _Recipe(llama_model, n_layers=80, hidden_size=8192, n_heads=64, n_kv_heads=8,
                           intermediate_size=28672, vocab_size=32000, name="llama-2-70b"),  # 68,976,648,192
    "llama-3-8b": _Recipe(llama_model, n_layers=32, hidden_size=4096, n_heads=32, n_kv_heads=8,
                          intermediate_size=14336, vocab_size=128256, name="llama-3-8b"),  # 8,030,261,248
    "llama-3-70b": _Recipe(llama_model, n_layers=80, hidden_size=8192, n_heads=64, n_kv_heads=8,
                           intermediate_size=28672, vocab_size=128256, name="llama-3-70b"),  # 70,553,706,496
    # Mistral 7B (mistralai/Mistral-7B-v0.1): LLaMA layout with 8 key/value heads, every layer sliding over
    # 4,096 tokens (its config's sliding_window; the KV cache keeps at most that many).
    "mistral-7b": _Recipe(lambda: replace(
        llama_model(n_layers=32, hidden_size=4096, n_heads=32, n_kv_heads=8, intermediate_size=14336,
                    vocab_size=32000, name="mistral-7b"), arch="mistral", sliding_window=4096,
        layer_types=("sliding_attention",) * 32)),  # 7,241,732,096
    # The newer families, from the fields of each repository's config.json that shape the model (the
    # validation test builds each in transformers and compares counts).
    "qwen2.5-0.5b": _from_config(  # Qwen/Qwen2.5-0.5B: 494,032,768 (card: 0.49B); q/k/v biases, tied head
        "qwen2.5-0.5b", model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-7b": _from_config(  # Qwen/Qwen2.5-7B: 7,615,616,512 (card: 7.61B)
        "qwen2.5-7b", model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    "qwen3-0.6b": _from_config(  # Qwen/Qwen3-0.6B: 596,049,920 (card: 0.6B); q/k norms, head_dim 128
        "qwen3-0.6b", model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "qwen3-8b": _from_config(  # Qwen/Qwen3-8B: 8,190,735,360 (card: 8.2B)
        "qwen3-8b", model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False),
    "gemma-2-2b": _from_config(  # google/gemma-2-2b: 2,614,341,888 (2.61B); four norms, alternating 4,096 window
        "gemma-2-2b", model_type="gemma2", hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
        num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=256000, sliding_window=4096),
    "gemma-2-9b": _from_config(  # google/gemma-2-9b: 9,241,705,984 (9.24B)
        "gemma-2-9b", model_type="gemma2", hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
        num_attention_heads=16, num_key_value_heads=8, head_dim=256, vocab_size=256000, sliding_window=4096),
    "gemma-3-1b": _from_config(  # google/gemma-3-1b-pt: 999,885,952 (1B); 5 sliding (512) blocks to 1 full
        "gemma-3-1b", model_type="gemma3_text", hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
        num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144, sliding_window=512),
    "phi-3-mini": _from_config(  # microsoft/Phi-3-mini-4k-instruct: 3,821,079,552 (3.8B); fused qkv, window 2,047
        "phi-3-mini", model_type="phi3", hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, vocab_size=32064, sliding_window=2047),
    "mixtral-8x7b": _from_config(  # mistralai/Mixtral-8x7B-v0.1: 46,702,792,704 total, 12,879,925,248 active
        "mixtral-8x7b", model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2, vocab_size=32000),
    "qwen3-30b-a3b": _from_config(  # Qwen/Qwen3-30B-A3B: 30,532,122,624 total, 3,353,032,704 active (30.5B/3.3B)
        "qwen3-30b-a3b", model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936, num_experts=128,
        num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True, tie_word_embeddings=False),
    # openai/gpt-oss-*: weights as a dequantized load holds them (Mxfp4Config(dequantize=True), the trainable
    # base); the checkpoint's MXFP4 experts come with its config.json (quantization_config) or --weights mxfp4
    "gpt-oss-20b": _from_config(  # 20,914,757,184 total, 4,187,440,704 active (3.61B without the embedding)
        "gpt-oss-20b", model_type="gpt_oss", hidden_size=2880, intermediate_size=2880, num_hidden_layers=24,
        num_attention_heads=64, num_key_value_heads=8, head_dim=64, vocab_size=201088, num_local_experts=32,
        num_experts_per_tok=4, attention_bias=True, sliding_window=128,
        layer_types=["sliding_attention", "full_attention"] * 12, tie_word_embeddings=False),
    "gpt-oss-120b": _from_config(  # 116,829,156,672 total, 5,711,982,912 active (5.13B without the embedding)
        "gpt-oss-120b", model_type="gpt_oss", hidden_size=2880, intermediate_size=2880, num_hidden_layers=36,
        num_attention_heads=64, num_key_value_heads=8, head_dim=64, vocab_size=201088, num_local_experts=128,
        num_experts_per_tok=4, attention_bias=True, sliding_window=128,
        layer_types=["sliding_attention", "full_attention"] * 18, tie_word_embeddings=False),
    "smollm3-3b": _from_config(  # HuggingFaceTB/SmolLM3-3B: 3,075,098,624 (3B); every 4th layer NoPE, tied head
        "smollm3-3b", model_type="smollm3", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
        num_attention_heads=16, num_key_value_heads=4, vocab_size=128256, tie_word_embeddings=True),
    "granite-3.3-8b": _from_config(  # ibm-granite/granite-3.3-8b-instruct: 8,170,864,640 (8.17B), tied head
        "granite-3.3-8b", model_type="granite", hidden_size=4096, intermediate_size=12800, num_hidden_layers=40,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=49159, tie_word_embeddings=True),
    "llama-4-scout": _from_config(  # meta-llama/Llama-4-Scout-17B-16E's text model: 107,769,861,120 total,
        # 17,172,894,720 active (card: 17B active, 109B with the vision tower); rotary layers chunked at 8,192
        "llama-4-scout", model_type="llama4_text", hidden_size=5120, intermediate_size=8192,
        intermediate_size_mlp=16384, num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8,
        head_dim=128, vocab_size=202048, num_local_experts=16, num_experts_per_tok=1, interleave_moe_layer_step=1,
        attention_chunk_size=8192, tie_word_embeddings=False),
    "llama-4-maverick": _from_config(  # meta-llama/Llama-4-Maverick-17B-128E's text model: 400,711,848,960 total,
        # 17,184,691,200 active (card: 17B active, 400B total); 128 experts in every second block, dense between
        "llama-4-maverick", model_type="llama4_text", hidden_size=5120, intermediate_size=8192,
        intermediate_size_mlp=16384, num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8,
        head_dim=128, vocab_size=202048, num_local_experts=128, num_experts_per_tok=1, interleave_moe_layer_step=2,
        attention_chunk_size=8192, use_qk_norm=False, tie_word_embeddings=False),
    "deepseek-v3": _from_config(  # deepseek-ai/DeepSeek-V3: 671,026,404,352 (card: 671B, 37B activated); latent
        # attention, 3 dense blocks then 58 of 256 experts (8 a token) and a shared one; dequantized, as the other
        # presets (its config.json's block FP8 is read from the file: memmath train CONFIG)
        "deepseek-v3", model_type="deepseek_v3", hidden_size=7168, intermediate_size=18432,
        moe_intermediate_size=2048, num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
        n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=8, first_k_dense_replace=3, n_group=8,
        topk_group=4, norm_topk_prob=True, kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128,
        qk_rope_head_dim=64, v_head_dim=128, vocab_size=129280, tie_word_embeddings=False),
    "deepseek-v2-lite": _from_config(  # deepseek-ai/DeepSeek-V2-Lite: 15,706,484,224 (card: 15.7B, 2.4B activated)
        "deepseek-v2-lite", model_type="deepseek_v2", hidden_size=2048, intermediate_size=10944,
        moe_intermediate_size=1408, num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16,
        n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6, first_k_dense_replace=1, n_group=1,
        topk_group=1, topk_method="greedy", norm_topk_prob=False, kv_lora_rank=512, q_lora_rank=None,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=102400, tie_word_embeddings=False),
    "glm-4.5-air": _from_config(  # zai-org/GLM-4.5-Air: 106,852,245,504 (card: 106B, 12B active); 1 dense block
        "glm-4.5-air", model_type="glm4_moe", hidden_size=4096, intermediate_size=10944, num_hidden_layers=46,
        num_attention_heads=96, num_key_value_heads=8, head_dim=128, vocab_size=151552, attention_bias=True,
        use_qk_norm=False, partial_rotary_factor=0.5, moe_intermediate_size=1408, n_routed_experts=128,
        n_shared_experts=1, num_experts_per_tok=8, first_k_dense_replace=1, n_group=1, topk_group=1,
        norm_topk_prob=True, tie_word_embeddings=False),
    "qwen3-next-80b-a3b": _from_config(  # Qwen/Qwen3-Next-80B-A3B-Instruct: 79,674,391,296 (card: 80B, 3B
        # activated); three gated DeltaNet blocks to one gated full-attention block, 512 experts (10 a token)
        "qwen3-next-80b-a3b", model_type="qwen3_next", hidden_size=2048, intermediate_size=5120,
        num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=2, head_dim=256, vocab_size=151936,
        tie_word_embeddings=False, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
        shared_expert_intermediate_size=512, norm_topk_prob=True, full_attention_interval=4,
        linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16,
        linear_num_value_heads=32),
    "olmo-3-7b": _from_config(  # allenai/Olmo-3-1025-7B: 7,298,011,136 (7.3B); OLMo 2's layers, every 4th block
        # full and the others sliding over 4,096 tokens (Olmo3Config's default layer_types)
        "olmo-3-7b", model_type="olmo3", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, vocab_size=100278, sliding_window=4096,
        tie_word_embeddings=False),
    "seed-oss-36b": _from_config(  # ByteDance-Seed/Seed-OSS-36B-Base: 36,151,104,512 (36B); q/k/v biases, 80
        # query and 8 key/value heads of 128; attention_dropout and residual_dropout 0.1 (SeedOssConfig's defaults,
        # which the published config.json repeats)
        "seed-oss-36b", model_type="seed_oss", hidden_size=5120, intermediate_size=27648, num_hidden_layers=64,
        num_attention_heads=80, num_key_value_heads=8, head_dim=128, vocab_size=155136, attention_bias=True,
        attention_out_bias=False, attention_dropout=0.1, residual_dropout=0.1, tie_word_embeddings=False),
    "command-r7b": _from_config(  # CohereLabs/c4ai-command-r7b-12-2024: 8,028,033,024 (8.03B); a parallel block,
        # three blocks sliding over 4,096 tokens to one full, tied head (Cohere2Config's default)
        "command-r7b", model_type="cohere2", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=256000, sliding_window=4096,
        sliding_window_pattern=4, logit_scale=0.25, max_position_embeddings=132096),
    "apertus-8b": _from_config(  # swiss-ai/Apertus-8B-2509: 8,053,338,176 (8B); xIELU MLP without a gate, q/k norms
        "apertus-8b", model_type="apertus", hidden_size=4096, intermediate_size=21504, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=131072, hidden_act="xielu",
        tie_word_embeddings=False, max_position_embeddings=65536),
    "ernie-4.5-0.3b": _from_config(  # baidu/ERNIE-4.5-0.3B-PT: 360,748,032 (card: 0.36B); head_dim 128, tied head
        "ernie-4.5-0.3b", model_type="ernie4_5", hidden_size=1024, intermediate_size=3072, num_hidden_layers=18,
        num_attention_heads=16, num_key_value_heads=2, head_dim=128, vocab_size=103424, use_bias=False,
        tie_word_embeddings=True),
    "ernie-4.5-21b-a3b": _from_config(  # baidu/ERNIE-4.5-21B-A3B-PT: 21,825,437,888 total, 3,352,150,208 active
        # (3.09B without the token embedding; card: 21B total, 3B activated); block 0 dense, 27 MoE blocks of 64
        # experts (6 a token) and 2 shared, tied head
        "ernie-4.5-21b-a3b", model_type="ernie4_5_moe", hidden_size=2560, intermediate_size=12288,
        num_hidden_layers=28, num_attention_heads=20, num_key_value_heads=4, vocab_size=103424, use_bias=False,
        tie_word_embeddings=True, moe_num_experts=64, moe_num_shared_experts=2, moe_k=6, moe_intermediate_size=1536,
        moe_layer_start_index=1, moe_layer_end_index=27, moe_layer_interval=1, max_position_embeddings=131072),
    "exaone-4.0-32b": _from_config(  # LGAI-EXAONE/EXAONE-4.0-32B: 32,003,216,384 (card: 30.95B without the
        # embeddings); post-norm, per-head q/k norms, three blocks sliding over 4,096 tokens to one full
        "exaone-4.0-32b", model_type="exaone4", hidden_size=5120, intermediate_size=27392, num_hidden_layers=64,
        num_attention_heads=40, num_key_value_heads=8, head_dim=128, vocab_size=102400, sliding_window=4096,
        layer_types=(["sliding_attention"] * 3 + ["full_attention"]) * 16, tie_word_embeddings=False),
    "lfm2-1.2b": _from_config(  # LiquidAI/LFM2-1.2B: 1,170,340,608 (its card's count); 10 gated short-convolution
        # blocks and 6 attention blocks (3, 6, 9, 11, 13, 15), Lfm2MLP 8,192 wide (2/3 of 12,288), tied head
        "lfm2-1.2b", model_type="lfm2", hidden_size=2048, intermediate_size=12288, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=65536, conv_L_cache=3,
        layer_types=["full_attention" if i in (2, 5, 8, 10, 12, 14) else "conv" for i in range(16)],
        tie_word_embeddings=True, max_position_embeddings=128000),
    "minimax-m2": _from_config(  # MiniMaxAI/MiniMax-M2: 228,689,748,992 (card: 230B total, 10B active); q/k norms
        # over all heads, 64 of each head's 128 dims rotated, a sigmoid router over 256 experts (8 a token)
        "minimax-m2", model_type="minimax_m2", hidden_size=3072, intermediate_size=1536, num_hidden_layers=62,
        num_attention_heads=48, num_key_value_heads=8, head_dim=128, rotary_dim=64, num_local_experts=256,
        num_experts_per_tok=8, vocab_size=200064, tie_word_embeddings=False),
})

# Which published config (validation/published_configs.py) each preset read from a config reproduces.
PUBLISHED_CONFIG_NAMES = {"gpt2": "gpt2", "gpt2-medium": "gpt2-medium", "bert-base-uncased": "bert-base-uncased",
                          "bert-large-uncased": "bert-large-uncased", "llama-3-8b": "Meta-Llama-3-8B",
                          "mistral-7b": "Mistral-7B-v0.1", "qwen2.5-0.5b": "Qwen2.5-0.5B", "qwen2.5-7b": "Qwen2.5-7B",
                  "qwen3-0.6b": "Qwen3-0.6B", "qwen3-8b": "Qwen3-8B", "gemma-2-2b": "gemma-2-2b",
                  "gemma-2-9b": "gemma-2-9b", "gemma-3-1b": "gemma-3-1b-pt", "phi-3-mini": "Phi-3-mini-4k-instruct",
                  "mixtral-8x7b": "Mixtral-8x7B-v0.1", "qwen3-30b-a3b": "Qwen3-30B-A3B",
                  "gpt-oss-20b": "gpt-oss-20b", "gpt-oss-120b": "gpt-oss-120b",
                  "smollm3-3b": "SmolLM3-3B", "granite-3.3-8b": "granite-3.3-8b-instruct",
                  "llama-4-scout": "Llama-4-Scout-17B-16E", "llama-4-maverick": "Llama-4-Maverick-17B-128E",
                  "olmo-3-7b": "Olmo-3-1025-7B", "deepseek-v3": "DeepSeek-V3", "deepseek-v2-lite": "DeepSeek-V2-Lite",
                  "glm-4.5-air": "GLM-4.5-Air", "qwen3-next-80b-a3b": "Qwen3-Next-80B-A3B-Instruct",
                  "seed-oss-36b": "Seed-OSS-36B-Base",
                  "command-r7b": "c4ai-command-r7b-12-2024", "apertus-8b": "Apertus-8B-2509",
                  "ernie-4.5-0.3b": "ERNIE-4.5-0.3B-PT", "exaone-4.0-32b": "EXAONE-4.0-32B",
                  "lfm2-1.2b": "LFM2-1.2B", "ernie-4.5-21b-a3b": "ERNIE-4.5-21B-A3B-PT",
                  "minimax-m2": "MiniMax-M2"}


# Where each preset's shape comes from (shown by `memmath models`).
PRESET_SOURCES = {
    "gpt2": "openai-community/gpt2 config.json",
    "gpt2-medium": "openai-community/gpt2-medium config.json",
    "gpt2-large": "openai-community/gpt2-large config.json",
    "gpt2-xl": "openai-community/gpt2-xl config.json",
    "gpt3-175b": "Brown et al. 2020, Table 2.1",
    "bert-base-uncased": "google-bert/bert-base-uncased config.json",
    "bert-large-uncased": "google-bert/bert-large-uncased config.json",
    "llama-65b": "Touvron et al. 2023, Table 2",  # LLaMA-1 65B, QLoRA's 65B
    "llama-2-7b": "meta-llama/Llama-2-7b-hf config.json",
    "llama-2-13b": "meta-llama/Llama-2-13b-hf config.json",
    "llama-2-70b": "meta-llama/Llama-2-70b-hf config.json",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B config.json",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B config.json",
    "mistral-7b": "mistralai/Mistral-7B-v0.1 config.json",
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B config.json",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B config.json",
    "qwen3-0.6b": "Qwen/Qwen3-0.6B config.json",
    "qwen3-8b": "Qwen/Qwen3-8B config.json",
    "gemma-2-2b": "google/gemma-2-2b config.json",
    "gemma-2-9b": "google/gemma-2-9b config.json",
    "gemma-3-1b": "google/gemma-3-1b-pt config.json",
    "phi-3-mini": "microsoft/Phi-3-mini-4k-instruct config.json",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1 config.json",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B config.json",
    "gpt-oss-20b": "openai/gpt-oss-20b config.json",
    "gpt-oss-120b": "openai/gpt-oss-120b config.json",
    "smollm3-3b": "HuggingFaceTB/SmolLM3-3B config.json",
    "granite-3.3-8b": "ibm-granite/granite-3.3-8b-instruct config.json",
    "llama-4-scout": "meta-llama/Llama-4-Scout-17B-16E",  # its config.json's text_config
    "llama-4-maverick": "meta-llama/Llama-4-Maverick-17B-128E",  # its config.json's text_config
    "deepseek-v3": "deepseek-ai/DeepSeek-V3 config.json",
    "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite config.json",
    "glm-4.5-air": "zai-org/GLM-4.5-Air config.json",
    "qwen3-next-80b-a3b": "Qwen/Qwen3-Next-80B-A3B-Instruct config.json",
    "olmo-3-7b": "allenai/Olmo-3-1025-7B config.json",
    "seed-oss-36b": "ByteDance-Seed/Seed-OSS-36B-Base config.json",
    "command-r7b": "CohereLabs/c4ai-command-r7b-12-2024 config.json",
    "apertus-8b": "swiss-ai/Apertus-8B-2509 config.json",
    "ernie-4.5-0.3b": "baidu/ERNIE-4.5-0.3B-PT config.json",
    "exaone-4.0-32b": "LGAI-EXAONE/EXAONE-4.0-32B config.json",
    "lfm2-1.2b": "LiquidAI/LFM2-1.2B config.json",
    "ernie-4.5-21b-a3b": "baidu/ERNIE-4.5-21B-A3B-PT config.json",
    "minimax-m2": "MiniMaxAI/MiniMax-M2 config.json",
}

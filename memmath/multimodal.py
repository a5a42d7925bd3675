"""Vision-language configs: the language model from text_config, the vision tower from vision_config,
and the projector between them, tensor by tensor, as transformers 5.24 builds ...ForConditionalGeneration.

    >>> import memmath
    >>> shape = memmath.from_hf_config(config)          # the Hub's config.json of google/gemma-3-4b-it
    >>> shape.n_params, shape.vision.tower_params, shape.vision.projector_params
    (4300079472, 416866032, 2950272)

`from_hf_config` hands every config whose model_type is in MULTIMODAL_MODEL_TYPES (or which carries a
vision_config) to `from_multimodal_config`. The result is the ModelShape of the language model, read by
the text reader (config_reader.from_hf_config) from text_config with transformers' config-class defaults for
every field it omits (TEXT_DEFAULTS; transformers saves a sub-config as its difference from those
defaults, so google/gemma-3-27b-it's text_config has no vocab_size: Gemma3TextConfig's 262,208
applies), and with `vision` holding a VisionParts: the tower's and the projector's tensors, which the
shape's "vision" group lists (ModelShape.tensors("vision")) and n_params counts. The shape's notes say
what was counted and what was not.

What each part is, from transformers 5.24's modeling files:
    gemma3      SigLIP tower (modeling_siglip.py SiglipVisionModel), Gemma3MultiModalProjector
                (a soft-embedding RMSNorm and an h_vision x h_text matrix), Gemma3TextModel, lm_head
    llava       CLIP, SigLIP or Pixtral tower, LlavaMultiModalProjector (linear_1, GELU, linear_2), the
                text_config's model (llama, mistral, qwen2, gemma3_text), lm_head
    mistral3    Pixtral tower, Mistral3MultiModalProjector (RMSNorm, the patch merger's
                merging_layer, linear_1, linear_2), MistralModel, lm_head
    qwen2_vl    Qwen2VisionTransformerPretrainedModel (Conv3d patches, LayerNorm blocks, fused qkv,
                fc1/fc2) whose PatchMerger is the projector, Qwen2VLTextModel (Qwen2's layout), lm_head
    qwen2_5_vl  as qwen2_vl with RMSNorm blocks and a gated MLP (gate/up/down), Qwen2_5_VLTextModel
Refused by name (REFUSED_MODEL_TYPES): mllama (Llama 3.2 Vision) and the other vision-language types.

What memmath does with the vision parts (the Note kinds in parentheses):
    weights      every tensor, in the recipe's format; QLoRA quantizes their nn.Linear weights as
                 bitsandbytes does (transformers converts every nn.Linear but lm_head)
    training     methods.Full/Freeze/Adapters/LoRA/QLoRA take vision= "trains", "projector" or
                 "frozen" (VISION_CHOICES): what of the tower and projector trains (vision_trainable)
    activations  the language model's, over seq_len tokens, image tokens included; the tower's and
                 the projector's are not counted (vision_activations_not_counted), and the exact
                 activation model refuses a vision-language model (the textbook one answers, said so)
    peak         not modelled as a timeline; a frozen tower's run is judged on an upper bound (decision.py): the
                 language model's requirement plus the tower's parts, or, for SigLIP under Gemma 3, CLIP under LLaVA,
                 Qwen2-VL's and Qwen2.5-VL's towers and Pixtral (under Mistral3, or LLaVA with each patch a token),
                 the tower's forward at the most images the sequence holds when that is larger
                 (vision_forward.py); a tower or projector that trains is judged on the sum of the parts
"""

from __future__ import annotations

from dataclasses import replace

from . import validate
from .architectures._parts import ParamTensor
from .notes import Note
from .vision_parts import VisionTensors
from .values import frozen

MULTIMODAL_MODEL_TYPES = ("gemma3", "llava", "mistral3", "qwen2_vl", "qwen2_5_vl")
VISION_CHOICES = ("trains", "projector", "frozen")  # what of the tower and projector trains (methods' vision=)

# Vision-language model types transformers 5.24 has that memmath does not read, each with its reason.
_OTHER = "a vision-language model whose parts memmath does not model"
REFUSED_MODEL_TYPES = {
    "mllama": "Llama 3.2 Vision: its language model interleaves gated cross-attention layers "
              "(text_config cross_attention_layers) with the self-attention blocks and has 8 more embedding rows, "
              "and its vision model has a global transformer and gated positional embeddings; memmath's blocks "
              "are all one shape",
    "llava_next": "LLaVA-NeXT: an image_newline parameter and any-resolution tiling (image_grid_pinpoints)",
    "llava_next_video": "LLaVA-NeXT-Video: the LLaVA-NeXT parts and a video pooling",
    "llava_onevision": "LLaVA-OneVision: an image_newline parameter and any-resolution tiling",
    "paligemma": "PaliGemma: a different projector and prefix attention",
    "llama4": "Llama 4: its vision model (Llama4VisionModel: an unfolding patch convolution, a pixel-shuffle "
              "adapter MLP) is not modelled; its text_config alone reads as model_type llama4_text",
    "idefics2": _OTHER, "idefics3": _OTHER, "smolvlm": _OTHER, "qwen3_vl": _OTHER, "qwen3_vl_moe": _OTHER,
    "gemma3n": _OTHER, "internvl": _OTHER, "aya_vision": _OTHER, "glm4v": _OTHER,
    "phi4_multimodal": _OTHER, "kosmos-2": _OTHER, "blip-2": _OTHER, "instructblip": _OTHER,
    "florence2": _OTHER, "chameleon": _OTHER, "emu3": _OTHER, "janus": _OTHER, "got_ocr2": _OTHER,
    "video_llava": _OTHER, "vipllava": _OTHER, "fuyu": _OTHER, "pixtral": "a Pixtral vision encoder alone "
    "(model_type 'pixtral' is the tower; its vision-language models are llava or mistral3 configs)",
}

# ---- transformers' defaults -------------------------------------------------------------------
# Config-class defaults (transformers 5.24 configuration_<type>.py) of the text fields the text reader
# reads, filled in where a text_config omits them. None: the class derives it (kv heads = heads,
# head_dim = hidden / heads) or has no such field.
TEXT_DEFAULTS = {
    "gemma3_text": dict(  # Gemma3TextConfig
        vocab_size=262_208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
        attention_bias=False, attention_dropout=0.0, query_pre_attn_scalar=256, sliding_window=4096,
        final_logit_softcapping=None, attn_logit_softcapping=None, use_bidirectional_attention=False,
        use_cache=True),
    "llama": dict(  # LlamaConfig
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=None, head_dim=None, hidden_act="silu", tie_word_embeddings=False, attention_bias=False,
        attention_dropout=0.0, mlp_bias=False, use_cache=True),
    "mistral": dict(  # MistralConfig
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, head_dim=None, hidden_act="silu", tie_word_embeddings=False, sliding_window=4096,
        attention_dropout=0.0, use_cache=True),
    "qwen2": dict(  # Qwen2Config
        vocab_size=151_936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=32, hidden_act="silu", tie_word_embeddings=False, use_sliding_window=False,
        sliding_window=4096, max_window_layers=28, attention_dropout=0.0, use_cache=True),
    "qwen2_vl_text": dict(  # Qwen2VLTextConfig (no tie_word_embeddings of its own: Qwen2VLConfig's)
        vocab_size=152_064, hidden_size=8192, intermediate_size=29568, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, hidden_act="silu", use_sliding_window=False, sliding_window=4096,
        max_window_layers=80, attention_dropout=0.0, use_cache=True),
}
TEXT_DEFAULTS["qwen2_5_vl_text"] = dict(TEXT_DEFAULTS["qwen2_vl_text"])  # Qwen2_5_VLTextConfig: the same values
# The text reader that builds each text model: Qwen2VLTextModel and Qwen2_5_VLTextModel have Qwen2's layout
# (q/k/v biases, no o bias, SwiGLU, two RMSNorms; head_dim always hidden / heads; M-RoPE has no parameters).
_READER = {"qwen2_vl_text": "qwen2", "qwen2_5_vl_text": "qwen2"}
# Qwen2VLConfig / Qwen2_5_VLConfig without a text_config take these top-level fields as the text model's
# (the parameters of Qwen2VLTextConfig.__init__, and rope_parameters, rope_scaling, rope_theta).
_QWEN_FLAT_TEXT = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                   "num_key_value_heads", "hidden_act", "max_position_embeddings", "initializer_range",
                   "rms_norm_eps", "use_cache", "use_sliding_window", "sliding_window", "max_window_layers",
                   "layer_types", "attention_dropout", "rope_parameters", "rope_scaling", "rope_theta",
                   "bos_token_id", "eos_token_id", "pad_token_id", "architectures", "dtype")

# Vision config classes: their defaults for the fields that shape a parameter, and attribute_map aliases.
VISION_DEFAULTS = {
    "siglip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                                num_channels=3, image_size=224, patch_size=16, vision_use_head=True),
    "clip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                              num_channels=3, image_size=224, patch_size=32),
    "pixtral": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                    num_channels=3, image_size=1024, patch_size=16),
    "qwen2_vl_vision": dict(depth=32, embed_dim=1280, hidden_size=3584, mlp_ratio=4, num_heads=16, in_channels=3,
                            patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
    "qwen2_5_vl_vision": dict(depth=32, hidden_size=3584, intermediate_size=3420, num_heads=16, in_channels=3,
                              patch_size=14, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=3584),
}
_ALIASES = {  # Qwen2VLVisionConfig.attribute_map: the alias, when given, is what the class keeps
    "qwen2_vl_vision": {"num_hidden_layers": "depth", "num_attention_heads": "num_heads"},
    "qwen2_5_vl_vision": {"num_hidden_layers": "depth", "num_attention_heads": "num_heads"},
}
TOWER_LABELS = {"siglip_vision_model": "SigLIP", "clip_vision_model": "CLIP", "pixtral": "Pixtral",
                "qwen2_vl_vision": "Qwen2-VL", "qwen2_5_vl_vision": "Qwen2.5-VL"}


class _Wrapper:
    """One vision-language model_type: its config class's sub-config specs and top-level defaults."""

    __slots__ = ("cls", "text_type", "text_types", "towers", "tie_default", "tie_from_text", "text_init",
                 "vision_init", "flat_text")

    def __init__(self, cls, text_type, text_types, towers, tie_default, tie_from_text, text_init, vision_init,
                 flat_text=False):
        self.cls = cls  # the ...ForConditionalGeneration transformers builds
        self.text_type = text_type  # the default (or only) text model_type
        self.text_types = text_types  # the text model_types accepted inside it
        self.towers = towers  # the vision model_types accepted (the first is the default)
        self.tie_default = tie_default  # the class's tie_word_embeddings default
        self.tie_from_text = tie_from_text  # whether __post_init__ turns tying on when the text config ties
        self.text_init = text_init  # SubConfigSpec.init_kwargs: the text_config transformers builds when there is none
        self.vision_init = vision_init  # the same for vision_config
        self.flat_text = flat_text  # a config without text_config keeps the text fields at the top level (Qwen2-VL)


_WRAPPERS = {
    # configuration_gemma3.py: Gemma3Config (text_config always a Gemma3TextConfig; vision AutoConfig,
    # default siglip_vision_model; tie_word_embeddings True).
    "gemma3": _Wrapper("Gemma3ForConditionalGeneration", "gemma3_text", ("gemma3_text",), ("siglip_vision_model",),
                       True, False, {}, {}),
    # configuration_llava.py: LlavaConfig (text AutoConfig default llama; vision AutoConfig default
    # clip_vision_model with init_kwargs; tie_word_embeddings False, or the text config's when it ties).
    "llava": _Wrapper("LlavaForConditionalGeneration", "llama", ("llama", "mistral", "qwen2", "gemma3_text"),
                      ("clip_vision_model", "siglip_vision_model", "pixtral"), False, True, {},
                      dict(intermediate_size=4096, hidden_size=1024, patch_size=14, image_size=336,
                           num_hidden_layers=24, num_attention_heads=16)),
    # configuration_mistral3.py: Mistral3Config (text AutoConfig default mistral, vision default pixtral, both with
    # init_kwargs; tie_word_embeddings True).
    "mistral3": _Wrapper("Mistral3ForConditionalGeneration", "mistral", ("mistral", "llama"), ("pixtral",), True,
                         False,
                         dict(attention_dropout=0.0, head_dim=128, hidden_act="silu", hidden_size=5120,
                              intermediate_size=32768, num_attention_heads=32, num_hidden_layers=40,
                              num_key_value_heads=8, sliding_window=None, use_cache=True, vocab_size=131072),
                         dict(intermediate_size=4096, hidden_size=1024, patch_size=14, image_size=1540,
                              num_hidden_layers=24, num_attention_heads=16)),
    # configuration_qwen2_vl.py / configuration_qwen2_5_vl.py: fixed sub-config classes; tie_word_embeddings
    # False, or True when the text config has it true.
    "qwen2_vl": _Wrapper("Qwen2VLForConditionalGeneration", "qwen2_vl_text", ("qwen2_vl_text",),
                         ("qwen2_vl_vision",), False, True, {}, {}, flat_text=True),
    "qwen2_5_vl": _Wrapper("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl_text", ("qwen2_5_vl_text",),
                           ("qwen2_5_vl_vision",), False, True, {}, {}, flat_text=True),
}

# Per model_type, the top-level fields that change memory and what memmath does with each (the text_config's
# fields: config_reader.CONFIG_FIELDS of its model_type; the vision_config's: VISION_FIELDS).
_COMMON = {
    "text_config": "the language model (config_reader.CONFIG_FIELDS of its model_type), transformers' defaults filled in",
    "vision_config": "the vision tower (VISION_FIELDS)",
    "tie_word_embeddings": "lm_head shares the token embedding (this config's, not the text_config's)",
    "torch_dtype": "checked: float32, bfloat16 or float16", "dtype": "as torch_dtype",
    "quantization_config": "refused: a pre-quantized checkpoint is not modelled",
}
MULTIMODAL_FIELDS = {
    "gemma3": dict(_COMMON, mm_tokens_per_image="image tokens per image (the language model's sequence; no "
                   "parameters: an average pool)"),
    "llava": dict(_COMMON, tie_word_embeddings="lm_head shares the token embedding (true here or in text_config)",
                  vision_feature_layer="an int, or a list whose length multiplies linear_1's input width",
                  multimodal_projector_bias="biases on linear_1 and linear_2 (default true)",
                  image_seq_length="image tokens per image (no parameters)",
                  projector_hidden_act="the projector's activation (no parameters)",
                  vision_feature_select_strategy="which patches pass (no parameters)",
                  vocab_size="not read by LlavaConfig (transformers 5.24): text_config's counts"),
    "mistral3": dict(_COMMON, vision_feature_layer="as llava's; the tower's forward is modelled for -1 (the "
                     "default)", spatial_merge_size="the patch merger's merging_layer input width (h_vision x merge^2)",
                     multimodal_projector_bias="biases on linear_1 and linear_2 (default false)",
                     projector_hidden_act="the projector's activation (no parameters; the tower's forward is "
                     "modelled for gelu, the default)"),
    "qwen2_vl": dict(_COMMON, tie_word_embeddings="lm_head shares the token embedding (true here or in "
                     "text_config)", **{"(text fields)": "without a text_config, the top-level text fields are the "
                                        "language model's, as Qwen2VLConfig takes them"}),
}
MULTIMODAL_FIELDS["qwen2_5_vl"] = dict(MULTIMODAL_FIELDS["qwen2_vl"])
_NO_PARAMS = "no parameters (the tower's activations, which are not counted)"
VISION_FIELDS = {
    "siglip_vision_model": dict(hidden_size="width", intermediate_size="MLP width", num_hidden_layers="blocks",
                                num_attention_heads="must divide hidden_size", num_channels="patch convolution input",
                                image_size="position rows: (image_size // patch_size)^2", patch_size="patch convolution",
                                vision_use_head="the attention-pooling head (probe, attention, norm, MLP)",
                                hidden_act=_NO_PARAMS, attention_dropout=_NO_PARAMS),
    "clip_vision_model": dict(hidden_size="width", intermediate_size="MLP width", num_hidden_layers="blocks",
                              num_attention_heads="must divide hidden_size", num_channels="patch convolution input",
                              image_size="position rows: (image_size // patch_size)^2 + 1",
                              patch_size="patch convolution", projection_dim="unused by CLIPVisionModel: no memory",
                              hidden_act=_NO_PARAMS, attention_dropout=_NO_PARAMS),
    "pixtral": dict(hidden_size="width", intermediate_size="MLP width (gate, up, down)", num_hidden_layers="blocks",
                    num_attention_heads="heads (rotary tables only)", num_channels="patch convolution input",
                    patch_size="patch convolution", image_size="rotary tables only (no parameters)",
                    head_dim="replaced by hidden_size // num_attention_heads (PixtralVisionConfig)",
                    hidden_act="no parameters; under Mistral3 the tower's forward is modelled for gelu (its default)",
                    attention_dropout=_NO_PARAMS),
    "qwen2_vl_vision": dict(depth="blocks (alias num_hidden_layers)", embed_dim="width", mlp_ratio="MLP width = "
                            "int(embed_dim x mlp_ratio)", num_heads="heads (rotary tables only)",
                            hidden_size="the merger's output width (the language model's)", in_channels="patch input",
                            patch_size="Conv3d patches", temporal_patch_size="Conv3d patches",
                            spatial_merge_size="the merger's width (embed_dim x merge^2)",
                            in_chans="not read by Qwen2VLVisionConfig (transformers 5.24): in_channels counts",
                            hidden_act=_NO_PARAMS),
    "qwen2_5_vl_vision": dict(depth="blocks (alias num_hidden_layers)", hidden_size="width",
                              intermediate_size="MLP width (gate, up, down)", num_heads="heads (rotary tables only)",
                              out_hidden_size="the merger's output width", in_channels="patch input",
                              patch_size="Conv3d patches", temporal_patch_size="Conv3d patches",
                              spatial_merge_size="the merger's width (hidden_size x merge^2)",
                              window_size="no parameters; the windows of the tower's forward (vision_forward.py)",
                              fullatt_block_indexes="no parameters; the blocks of the tower's forward that attend over "
                              "whole images", in_chans="not read by Qwen2_5_VLVisionConfig: in_channels counts",
                              hidden_act="no parameters; the tower's forward is modelled for silu (its default)"),
}


# ---- tensors --------------------------------------------------------------------------------------
def _w(name, component, shape, linear=False):
    return ParamTensor(name, component, tuple(shape), linear=linear)


def _linear(name, component, d_in, d_out, bias=True):
    """nn.Linear: weight d_out x d_in (what bitsandbytes quantizes), optional bias."""
    out = [_w(f"{name}.weight", component, (d_out, d_in), linear=True)]
    if bias:
        out.append(_w(f"{name}.bias", component, (d_out,)))
    return out


def _layer_norm(name, component, width, bias=True):
    out = [_w(f"{name}.weight", component, (width,))]
    if bias:
        out.append(_w(f"{name}.bias", component, (width,)))
    return out


_T = "vision_tower"


def _siglip(v: dict, prefix="vision_tower"):
    # modeling_siglip.py: SiglipVisionEmbeddings (Conv2d with bias, one position row per patch), SiglipEncoderLayer
    # (layer_norm1, self_attn k/v/q/out_proj with biases, layer_norm2, mlp fc1/fc2), post_layernorm and, with
    # vision_use_head, SiglipMultiheadAttentionPoolingHead (probe, nn.MultiheadAttention, layernorm, mlp).
    h, inner, c, p = v["hidden_size"], v["intermediate_size"], v["num_channels"], v["patch_size"]
    positions = (v["image_size"] // p) ** 2
    emb = [_w(f"{prefix}.embeddings.patch_embedding.weight", _T, (h, c, p, p)),
           _w(f"{prefix}.embeddings.patch_embedding.bias", _T, (h,)),
           _w(f"{prefix}.embeddings.position_embedding.weight", _T, (positions, h))]
    layer = f"{prefix}.encoder.layers.{{i}}"
    block = (_layer_norm(f"{layer}.layer_norm1", _T, h)
             + [t for m in ("k_proj", "v_proj", "q_proj", "out_proj") for t in _linear(f"{layer}.self_attn.{m}", _T, h, h)]
             + _layer_norm(f"{layer}.layer_norm2", _T, h)
             + _linear(f"{layer}.mlp.fc1", _T, h, inner) + _linear(f"{layer}.mlp.fc2", _T, inner, h))
    post = _layer_norm(f"{prefix}.post_layernorm", _T, h)
    if v["vision_use_head"]:
        head = f"{prefix}.head"
        # nn.MultiheadAttention: in_proj_weight/in_proj_bias are Parameters, out_proj a NonDynamicallyQuantizable-
        # Linear, which transformers' bitsandbytes integration leaves alone (it converts type(module) is nn.Linear).
        post += ([_w(f"{head}.probe", _T, (1, 1, h)), _w(f"{head}.attention.in_proj_weight", _T, (3 * h, h)),
                  _w(f"{head}.attention.in_proj_bias", _T, (3 * h,)),
                  _w(f"{head}.attention.out_proj.weight", _T, (h, h)), _w(f"{head}.attention.out_proj.bias", _T, (h,))]
                 + _layer_norm(f"{head}.layernorm", _T, h)
                 + _linear(f"{head}.mlp.fc1", _T, h, inner) + _linear(f"{head}.mlp.fc2", _T, inner, h))
    return emb, block, post, v["num_hidden_layers"]


def _clip(v: dict, prefix="vision_tower"):
    # modeling_clip.py CLIPVisionModel: class_embedding, a Conv2d without bias, positions for every patch and the
    # class token, pre_layrnorm; CLIPEncoderLayer (self_attn k/v/q/out_proj with biases, layer_norm1, mlp, layer_norm2);
    # post_layernorm.
    h, inner, c, p = v["hidden_size"], v["intermediate_size"], v["num_channels"], v["patch_size"]
    positions = (v["image_size"] // p) ** 2 + 1
    emb = ([_w(f"{prefix}.embeddings.class_embedding", _T, (h,)),
            _w(f"{prefix}.embeddings.patch_embedding.weight", _T, (h, c, p, p)),
            _w(f"{prefix}.embeddings.position_embedding.weight", _T, (positions, h))]
           + _layer_norm(f"{prefix}.pre_layrnorm", _T, h))
    layer = f"{prefix}.encoder.layers.{{i}}"
    block = ([t for m in ("k_proj", "v_proj", "q_proj", "out_proj") for t in _linear(f"{layer}.self_attn.{m}", _T, h, h)]
             + _layer_norm(f"{layer}.layer_norm1", _T, h)
             + _linear(f"{layer}.mlp.fc1", _T, h, inner) + _linear(f"{layer}.mlp.fc2", _T, inner, h)
             + _layer_norm(f"{layer}.layer_norm2", _T, h))
    return emb, block, _layer_norm(f"{prefix}.post_layernorm", _T, h), v["num_hidden_layers"]


def _pixtral(v: dict, prefix="vision_tower"):
    # modeling_pixtral.py PixtralVisionModel: patch_conv (Conv2d, no bias), ln_pre (RMSNorm); PixtralAttentionLayer
    # (attention_norm, feed_forward gate/up/down, attention k/v/q/o, ffn_norm; no biases); rotary tables are buffers.
    h, inner, c, p = v["hidden_size"], v["intermediate_size"], v["num_channels"], v["patch_size"]
    emb = [_w(f"{prefix}.patch_conv.weight", _T, (h, c, p, p)), _w(f"{prefix}.ln_pre.weight", _T, (h,))]
    layer = f"{prefix}.transformer.layers.{{i}}"
    block = ([_w(f"{layer}.attention_norm.weight", _T, (h,))]
             + _linear(f"{layer}.feed_forward.gate_proj", _T, h, inner, False)
             + _linear(f"{layer}.feed_forward.up_proj", _T, h, inner, False)
             + _linear(f"{layer}.feed_forward.down_proj", _T, inner, h, False)
             + [t for m in ("k_proj", "v_proj", "q_proj", "o_proj")
                for t in _linear(f"{layer}.attention.{m}", _T, h, h, False)]
             + [_w(f"{layer}.ffn_norm.weight", _T, (h,))])
    return emb, block, [], v["num_hidden_layers"]


def _qwen2_vl(v: dict):
    # modeling_qwen2_vl.py Qwen2VisionTransformerPretrainedModel: PatchEmbed (Conv3d, no bias); Qwen2VLVisionBlock
    # (norm1, norm2 LayerNorms, attn.qkv and attn.proj with biases, mlp fc1/fc2 of width int(embed_dim x
    # mlp_ratio)); the PatchMerger (ln_q LayerNorm, mlp.0 and mlp.2 with biases) is the projector.
    e, c, p, tp = v["embed_dim"], v["in_channels"], v["patch_size"], v["temporal_patch_size"]
    inner = e * v["mlp_ratio"]  # int(embed_dim * mlp_ratio); Qwen2VLVisionConfig types mlp_ratio an int
    emb = [_w("visual.patch_embed.proj.weight", _T, (e, c, tp, p, p))]
    layer = "visual.blocks.{i}"
    block = (_layer_norm(f"{layer}.norm1", _T, e) + _layer_norm(f"{layer}.norm2", _T, e)
             + _linear(f"{layer}.attn.qkv", _T, e, 3 * e) + _linear(f"{layer}.attn.proj", _T, e, e)
             + _linear(f"{layer}.mlp.fc1", _T, e, inner) + _linear(f"{layer}.mlp.fc2", _T, inner, e))
    return emb, block, [], v["depth"]


def _qwen2_5_vl(v: dict):
    # modeling_qwen2_5_vl.py: Qwen2_5_VLVisionBlock (norm1, norm2 RMSNorms; attn.qkv, attn.proj with biases;
    # Qwen2_5_VLMLP gate/up/down with biases); Qwen2_5_VLPatchMerger (ln_q RMSNorm, mlp.0, mlp.2) the projector.
    h, inner, c, p, tp = v["hidden_size"], v["intermediate_size"], v["in_channels"], v["patch_size"], v["temporal_patch_size"]
    emb = [_w("visual.patch_embed.proj.weight", _T, (h, c, tp, p, p))]
    layer = "visual.blocks.{i}"
    block = ([_w(f"{layer}.norm1.weight", _T, (h,)), _w(f"{layer}.norm2.weight", _T, (h,))]
             + _linear(f"{layer}.attn.qkv", _T, h, 3 * h) + _linear(f"{layer}.attn.proj", _T, h, h)
             + _linear(f"{layer}.mlp.gate_proj", _T, h, inner) + _linear(f"{layer}.mlp.up_proj", _T, h, inner)
             + _linear(f"{layer}.mlp.down_proj", _T, inner, h))
    return emb, block, [], v["depth"]


_TOWERS = {"siglip_vision_model": _siglip, "clip_vision_model": _clip, "pixtral": _pixtral,
           "qwen2_vl_vision": _qwen2_vl, "qwen2_5_vl_vision": _qwen2_5_vl}

_P = "projector"


def _feature_layers(config: dict, default) -> int:
    """How many vision feature layers the projector reads: 1 for an int vision_feature_layer, else the list's length."""
    value = config.get("vision_feature_layer", default)
    if isinstance(value, int) and not isinstance(value, bool):
        return 1
    if isinstance(value, list) and value and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return len(value)
    raise validate.FieldError("vision_feature_layer", f"config field 'vision_feature_layer' must be a layer index "
                              f"or a non-empty list of them; got {validate.describe(value)}")


def _projector(model_type: str, config: dict, v: dict, text_hidden: int) -> list[ParamTensor]:
    top = _Reader(config, "", {})
    if model_type == "gemma3":
        # Gemma3MultiModalProjector: mm_input_projection_weight, a Parameter (h_vision x h_text, not an nn.Linear),
        # and mm_soft_emb_norm, a Gemma3RMSNorm over h_vision.
        h = v["hidden_size"]
        return [_w("multi_modal_projector.mm_input_projection_weight", _P, (h, text_hidden)),
                _w("multi_modal_projector.mm_soft_emb_norm.weight", _P, (h,))]
    if model_type in ("qwen2_vl", "qwen2_5_vl"):
        # The PatchMerger: spatial_merge_size^2 patches of the tower's width, merged, then to the output width.
        width = v["embed_dim"] if model_type == "qwen2_vl" else v["hidden_size"]
        out = v["hidden_size"] if model_type == "qwen2_vl" else v["out_hidden_size"]
        merged = width * v["spatial_merge_size"] ** 2
        norm = _layer_norm("visual.merger.ln_q", _P, width, bias=model_type == "qwen2_vl")  # LayerNorm / RMSNorm
        return norm + _linear("visual.merger.mlp.0", _P, merged, merged) + _linear("visual.merger.mlp.2", _P, merged, out)
    h = v["hidden_size"]
    if model_type == "llava":
        # LlavaMultiModalProjector: linear_1 (h_vision x feature layers -> h_text), GELU, linear_2 (h_text -> h_text).
        bias = top.flag("multimodal_projector_bias", True)
        layers = _feature_layers(config, -2)
        return (_linear("multi_modal_projector.linear_1", _P, h * layers, text_hidden, bias)
                + _linear("multi_modal_projector.linear_2", _P, text_hidden, text_hidden, bias))
    # mistral3: Mistral3MultiModalProjector: norm (RMSNorm, h_vision), patch_merger.merging_layer (h_vision x
    # merge^2 -> h_vision, no bias), linear_1, linear_2 (multimodal_projector_bias, default False).
    bias = top.flag("multimodal_projector_bias", False)
    merge = top.count("spatial_merge_size", 2)
    layers = _feature_layers(config, -1)
    return ([_w("multi_modal_projector.norm.weight", _P, (h,))]
            + _linear("multi_modal_projector.patch_merger.merging_layer", _P, h * merge ** 2, h, False)
            + _linear("multi_modal_projector.linear_1", _P, h * layers, text_hidden, bias)
            + _linear("multi_modal_projector.linear_2", _P, text_hidden, text_hidden, bias))


# ---- reading a config -------------------------------------------------------------------------------
class _Reader:
    """Fields of one (sub-)config with its class's defaults; each error names the field by its path."""

    def __init__(self, config: dict, where: str, defaults: dict, aliases: dict | None = None):
        self.config, self.where, self.defaults, self.aliases = config, where, defaults, aliases or {}

    def key(self, key):
        return f"{self.where}.{key}" if self.where else key

    def raw(self, key, default):
        for alias, target in self.aliases.items():  # attribute_map: the alias, when given, is what the class keeps
            if target == key and self.config.get(alias) is not None:
                return self.config[alias]
        value = self.config.get(key)
        return self.defaults.get(key, default) if value is None else value

    def count(self, key, default=None, low=1, high=validate.MAX_DIM):
        value = self.raw(key, default)
        if isinstance(value, (list, tuple)):
            raise validate.FieldError(self.key(key), f"config field {self.key(key)!r} is {validate.describe(value)}; "
                                      "memmath models a single whole number (transformers' modeling divides by it)")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise validate.FieldError(self.key(key), f"config field {self.key(key)!r} must be a whole number; got "
                                      f"{validate.describe(value)}")
        return validate.count(self.key(key), value, low=low, high=high)

    def flag(self, key, default):
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise validate.FieldError(self.key(key), f"config field {self.key(key)!r} must be true or false; got "
                                      f"{validate.describe(value)}")
        return value


def _refuse(model_type) -> None:
    reason = REFUSED_MODEL_TYPES.get(model_type, _OTHER)
    raise validate.FieldError("model_type", f"config field 'model_type' {model_type!r} is {reason}; memmath reads the "
                              f"vision-language model types {', '.join(MULTIMODAL_MODEL_TYPES)}")


def _check_top(config: dict) -> None:
    for key in ("torch_dtype", "dtype"):
        value = config.get(key)
        if value is not None and value not in ("float32", "bfloat16", "float16"):
            raise validate.FieldError(key, f"config field {key!r} must be one of float32, bfloat16, float16; "
                                      f"got {validate.describe(value)}")
    if config.get("quantization_config") is not None:
        raise validate.FieldError("quantization_config", "config field 'quantization_config' names a pre-quantized "
                                  "checkpoint, which memmath does not model; remove it and choose the format with "
                                  "weights_format= or QLoRA(...)")


def _sub_config(config: dict, key: str):
    value = config.get(key)
    if value is not None and not isinstance(value, dict):
        raise validate.FieldError(key, f"config field {key!r} must be an object ({{...}}); got "
                                  f"{validate.describe(value)}")
    return value


def _text_config(config: dict, spec: _Wrapper, model_type: str, notes: list) -> tuple[dict, str]:
    """(the text config as transformers builds it, every field the text reader reads, its model_type)."""
    given = _sub_config(config, "text_config")
    if given is None and spec.flat_text:
        text = {k: config[k] for k in _QWEN_FLAT_TEXT if k in config}  # Qwen2VLConfig.__post_init__
    elif given is None:
        text = dict(spec.text_init)
        notes.append(Note("text_config_default", f"the config has no text_config: transformers' default one for "
                          f"{model_type} ({spec.text_type}) is counted"))
    else:
        text = dict(given)
    text_type = text.get("model_type") or spec.text_type
    if text_type not in spec.text_types:
        raise validate.FieldError("text_config.model_type", f"config field 'text_config.model_type' "
                                  f"{validate.describe(text_type)} inside {model_type}: memmath reads "
                                  f"{', '.join(spec.text_types)} there")
    for key, value in TEXT_DEFAULTS[text_type].items():
        text.setdefault(key, value)
    if text_type in _READER:
        # Qwen2VLAttention / Qwen2_5_VLAttention: head_dim = hidden_size // num_attention_heads, whatever the config.
        h, a = text["hidden_size"], text["num_attention_heads"]
        if text.get("head_dim") not in (None, h // a if isinstance(h, int) and isinstance(a, int) and a else None):
            raise validate.FieldError("text_config.head_dim", f"config field 'text_config.head_dim' is "
                                      f"{validate.describe(text['head_dim'])}; {spec.cls}'s attention uses hidden_size "
                                      "// num_attention_heads, which memmath models (leave head_dim out)")
        text.pop("head_dim", None)
    return text, text_type


def _vision_config(config: dict, spec: _Wrapper, model_type: str, notes: list) -> tuple[dict, str]:
    """(every parameter-shaping field of the vision config, its model_type)."""
    given = _sub_config(config, "vision_config")
    if given is None:
        raw = dict(spec.vision_init)
        notes.append(Note("vision_config_default", f"the config has no vision_config: transformers' default one for "
                          f"{model_type} ({spec.towers[0]}) is counted"))
    else:
        raw = given
    if model_type in ("qwen2_vl", "qwen2_5_vl"):
        tower = spec.towers[0]  # a fixed config class (Qwen2VLVisionConfig): the model_type it carries is not read
    else:
        tower = raw.get("model_type") or spec.towers[0]  # AutoConfig: the given model_type, else the spec's default
    if tower not in spec.towers:
        raise validate.FieldError("vision_config.model_type", f"config field 'vision_config.model_type' "
                                  f"{validate.describe(raw.get('model_type'))} inside {model_type}: memmath models the "
                                  f"{', '.join(spec.towers)} tower{'s' if len(spec.towers) > 1 else ''} there")
    read = _Reader(raw, "vision_config", VISION_DEFAULTS[tower], _ALIASES.get(tower))
    fields = {}
    for key, default in VISION_DEFAULTS[tower].items():
        if isinstance(default, bool):
            fields[key] = read.flag(key, default)
        else:  # whole numbers, as the config classes type them (Qwen2VLVisionConfig's mlp_ratio too)
            blocks = key in ("num_hidden_layers", "depth")  # as many as a language model may have
            fields[key] = read.count(key, default, high=validate.MAX_LAYERS if blocks else validate.MAX_DIM)
    if tower in ("siglip_vision_model", "clip_vision_model") and fields["hidden_size"] % fields["num_attention_heads"]:
        # SiglipAttention / CLIPAttention raise unless the heads divide the width.
        raise validate.FieldError("vision_config.num_attention_heads", f"config field 'vision_config.num_attention_heads' "
                                  f"({fields['num_attention_heads']}) must divide vision_config.hidden_size "
                                  f"({fields['hidden_size']})")
    return fields, tower


def _window_fields(config: dict, tower: str, vision: dict) -> dict:
    """Qwen2.5-VL's window attention (Qwen2_5_VLVisionConfig: window_size 112, fullatt_block_indexes (7, 15, 23, 31),
    hidden_act "silu"), a SigLIP tower's activation and attention dropout and a Qwen2-VL tower's activation (what they
    save when they train), and a
    Pixtral tower's activations and feature layer (PixtralVisionConfig hidden_act "gelu";
    Mistral3Config vision_feature_layer -1, LlavaConfig -2 and vision_feature_select_strategy "default";
    projector_hidden_act "gelu"), which shape their forward's memory: {} for the other towers."""
    raw = _sub_config(config, "vision_config") or {}
    if tower == "siglip_vision_model":  # SiglipVisionConfig: hidden_act "gelu_pytorch_tanh", attention_dropout 0.0
        dropout = raw.get("attention_dropout")
        dropout = 0.0 if dropout is None else dropout
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise validate.FieldError("vision_config.attention_dropout", "config field 'vision_config.attention_dropout'"
                                      f" must be a probability in [0, 1); got {validate.describe(dropout)}")
        return dict(act=_string(raw, "hidden_act", "gelu_pytorch_tanh", "vision_config."),
                    attention_dropout=float(dropout))
    if tower == "qwen2_vl_vision":  # Qwen2VLVisionConfig: hidden_act "quick_gelu" (what a tower that trains saves)
        return dict(act=_string(raw, "hidden_act", "quick_gelu", "vision_config."))
    if tower == "pixtral":  # Mistral3Config's vision_feature_layer -1; LlavaConfig's -2 and its "default" selection
        mistral3 = config.get("model_type") == "mistral3"
        layer = config.get("vision_feature_layer", -1 if mistral3 else -2)
        return dict(act=_string(raw, "hidden_act", "gelu", "vision_config."), projector_act=_string(
            config, "projector_hidden_act", "gelu", ""), feature_layer=layer if type(layer) is int else None,
            select="" if mistral3 else _string(config, "vision_feature_select_strategy", "default", ""))
    if tower != "qwen2_5_vl_vision":
        return {}
    read = _Reader(raw, "vision_config", dict(window_size=112))
    # vision_utils.get_vision_window_index divides by window_size // spatial_merge_size // patch_size
    window = read.count("window_size", 112, low=vision["spatial_merge_size"] * vision["patch_size"])
    full = raw.get("fullatt_block_indexes")
    full = (7, 15, 23, 31) if full is None else full
    if not isinstance(full, (list, tuple)) or any(isinstance(i, bool) or not isinstance(i, int) for i in full):
        raise validate.FieldError("vision_config.fullatt_block_indexes", "config field "
                                  "'vision_config.fullatt_block_indexes' must be a list of block indexes; got "
                                  f"{validate.describe(full)}")
    return dict(window=window, full_blocks=tuple(full), act=_string(raw, "hidden_act", "silu", "vision_config."))


def _string(config: dict, key: str, default: str, where: str) -> str:
    value = config.get(key)
    value = default if value is None else value
    if not isinstance(value, str):
        raise validate.FieldError(f"{where}{key}", f"config field '{where}{key}' must be a string; got "
                                  f"{validate.describe(value)}")
    return value


def _tie(config: dict, spec: _Wrapper, text: dict, notes: list, model_type: str) -> bool:
    top = _Reader(config, "", {})
    tie = top.flag("tie_word_embeddings", spec.tie_default)
    if spec.tie_from_text and not tie:
        # LlavaConfig / Qwen2VLConfig.__post_init__: tied when the text config ties.
        tie = _Reader(text, "text_config", {}).flag("tie_word_embeddings", False)
    if model_type == "mistral3" and config.get("tie_word_embeddings") is None:
        notes.append(Note("tied_by_default", "tie_word_embeddings is not in the config: Mistral3Config's default (true) "
                          "ties lm_head to the token embedding, as transformers 5.24 builds the model from this config "
                          "(from_config); a checkpoint that stores both matrices loads them untied (transformers' "
                          "tie_weights keeps both when they differ): give tie_word_embeddings false to count that"))
    return tie


def from_multimodal_config(config: dict, read_text):  # a models.ModelShape (models imports this module)
    """The ModelShape of a vision-language config.json (a dict): the language model, with `vision` (VisionParts).

    The language model is read by from_hf_config from text_config (Qwen2-VL's top-level text fields when it has
    none) with TEXT_DEFAULTS for the fields it omits; the tower from vision_config with VISION_DEFAULTS; the
    projector from the top-level fields (MULTIMODAL_FIELDS). A field memmath does not model raises a FieldError
    naming it by its path (text_config..., vision_config...); REFUSED_MODEL_TYPES are refused by name.
    read_text: the text reader (config_reader.from_hf_config, which calls this; passed in so that the records
    stay below the reader that reads them).
    """
    model_type = config.get("model_type")
    if model_type not in _WRAPPERS:
        _refuse(model_type)
    spec = _WRAPPERS[model_type]
    _check_top(config)
    notes: list = []
    text, text_type = _text_config(config, spec, model_type, notes)
    vision, tower = _vision_config(config, spec, model_type, notes)
    text["tie_word_embeddings"] = _tie(config, spec, text, notes, model_type)
    text["model_type"] = _READER.get(text_type, text_type)
    text.pop("_name_or_path", None)
    try:
        language = read_text(text)
    except (ValueError, TypeError) as error:  # the text reader names the field inside text_config
        raise validate.FieldError("text_config", f"text_config: {error}") from None
    embeddings, block, post, n_blocks = _TOWERS[tower](vision)
    projector = _projector(model_type, config, vision, language.hidden_size)
    top = _Reader(config, "", {})
    image_tokens = (top.count("mm_tokens_per_image", 256) if model_type == "gemma3"
                    else top.count("image_seq_length", 576) if model_type == "llava" else None)
    parts = VisionParts(model_type=model_type, tower=tower, text_type=text_type, n_blocks=n_blocks,
                        embeddings=tuple(embeddings), block=tuple(block), post=tuple(post),
                        projector=tuple(projector), image_tokens=image_tokens,
                        heads=vision.get("num_attention_heads", vision.get("num_heads", 0)),
                        **_window_fields(config, tower, vision))
    name = config.get("_name_or_path")
    if name is not None and not isinstance(name, str):
        raise validate.FieldError("_name_or_path", f"config field '_name_or_path' must be a string; got a "
                                  f"{type(name).__name__}")
    name = name or model_type
    notes.insert(0, Note("vision_parts", parts.describe()))
    return replace(language, name=name[:200], vision=parts, notes=tuple(language.notes) + tuple(notes))


def activations_note(shape, vision: str = "frozen") -> Note:  # shape: a models.ModelShape
    """What the activations of a vision-language model count, as a Note (kind vision_activations_not_counted);
    vision: the method's vision= setting."""
    parts = shape.vision
    tokens = (f" ({parts.image_tokens} per image here)" if parts.image_tokens else "")
    why = ("with both frozen, backward saves none of theirs" if vision == "frozen" else
           "what backward saves of the part that trains here is left out of the sum of the parts; the requirement's "
           "upper bound counts it where memmath bounds the step: a projector under full finetuning over a tower "
           "whose forward it models, or Gemma 3's SigLIP tower or Qwen2-VL's")
    return Note("vision_activations_not_counted", f"activations: the language model's, over seq_len tokens with the "
                f"image tokens among them{tokens}; the {parts.label} vision tower's and the projector's activations "
                f"are not counted ({why})")


@frozen
class VisionParts(VisionTensors):
    """A vision-language model's tower and projector (VisionTensors), with what the wrapper's tables say of them:
    the tower's name, what trains under a method's vision= setting, and peft's target names."""

    @property
    def label(self) -> str:
        """The tower's family in words: SigLIP, CLIP, Pixtral, Qwen2-VL, Qwen2.5-VL."""
        return TOWER_LABELS.get(self.tower, self.tower)

    def linear_modules(self, component: str | None = None) -> list[str]:
        """The nn.Linear modules of the tower (component "vision_tower") and/or the projector, by name."""
        return [t.name.removesuffix(".weight") for t in self.tensor_list if t.linear
                and (component is None or t.component == component)]

    def describe(self) -> str:
        """One line: what was counted, part by part."""
        return (f"counted: the {self.label} vision tower ({self.n_blocks} blocks, {self.tower_params:,} parameters) "
                f"and the projector ({self.projector_params:,}), as transformers' {_WRAPPERS[self.model_type].cls} "
                "builds them, with the language model")

    def trainable(self, vision: str) -> list[ParamTensor]:
        """The tensors that train under a method's vision= setting (VISION_CHOICES)."""
        vision = validate.choice("vision", vision, VISION_CHOICES)
        if vision == "trains":
            return self.tensors()
        if vision == "projector":
            return list(self.projector)
        return []

    def trainable_note(self, vision: str) -> Note:
        """What of the tower and projector trains under vision=, as a Note (kind vision_trainable)."""
        tower = f"the vision tower ({self.label}, {self.tower_params:,} parameters)"
        projector = f"the projector ({self.projector_params:,})"
        kept = "their weights are counted, with no gradients or optimizer states"
        text = {
            "trains": f"{tower} and {projector} train with the language model: gradients and optimizer states for "
                      "both (vision='trains'; vision='frozen' trains the language model only)",
            "projector": f"{projector} trains; {tower} is frozen: its weights are counted, with no gradients or "
                         "optimizer states (vision='projector')",
            "frozen": f"{tower} and {projector} are frozen: {kept} (vision='frozen')",
        }[validate.choice("vision", vision, VISION_CHOICES)]
        return Note("vision_trainable", text)

    def peft_name_overlap(self, modules) -> list[str]:
        """Linear modules of the tower and projector that peft's plain target names `modules` (suffixes such as
        "q_proj") would also adapt: peft matches a name against the end of every module's path."""
        wanted = set(modules)
        return sorted({name.rsplit(".", 1)[-1] for name in self.linear_modules() if name.rsplit(".", 1)[-1] in wanted})

"""Measure the working memory of a frozen vision tower's forward on the CPU: the most its forward allocates at one
moment over what was alive when it started, for tiny Qwen2-VL, Gemma 3 and LLaVA models built from config objects
written here (nothing comes from a model hub); and whole training steps of such models whose language model trains.
Each command prints JSON lines; validation/vision_forward_*.jsonl hold them as recorded (tests/test_vision_forward.py
reads them).

    python -m validation.vision_forward            # every case, printed as JSON lines
    python -m validation.vision_forward --held-out # the cases recorded after memmath/vision_forward.py was written
    python -m validation.vision_forward --steps    # whole training steps whose tower's forward holds the peak
    python -m validation.vision_forward --steps --held-out   # those recorded after the decision counted the tower
    python -m validation.vision_forward --llava    # whole LLaVA steps
    python -m validation.vision_forward --clip     # LLaVA's CLIP tower alone (with --held-out: those held out)
    python -m validation.vision_forward --qwen2-5  # whole Qwen2.5-VL steps (with --held-out: those held out)
    python -m validation.vision_forward --qwen2-5-tower  # Qwen2.5-VL's tower alone (with --held-out: those held out)
    python -m validation.vision_forward --pixtral  # Mistral3's Pixtral tower alone (with --held-out: those held out)
    python -m validation.vision_forward --llava-pixtral  # LLaVA's Pixtral tower alone (--held-out: those held out)
    python -m validation.vision_forward --mistral3  # whole Mistral3 steps (with --held-out: those held out)
    python -m validation.vision_forward --llava-pixtral-steps  # whole steps of LLaVA around Pixtral (--held-out too)
    python -m validation.vision_forward --training # whole steps whose projector or tower trains
    python -m validation.vision_forward --training --held-out  # those recorded after the projector's bound

The tower and projector are frozen (requires_grad False) and the pixels need no gradient, so autograd records
nothing in the tower, as in a training step whose language model alone trains: the measurement calls the model's
get_image_features (transformers 5.24), the tower and the projector, with gradients enabled. The profiler's
allocation events (torch.profiler, profile_memory=True) give the highest net allocation inside that call over the
allocation when it began; the pixels exist before (the batch). A whole step is memmath.stepping.step_twice's two
steps of AdamW (peak_bytes: the second step's peak, the profiler's over what was alive before the first).
"""

from __future__ import annotations

import argparse
import json
import sys

# (tower, attention, dtype, images or image grids, sizes): the cases seen while the model was written ...
CASES = [
    ("qwen2_vl", "eager", "float32", [(1, 8, 8)], dict(embed_dim=32, num_heads=4)),
    ("qwen2_vl", "eager", "bfloat16", [(1, 8, 8)], dict(embed_dim=32, num_heads=4)),
    ("qwen2_vl", "sdpa", "float32", [(1, 8, 8)], dict(embed_dim=32, num_heads=4)),
    ("qwen2_vl", "sdpa", "bfloat16", [(1, 8, 8)], dict(embed_dim=32, num_heads=4)),
    ("qwen2_vl", "eager", "bfloat16", [(1, 16, 16), (1, 8, 4)], dict(embed_dim=64, num_heads=4)),
    ("qwen2_vl", "sdpa", "bfloat16", [(1, 16, 16), (1, 8, 4)], dict(embed_dim=64, num_heads=4)),
    ("gemma3", "eager", "float32", 1, dict(hidden_size=32, num_attention_heads=4, image_size=112, patch_size=14)),
    ("gemma3", "eager", "bfloat16", 1, dict(hidden_size=32, num_attention_heads=4, image_size=112, patch_size=14)),
    ("gemma3", "sdpa", "float32", 1, dict(hidden_size=32, num_attention_heads=4, image_size=112, patch_size=14)),
    ("gemma3", "sdpa", "bfloat16", 1, dict(hidden_size=32, num_attention_heads=4, image_size=112, patch_size=14)),
    ("gemma3", "eager", "bfloat16", 3, dict(hidden_size=64, num_attention_heads=2, image_size=224, patch_size=14)),
    ("gemma3", "sdpa", "bfloat16", 3, dict(hidden_size=64, num_attention_heads=2, image_size=224, patch_size=14)),
]
# LLaVA's CLIP tower (its second-to-last layer's patches, as LlavaConfig's defaults choose), recorded before memmath
# modelled it.
CASES_CLIP = [
    ("llava", "eager", "bfloat16", 2, dict(hidden_size=64, num_attention_heads=2)),
    ("llava", "sdpa", "float32", 1, dict(hidden_size=128, num_attention_heads=4)),
    ("llava", "eager", "float32", 3, dict(hidden_size=32, num_attention_heads=4)),
    ("llava", "sdpa", "bfloat16", 2, dict(hidden_size=256, num_attention_heads=4)),
    ("llava", "sdpa", "bfloat16", 2, dict(hidden_size=128, num_attention_heads=2, text_hidden_size=512)),
]
# Qwen2.5-VL's tower (windows of 4 x 4 merged patches, 8 x 8 patches; config's fullatt_block_indexes [1] unless
# given): the cases seen while qwen2_5_vl_forward was written. (1, 8, 8) is one window; (1, 12, 20) and (1, 20, 12)
# cross windows (rows of 4 and 2 merged patches, columns of 4, 4 and 2).
CASES_QWEN2_5 = [
    ("qwen2_5_vl", "eager", "float32", [(1, 8, 8)], dict(hidden_size=32, num_heads=4)),
    ("qwen2_5_vl", "eager", "bfloat16", [(1, 8, 8)], dict(hidden_size=32, num_heads=4)),
    ("qwen2_5_vl", "sdpa", "float32", [(1, 8, 8)], dict(hidden_size=32, num_heads=4)),
    ("qwen2_5_vl", "sdpa", "bfloat16", [(1, 8, 8)], dict(hidden_size=32, num_heads=4)),
    ("qwen2_5_vl", "eager", "bfloat16", [(1, 12, 20), (1, 8, 4)], dict(hidden_size=64, num_heads=4)),
    ("qwen2_5_vl", "sdpa", "bfloat16", [(1, 12, 20), (1, 8, 4)], dict(hidden_size=64, num_heads=4)),
    ("qwen2_5_vl", "eager", "float32", [(1, 20, 12)], dict(hidden_size=64, num_heads=2, fullatt_block_indexes=[])),
    ("qwen2_5_vl", "sdpa", "float32", [(1, 16, 16), (1, 4, 12)], dict(hidden_size=128, num_heads=4,
                                                                        intermediate_size=64)),
    # a wide tower, whose blocks outweigh the pixels
    ("qwen2_5_vl", "eager", "bfloat16", [(1, 8, 8), (1, 4, 6)], dict(hidden_size=512, num_heads=8)),
    ("qwen2_5_vl", "sdpa", "bfloat16", [(1, 12, 8)], dict(hidden_size=384, num_heads=4, intermediate_size=1024)),
    # windows of 8 x 8 merged patches, every block windowed: the attention over the windows holds the peak
    ("qwen2_5_vl", "eager", "bfloat16", [(1, 20, 36)], dict(hidden_size=64, num_heads=8, window_size=224,
                                                            fullatt_block_indexes=[])),
    # the MLP's moment and the merger's
    ("qwen2_5_vl", "sdpa", "bfloat16", [(1, 8, 8)], dict(hidden_size=128, num_heads=4, intermediate_size=2048)),
    ("qwen2_5_vl", "sdpa", "bfloat16", [(1, 8, 8)], dict(hidden_size=32, num_heads=4, out_hidden_size=8192)),
]
# ... and those recorded after clip_forward was written (held out).
HELD_OUT_CLIP = [
    ("llava", "sdpa", "bfloat16", 2, dict(hidden_size=64, num_attention_heads=2, text_hidden_size=1024)),
    ("llava", "eager", "bfloat16", 3, dict(hidden_size=96, num_attention_heads=3)),
    ("llava", "sdpa", "float32", 1, dict(hidden_size=320, num_attention_heads=5, num_hidden_layers=2)),
]
# Mistral3's Pixtral tower (14 px patches, images padded to the largest in the batch, a block-diagonal mask over every
# image's patches) and its projector: the cases seen while pixtral_forward was written. Sizes are (height, width) in
# patches.
CASES_PIXTRAL = [
    ("mistral3", "eager", "float32", [(8, 8)], dict(hidden_size=32, num_attention_heads=4)),
    ("mistral3", "eager", "bfloat16", [(8, 8)], dict(hidden_size=32, num_attention_heads=4)),
    ("mistral3", "sdpa", "float32", [(8, 8)], dict(hidden_size=32, num_attention_heads=4)),
    ("mistral3", "sdpa", "bfloat16", [(8, 8)], dict(hidden_size=32, num_attention_heads=4)),
    ("mistral3", "eager", "float32", [(8, 6), (4, 10)], dict(hidden_size=32, num_attention_heads=4,
                                                           num_hidden_layers=3)),
    ("mistral3", "sdpa", "bfloat16", [(8, 6), (4, 10)], dict(hidden_size=64, num_attention_heads=4)),
    ("mistral3", "eager", "bfloat16", [(12, 12)], dict(hidden_size=128, num_attention_heads=8)),
    ("mistral3", "sdpa", "bfloat16", [(6, 6)], dict(hidden_size=256, num_attention_heads=4, intermediate_size=1024)),
    ("mistral3", "eager", "bfloat16", [(4, 4)], dict(hidden_size=32, num_attention_heads=2, text_hidden_size=2048)),
    ("mistral3", "sdpa", "float32", [(16, 16)], dict(hidden_size=32, num_attention_heads=2)),
    # the attention over two images in the third layer; the CPU flash kernel's scratch beside the mask over 1,024
    # patches (a narrow MLP); the projector's GELU over a wide text model
    ("mistral3", "eager", "bfloat16", [(8, 6), (4, 10)], dict(hidden_size=32, num_attention_heads=8,
                                                            num_hidden_layers=3)),
    ("mistral3", "sdpa", "bfloat16", [(32, 32)], dict(hidden_size=16, num_attention_heads=2, intermediate_size=16)),
    ("mistral3", "eager", "bfloat16", [(4, 2)], dict(hidden_size=32, num_attention_heads=2, text_hidden_size=4096)),
    # silu in the tower's MLP, as Mistral-Small-3.1's vision_config has it
    ("mistral3", "sdpa", "bfloat16", [(6, 6)], dict(hidden_size=256, num_attention_heads=4, intermediate_size=1024,
                                                    hidden_act="silu")),
]
# LLaVA's wrapper around a Pixtral tower (8 x 8 patches a 112 px image; LlavaConfig's vision_feature_layer -2 and
# "default" selection unless given): the cases seen while pixtral_forward's LLaVA projector was written.
CASES_LLAVA_PIXTRAL = [
    ("llava", "eager", "bfloat16", 1, dict(hidden_size=32, num_attention_heads=4, model_type="pixtral")),
    ("llava", "sdpa", "float32", 2, dict(hidden_size=64, num_attention_heads=4, model_type="pixtral")),
    ("llava", "eager", "bfloat16", 1, dict(hidden_size=32, num_attention_heads=2, model_type="pixtral",
                                           text_hidden_size=2048)),
    ("llava", "sdpa", "bfloat16", 2, dict(hidden_size=32, num_attention_heads=2, model_type="pixtral",
                                          text_hidden_size=1024, vision_feature_layer=-1,
                                          vision_feature_select_strategy="full")),
    ("llava", "eager", "float32", 1, dict(hidden_size=32, num_attention_heads=2, model_type="pixtral",
                                          num_hidden_layers=1, text_hidden_size=1024)),
]
# ... and those recorded after qwen2_5_vl_forward was written (held out).
HELD_OUT_QWEN2_5 = [
    ("qwen2_5_vl", "eager", "bfloat16", [(1, 28, 16)], dict(hidden_size=96, num_heads=6, depth=3,
                                                            fullatt_block_indexes=[0, 2])),
    ("qwen2_5_vl", "sdpa", "float32", [(1, 6, 30), (1, 10, 10)], dict(hidden_size=160, num_heads=5,
                                                                        intermediate_size=320)),
    ("qwen2_5_vl", "eager", "float32", [(2, 8, 12)], dict(hidden_size=64, num_heads=4)),  # two frames
    ("qwen2_5_vl", "sdpa", "bfloat16", [(1, 16, 24)], dict(hidden_size=256, num_heads=4, window_size=168,
                                                           fullatt_block_indexes=[])),
    ("qwen2_5_vl", "eager", "bfloat16", [(1, 4, 4), (1, 12, 12), (1, 8, 16)],
     dict(hidden_size=128, num_heads=8, intermediate_size=256, out_hidden_size=512)),
    ("qwen2_5_vl", "sdpa", "bfloat16", [(1, 8, 8)], dict(hidden_size=768, num_heads=12, intermediate_size=2048)),
    ("qwen2_5_vl", "eager", "bfloat16", [(1, 24, 24)], dict(hidden_size=64, num_heads=16, window_size=336,
                                                            fullatt_block_indexes=[])),
]
# ... and those recorded after pixtral_forward was written (held out).
HELD_OUT_PIXTRAL = [
    ("mistral3", "eager", "bfloat16", [(10, 14), (12, 8)], dict(hidden_size=48, num_attention_heads=4)),
    ("mistral3", "sdpa", "float32", [(20, 20)], dict(hidden_size=64, num_attention_heads=4, intermediate_size=64)),
    ("mistral3", "eager", "float32", [(6, 10), (6, 10), (4, 4)], dict(hidden_size=96, num_attention_heads=8,
                                                                       intermediate_size=192)),
    ("mistral3", "sdpa", "bfloat16", [(28, 30)], dict(hidden_size=32, num_attention_heads=2, intermediate_size=32)),
    ("mistral3", "eager", "bfloat16", [(6, 6)], dict(hidden_size=512, num_attention_heads=8, intermediate_size=1536,
                                                     num_hidden_layers=1)),
    ("mistral3", "sdpa", "bfloat16", [(10, 6), (8, 8)], dict(hidden_size=128, num_attention_heads=4,
                                                             text_hidden_size=256, hidden_act="silu")),
    ("mistral3", "eager", "float32", [(5, 7)], dict(hidden_size=64, num_attention_heads=4)),
]
# ... and those recorded after pixtral_forward's LLaVA projector was written (held out).
HELD_OUT_LLAVA_PIXTRAL = [
    ("llava", "eager", "float32", 3, dict(hidden_size=48, num_attention_heads=4, model_type="pixtral",
                                          image_size=168, text_hidden_size=256)),
    ("llava", "sdpa", "bfloat16", 2, dict(hidden_size=96, num_attention_heads=4, model_type="pixtral",
                                          image_size=224, vision_feature_layer=-1,
                                          vision_feature_select_strategy="full")),
    ("llava", "eager", "bfloat16", 1, dict(hidden_size=256, num_attention_heads=8, model_type="pixtral",
                                           intermediate_size=512, hidden_act="silu", num_hidden_layers=2)),
]
# ... and the cases measured only after it was written (held out).
HELD_OUT = [
    ("qwen2_vl", "eager", "bfloat16", [(1, 12, 20), (1, 6, 6)], dict(embed_dim=48, num_heads=6, depth=3)),
    ("qwen2_vl", "sdpa", "float32", [(1, 20, 12)], dict(embed_dim=96, num_heads=2, depth=1)),
    ("gemma3", "eager", "bfloat16", 2, dict(hidden_size=48, num_attention_heads=3, image_size=168, patch_size=14)),
    ("gemma3", "sdpa", "float32", 2, dict(hidden_size=96, num_attention_heads=2, image_size=196, patch_size=14)),
    # wide towers, whose blocks outweigh the pixels: the rotary, attention and MLP moments
    ("qwen2_vl", "sdpa", "bfloat16", [(1, 8, 8), (1, 4, 6)], dict(embed_dim=512, num_heads=8)),
    ("qwen2_vl", "sdpa", "float32", [(1, 8, 8)], dict(embed_dim=384, num_heads=4, mlp_ratio=2)),
    ("qwen2_vl", "eager", "bfloat16", [(1, 6, 8)], dict(embed_dim=512, num_heads=2)),
    ("gemma3", "sdpa", "bfloat16", 2, dict(hidden_size=512, num_attention_heads=8, image_size=56, patch_size=14)),
    ("gemma3", "eager", "float32", 1, dict(hidden_size=384, num_attention_heads=4, image_size=84, patch_size=14)),
    # recorded after the proj moment was added to the model
    ("qwen2_vl", "eager", "float32", [(1, 4, 4), (1, 10, 6), (1, 2, 8)], dict(embed_dim=256, num_heads=4)),
    ("qwen2_vl", "sdpa", "bfloat16", [(1, 6, 6), (1, 8, 8)], dict(embed_dim=320, num_heads=5, mlp_ratio=1)),
    ("qwen2_vl", "sdpa", "float32", [(1, 4, 8)], dict(embed_dim=640, num_heads=10, depth=1, mlp_ratio=3)),
    ("gemma3", "eager", "bfloat16", 2, dict(hidden_size=320, num_attention_heads=5, image_size=112, patch_size=14)),
    ("gemma3", "sdpa", "float32", 3, dict(hidden_size=256, num_attention_heads=4, image_size=70, patch_size=14,
                                           num_hidden_layers=1)),
]


def config(tower: str, attention: str, sizes: dict) -> dict:
    """The vision-language config.json (a dict) of a tiny case: a 2-block language model and a small tower."""
    text = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=128, vocab_size=1000)
    if tower == "llava":  # a CLIP tower of 64 patches a 112 px image, a LLaMA language model (text_hidden_size wide)
        sizes = dict(sizes)
        text["hidden_size"] = sizes.pop("text_hidden_size", text["hidden_size"])
        top = {k: sizes.pop(k) for k in ("vision_feature_layer", "vision_feature_select_strategy") if k in sizes}
        vision = dict(dict(model_type="clip_vision_model", num_hidden_layers=3,
                           intermediate_size=4 * sizes["hidden_size"], image_size=112, patch_size=14), **sizes)
        return dict(model_type="llava", text_config=dict(text, model_type="llama"), vision_config=vision,
                    image_seq_length=(vision["image_size"] // vision["patch_size"]) ** 2, image_token_index=999,
                    attn_implementation=attention, **top)
    if tower == "mistral3":  # a Pixtral tower of 14 px patches, merged 2 x 2, a Mistral language model
        sizes = dict(sizes)
        text["hidden_size"] = sizes.pop("text_hidden_size", text["hidden_size"])
        vision = dict(dict(model_type="pixtral", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                           num_attention_heads=4, patch_size=14, image_size=224), **sizes)
        return dict(model_type="mistral3", text_config=dict(text, model_type="mistral", head_dim=16),
                    vision_config=vision, spatial_merge_size=2, image_token_index=999, vision_feature_layer=-1,
                    attn_implementation=attention)
    if tower == "qwen2_5_vl":  # windows of 4 x 4 merged patches (window_size 112 px), the second block full
        rope = dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])
        vision = dict(dict(depth=2, hidden_size=64, intermediate_size=128, out_hidden_size=64, num_heads=4,
                           patch_size=14, temporal_patch_size=2, spatial_merge_size=2, window_size=112,
                           fullatt_block_indexes=[1]), **sizes)
        return dict(model_type="qwen2_5_vl", text_config=dict(text, model_type="qwen2_5_vl_text", rope_parameters=rope),
                    vision_config=vision, attn_implementation=attention, image_token_id=999, video_token_id=998,
                    vision_start_token_id=997, vision_end_token_id=996)
    if tower == "qwen2_vl":
        vision = dict(dict(depth=2, mlp_ratio=4, hidden_size=64, patch_size=14, temporal_patch_size=2,
                           spatial_merge_size=2), **sizes)
        rope = dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])  # head_dim 16: 8 frequencies
        return dict(model_type="qwen2_vl", text_config=dict(text, model_type="qwen2_vl_text", rope_parameters=rope),
                    vision_config=vision,
                    attn_implementation=attention, image_token_id=999, video_token_id=998, vision_start_token_id=997,
                    vision_end_token_id=996)
    vision = dict(dict(model_type="siglip_vision_model", num_hidden_layers=2,
                       intermediate_size=4 * sizes["hidden_size"], vision_use_head=False), **sizes)
    patches = (sizes["image_size"] // sizes["patch_size"]) ** 2
    return dict(model_type="gemma3", text_config=dict(text, model_type="gemma3_text", head_dim=16),
                vision_config=vision, mm_tokens_per_image=patches // 4, attn_implementation=attention,
                image_token_index=999, boi_token_index=998, eoi_token_index=997)


class _Classes(dict):
    """tower -> (its ...ForConditionalGeneration, its config class), from transformers when first asked."""

    def __missing__(self, tower):
        import transformers

        name = {"qwen2_vl": "Qwen2VL", "qwen2_5_vl": "Qwen2_5_VL", "gemma3": "Gemma3", "llava": "Llava",
                "mistral3": "Mistral3"}[tower]
        return getattr(transformers, f"{name}ForConditionalGeneration"), getattr(transformers, f"{name}Config")


_CLASSES = _Classes()


def measure(tower: str, attention: str, dtype: str, images, sizes: dict) -> dict:
    """The tower's forward: its peak over the allocation when it began (bytes), and what it was given."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    raw = config(tower, attention, sizes)
    cls, config_cls = _CLASSES[tower]
    hf = config_cls(**raw)
    hf._attn_implementation = attention
    for sub in (hf.vision_config, hf.text_config):
        sub._attn_implementation = attention
    model = cls(hf).to(getattr(torch, dtype)).train()
    for p in model.parameters():  # a frozen tower and projector (the language model's do not run here)
        p.requires_grad_(False)
    if tower in ("qwen2_vl", "qwen2_5_vl"):
        grid = torch.tensor(images)
        v = raw["vision_config"]
        pixels = torch.randn(int(grid.prod(-1).sum()), 3 * v["temporal_patch_size"] * v["patch_size"] ** 2)
        call = lambda: model.model.get_image_features(pixels, grid)  # noqa: E731
    elif tower == "mistral3":  # images of (height, width) patches, padded to the largest (the processor's batch)
        p = raw["vision_config"]["patch_size"]
        sizes_px = torch.tensor([(h * p, w * p) for h, w in images])
        pixels = torch.zeros(len(images), 3, int(sizes_px[:, 0].max()), int(sizes_px[:, 1].max()))
        for i, (h, w) in enumerate(sizes_px.tolist()):
            pixels[i, :, :h, :w] = torch.randn(3, h, w)
        call = lambda: model.model.get_image_features(pixels, sizes_px, vision_feature_layer=-1)  # noqa: E731
    elif tower == "llava":  # LlavaConfig's defaults: the second-to-last layer's patches, the class token dropped
        s = raw["vision_config"]["image_size"]
        pixels = torch.randn(images, 3, s, s)
        layer, select = raw.get("vision_feature_layer", -2), raw.get("vision_feature_select_strategy", "default")
        call = lambda: model.model.get_image_features(pixels, vision_feature_layer=layer,  # noqa: E731
                                                      vision_feature_select_strategy=select)
    else:
        s = raw["vision_config"]["image_size"]
        pixels = torch.randn(images, 3, s, s)  # the processor's fp32 pixels
        call = lambda: model.model.get_image_features(pixels)  # noqa: E731
    with torch.enable_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("tower"):
            out = call()
        del out
    events = prof.profiler.kineto_results.events()
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    lo, hi = next((e.start_ns(), e.end_ns()) for e in events if e.name() == "tower")
    running = start = peak = 0
    for when, delta in memory:
        if when < lo:
            start = running + delta
        running += delta
        if lo <= when <= hi:
            peak = max(peak, running)
    return dict(tower=tower, attention=attention, dtype=dtype, images=images, sizes=sizes,
                pixel_bytes=pixels.numel() * pixels.element_size(), working_peak_bytes=peak - start)


# Whole training steps (validation/measure.py's loop: two steps of AdamW, the language model training, the tower and
# projector frozen), every token of each sequence an image token: (tower, attention, dtype, sizes, batch, seq_len).
STEP_CASES = [
    ("qwen2_vl", "eager", "bfloat16", dict(embed_dim=256, num_heads=4), 2, 16),
    ("qwen2_vl", "sdpa", "float32", dict(embed_dim=384, num_heads=4), 1, 25),
    ("gemma3", "eager", "bfloat16", dict(hidden_size=256, num_attention_heads=4, image_size=112, patch_size=14), 2, 32),
    ("gemma3", "sdpa", "float32", dict(hidden_size=384, num_attention_heads=4, image_size=112, patch_size=14), 1, 32),
]
# LLaVA (CLIP, whose forward memmath does not model): recorded when the decision added a batch's pixels to its bound.
STEP_CASES_LLAVA = [
    ("llava", "sdpa", "bfloat16", dict(hidden_size=256, num_attention_heads=4), 2, 128),
    ("llava", "eager", "float32", dict(hidden_size=384, num_attention_heads=4), 1, 128),
]
# ... and LLaVA steps recorded after clip_forward was written (held out).
STEP_HELD_OUT_LLAVA = [
    ("llava", "eager", "bfloat16", dict(hidden_size=320, num_attention_heads=4), 1, 192),
    ("llava", "sdpa", "float32", dict(hidden_size=128, num_attention_heads=2, text_hidden_size=256), 2, 64),
]
# Qwen2.5-VL (its tower's forward is not modelled; the bound holds its pixels): recorded after the decision held them.
STEP_CASES_QWEN2_5 = [
    ("qwen2_5_vl", "sdpa", "bfloat16", dict(hidden_size=32, num_heads=2, intermediate_size=64), 2, 16),
    ("qwen2_5_vl", "eager", "float32", dict(hidden_size=256, num_heads=4, intermediate_size=512), 1, 16),
]
# ... and Qwen2.5-VL steps recorded after qwen2_5_vl_forward was written (held out).
STEP_HELD_OUT_QWEN2_5 = [
    ("qwen2_5_vl", "eager", "bfloat16", dict(hidden_size=64, num_heads=16, intermediate_size=128), 1, 64),
    ("qwen2_5_vl", "sdpa", "float32", dict(hidden_size=512, num_heads=8, intermediate_size=1024), 2, 36),
    ("qwen2_5_vl", "eager", "float32", dict(hidden_size=128, num_heads=8, window_size=224,
                                            fullatt_block_indexes=[]), 1, 100),
]
# Mistral3 (Pixtral's tower): recorded while the decision was given its pixels and tower.
STEP_CASES_MISTRAL3 = [
    ("mistral3", "eager", "bfloat16", dict(hidden_size=64, num_attention_heads=16), 1, 64),
    ("mistral3", "sdpa", "float32", dict(hidden_size=256, num_attention_heads=4), 2, 16),
]
# LLaVA around a Pixtral tower, each patch a token (vision_feature_select_strategy "full"): recorded while the decision
# was given its pixels and tower.
STEP_CASES_LLAVA_PIXTRAL = [
    ("llava", "eager", "bfloat16", dict(hidden_size=64, num_attention_heads=8, model_type="pixtral",
                                        vision_feature_select_strategy="full"), 1, 128),
    ("llava", "sdpa", "float32", dict(hidden_size=128, num_attention_heads=4, model_type="pixtral",
                                      vision_feature_layer=-1, vision_feature_select_strategy="full"), 2, 64),
    ("llava", "eager", "bfloat16", dict(hidden_size=64, num_attention_heads=16, model_type="pixtral",
                                        vision_feature_select_strategy="full"), 1, 256),
]
# ... and those recorded after it (held out).
STEP_HELD_OUT_LLAVA_PIXTRAL = [
    ("llava", "sdpa", "bfloat16", dict(hidden_size=96, num_attention_heads=8, model_type="pixtral",
                                       vision_feature_select_strategy="full"), 2, 128),
    ("llava", "eager", "float32", dict(hidden_size=64, num_attention_heads=16, model_type="pixtral",
                                       vision_feature_layer=-1, vision_feature_select_strategy="full"), 1, 192),
]
# ... and Mistral3 steps recorded after pixtral_forward and its bound were written (held out).
STEP_HELD_OUT_MISTRAL3 = [
    ("mistral3", "sdpa", "bfloat16", dict(hidden_size=128, num_attention_heads=4, intermediate_size=256), 2, 25),
    ("mistral3", "eager", "float32", dict(hidden_size=96, num_attention_heads=8), 1, 36),
]
# A projector that trains, or the whole tower (method vision= "projector" or "trains"), which memmath judges on the
# sum of the parts: recorded to say how far that sum is from the step.
STEP_CASES_TRAINING = [
    ("qwen2_vl", "sdpa", "bfloat16", dict(embed_dim=256, num_heads=4), 2, 16, "projector"),
    ("qwen2_vl", "sdpa", "bfloat16", dict(embed_dim=256, num_heads=4), 2, 16, "trains"),
    ("gemma3", "sdpa", "bfloat16", dict(hidden_size=256, num_attention_heads=4, image_size=112, patch_size=14), 2, 32,
     "projector"),
    ("gemma3", "sdpa", "bfloat16", dict(hidden_size=256, num_attention_heads=4, image_size=112, patch_size=14), 2, 32,
     "trains"),
    # recorded while decision._projector_bound was written (a projector that trains under Full, fp32 and eager)
    ("qwen2_vl", "eager", "float32", dict(embed_dim=128, num_heads=2), 1, 16, "projector"),
    ("gemma3", "eager", "float32", dict(hidden_size=128, num_attention_heads=2, image_size=112, patch_size=14), 1, 32,
     "projector"),
    # recorded while the bound for a SigLIP tower that trains was written
    ("gemma3", "eager", "float32", dict(hidden_size=128, num_attention_heads=2, image_size=112, patch_size=14), 1, 32,
     "trains"),
    ("gemma3", "eager", "bfloat16", dict(hidden_size=64, num_attention_heads=4, image_size=224, patch_size=14,
                                         num_hidden_layers=4), 1, 128, "trains"),
    # recorded while LLaVA's projector over CLIP was counted
    ("llava", "sdpa", "bfloat16", dict(hidden_size=256, num_attention_heads=4), 2, 128, "projector"),
    ("llava", "eager", "float32", dict(hidden_size=128, num_attention_heads=2, text_hidden_size=256), 1, 64,
     "projector"),
    # recorded while Qwen2.5-VL's merger was counted
    ("qwen2_5_vl", "sdpa", "bfloat16", dict(hidden_size=32, num_heads=2, intermediate_size=64), 2, 16, "projector"),
    ("qwen2_5_vl", "eager", "float32", dict(hidden_size=256, num_heads=4, intermediate_size=512), 1, 16, "projector"),
    # recorded while Mistral3's projector and LLaVA's over Pixtral were counted
    ("mistral3", "eager", "bfloat16", dict(hidden_size=64, num_attention_heads=16), 1, 64, "projector"),
    ("mistral3", "sdpa", "float32", dict(hidden_size=256, num_attention_heads=4), 2, 16, "projector"),
    ("llava", "eager", "bfloat16", dict(hidden_size=64, num_attention_heads=8, model_type="pixtral",
                                        vision_feature_select_strategy="full"), 1, 128, "projector"),
    # recorded while the bound for a Qwen2-VL tower that trains was written
    ("qwen2_vl", "eager", "float32", dict(embed_dim=128, num_heads=2), 1, 16, "trains"),
    ("qwen2_vl", "eager", "bfloat16", dict(embed_dim=64, num_heads=4, depth=4), 2, 36, "trains"),
    # a Qwen2.5-VL tower that trains, whose saved tensors memmath does not count: its floor against the step
    ("qwen2_5_vl", "sdpa", "bfloat16", dict(hidden_size=256, num_heads=4, intermediate_size=512), 2, 16, "trains"),
]
# ... and steps whose projector trains recorded after decision._projector_bound was written (held out).
STEP_HELD_OUT_TRAINING = [
    ("qwen2_vl", "sdpa", "bfloat16", dict(embed_dim=320, num_heads=5), 3, 9, "projector"),
    ("qwen2_vl", "eager", "float32", dict(embed_dim=64, num_heads=4, depth=3), 1, 36, "projector"),
    ("gemma3", "sdpa", "bfloat16", dict(hidden_size=512, num_attention_heads=8, image_size=112, patch_size=14), 2, 16,
     "projector"),
    ("gemma3", "eager", "bfloat16", dict(hidden_size=192, num_attention_heads=3, image_size=84, patch_size=14), 1, 27,
     "projector"),
    # recorded after the bound took its moments apart and counted a SigLIP tower that trains
    ("gemma3", "sdpa", "float32", dict(hidden_size=96, num_attention_heads=2, image_size=196, patch_size=14), 1, 49,
     "trains"),
    ("gemma3", "sdpa", "bfloat16", dict(hidden_size=512, num_attention_heads=8, image_size=112, patch_size=14,
                                        num_hidden_layers=3), 2, 16, "trains"),
    ("gemma3", "eager", "bfloat16", dict(hidden_size=192, num_attention_heads=3, image_size=84, patch_size=14), 1, 27,
     "trains"),
    ("qwen2_vl", "sdpa", "float32", dict(embed_dim=192, num_heads=3), 2, 25, "projector"),
    ("gemma3", "sdpa", "float32", dict(hidden_size=320, num_attention_heads=5, image_size=112, patch_size=14), 1, 48,
     "projector"),
    # recorded after LLaVA's projector over CLIP was counted
    ("llava", "eager", "bfloat16", dict(hidden_size=320, num_attention_heads=4), 1, 192, "projector"),
    ("llava", "sdpa", "float32", dict(hidden_size=128, num_attention_heads=2, text_hidden_size=512), 2, 64,
     "projector"),
    # recorded after Qwen2.5-VL's merger was counted
    ("qwen2_5_vl", "eager", "bfloat16", dict(hidden_size=64, num_heads=16, intermediate_size=128), 1, 64, "projector"),
    ("qwen2_5_vl", "sdpa", "float32", dict(hidden_size=128, num_heads=8, window_size=224, fullatt_block_indexes=[]),
     2, 36, "projector"),
    # recorded after Mistral3's projector and LLaVA's over Pixtral were counted
    ("mistral3", "sdpa", "bfloat16", dict(hidden_size=128, num_attention_heads=4, intermediate_size=256), 2, 25,
     "projector"),
    ("mistral3", "eager", "float32", dict(hidden_size=96, num_attention_heads=8), 1, 36, "projector"),
    ("llava", "sdpa", "float32", dict(hidden_size=128, num_attention_heads=4, model_type="pixtral",
                                      vision_feature_layer=-1, vision_feature_select_strategy="full"), 2, 64,
     "projector"),
    # recorded after the bound counted a Qwen2-VL tower that trains
    ("qwen2_vl", "sdpa", "bfloat16", dict(embed_dim=320, num_heads=5), 3, 9, "trains"),
    ("qwen2_vl", "sdpa", "float32", dict(embed_dim=96, num_heads=2, depth=3, mlp_ratio=2), 1, 36, "trains"),
    ("qwen2_vl", "eager", "bfloat16", dict(embed_dim=128, num_heads=8), 1, 64, "trains"),
]
# ... and whole steps recorded after the decision counted the tower's forward (held out).
STEP_HELD_OUT = [
    ("qwen2_vl", "sdpa", "bfloat16", dict(embed_dim=320, num_heads=5), 3, 9),
    ("qwen2_vl", "eager", "float32", dict(embed_dim=128, num_heads=2, depth=3), 1, 36),
    ("gemma3", "eager", "float32", dict(hidden_size=192, num_attention_heads=3, image_size=84, patch_size=14), 1, 27),
    ("gemma3", "sdpa", "bfloat16", dict(hidden_size=512, num_attention_heads=8, image_size=112, patch_size=14), 2, 16),
]


def measure_step(tower: str, attention: str, dtype: str, sizes: dict, batch: int, seq_len: int,
                 vision: str = "frozen") -> dict:
    """Two training steps (memmath.stepping.step_twice on the CPU) of a tiny vision-language model whose language
    model trains and whose tower and projector are frozen, every token an image token: Qwen2-VL one image of
    4 x seq_len patches per sequence (Qwen2.5-VL and Mistral3 too), Gemma 3 seq_len / mm_tokens_per_image and LLaVA
    seq_len / image_seq_length images per sequence."""
    import torch

    from memmath.stepping import step_twice

    torch.manual_seed(0)
    raw = config(tower, attention, sizes)
    cls, config_cls = _CLASSES[tower]
    hf = config_cls(**raw)
    for sub in (hf, hf.vision_config, hf.text_config):
        sub._attn_implementation = attention
    model = cls(hf).to(getattr(torch, dtype)).train()
    qwen = tower in ("qwen2_vl", "qwen2_5_vl")
    tower_module = model.model.visual if qwen else model.model.vision_tower
    projector = model.model.visual.merger if qwen else model.model.multi_modal_projector
    frozen = {"frozen": [tower_module, projector], "projector": [tower_module], "trains": []}[vision]
    for module in frozen:
        for p in module.parameters():
            p.requires_grad_(False)
    for p in (projector.parameters() if vision == "projector" else ()):  # Qwen's merger sits inside its tower
        p.requires_grad_(True)
    ids = torch.full((batch, seq_len), hf.image_token_id, dtype=torch.long)
    inputs = dict(input_ids=ids, labels=ids.clone())
    if tower in ("qwen2_vl", "qwen2_5_vl"):
        side = 2 * int(seq_len ** 0.5)  # (side/2)^2 = seq_len merged tokens: one square image per sequence
        assert (side // 2) ** 2 == seq_len
        inputs["image_grid_thw"] = torch.tensor([(1, side, side)] * batch)
        inputs["pixel_values"] = torch.randn(batch * side * side, 3 * 2 * 14 * 14)
        inputs["mm_token_type_ids"] = torch.ones_like(ids, dtype=torch.int32)  # the processor's: 1 for an image token
    elif tower == "mistral3":  # one square image per sequence of 4 x seq_len patches (seq_len merged tokens)
        side = 2 * int(seq_len ** 0.5)
        assert (side // 2) ** 2 == seq_len
        patch = raw["vision_config"]["patch_size"]
        inputs["pixel_values"] = torch.randn(batch, 3, side * patch, side * patch)
        inputs["image_sizes"] = torch.tensor([(side * patch, side * patch)] * batch)
    else:
        images = batch * seq_len // raw.get("mm_tokens_per_image", raw.get("image_seq_length"))
        s = raw["vision_config"]["image_size"]
        inputs["pixel_values"] = torch.randn(images, 3, s, s)
        if raw["vision_config"]["model_type"] == "pixtral":  # the processor's image sizes, in pixels
            inputs["image_sizes"] = torch.tensor([(s, s)] * images)
        if tower == "gemma3":
            inputs["token_type_ids"] = torch.ones_like(ids)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    blocks = list(model.model.language_model.layers)
    result = step_twice(model, optimizer, inputs, blocks, mode="cpu")
    return dict(tower=tower, attention=attention, dtype=dtype, sizes=sizes, batch=batch, seq_len=seq_len,
                **({} if vision == "frozen" else {"vision": vision}), peak_bytes=result["peak_bytes"], peak_phase=result["peak_step2_phase"],
                resident_before_bytes=result["resident_before_bytes"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--held-out", action="store_true", help="the held-out cases only")
    parser.add_argument("--steps", action="store_true", help="whole training steps (STEP_CASES)")
    parser.add_argument("--llava", action="store_true", help="whole LLaVA training steps (STEP_CASES_LLAVA)")
    parser.add_argument("--clip", action="store_true", help="LLaVA's CLIP tower (CASES_CLIP)")
    parser.add_argument("--qwen2-5", action="store_true", help="whole Qwen2.5-VL training steps (STEP_CASES_QWEN2_5)")
    parser.add_argument("--qwen2-5-tower", action="store_true", help="Qwen2.5-VL's tower (CASES_QWEN2_5)")
    parser.add_argument("--pixtral", action="store_true", help="Mistral3's Pixtral tower (CASES_PIXTRAL)")
    parser.add_argument("--llava-pixtral", action="store_true", help="LLaVA's Pixtral tower (CASES_LLAVA_PIXTRAL)")
    parser.add_argument("--mistral3", action="store_true", help="whole Mistral3 training steps (STEP_CASES_MISTRAL3)")
    parser.add_argument("--llava-pixtral-steps", action="store_true",
                        help="whole steps of LLaVA around Pixtral (STEP_CASES_LLAVA_PIXTRAL)")
    parser.add_argument("--training", action="store_true", help="steps whose projector or tower trains")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False  # as validation/measure.py: no oneDNN pads, as on a GPU
    if args.mistral3 or args.llava_pixtral_steps:
        mistral3 = STEP_HELD_OUT_MISTRAL3 if args.held_out else STEP_CASES_MISTRAL3
        llava = STEP_HELD_OUT_LLAVA_PIXTRAL if args.held_out else STEP_CASES_LLAVA_PIXTRAL
        for case in (mistral3 if args.mistral3 else llava):
            print(json.dumps(measure_step(*case)), flush=True)
        return
    if args.qwen2_5 or args.training:
        qwen2_5 = STEP_HELD_OUT_QWEN2_5 if args.held_out else STEP_CASES_QWEN2_5
        training = STEP_HELD_OUT_TRAINING if args.held_out else STEP_CASES_TRAINING
        for case in (training if args.training else qwen2_5):
            print(json.dumps(measure_step(*case)), flush=True)
        return
    if args.steps or args.llava:
        llava = STEP_HELD_OUT_LLAVA if args.held_out else STEP_CASES_LLAVA
        for case in (llava if args.llava else STEP_HELD_OUT if args.held_out else STEP_CASES):
            print(json.dumps(measure_step(*case)), flush=True)
        return
    clip = HELD_OUT_CLIP if args.held_out else CASES_CLIP
    if args.qwen2_5_tower:
        clip = HELD_OUT_QWEN2_5 if args.held_out else CASES_QWEN2_5
    if args.pixtral or args.llava_pixtral:
        clip = {(True, False): CASES_PIXTRAL, (True, True): HELD_OUT_PIXTRAL, (False, False): CASES_LLAVA_PIXTRAL,
                (False, True): HELD_OUT_LLAVA_PIXTRAL}[args.pixtral, args.held_out]
    if args.clip or args.qwen2_5_tower or args.pixtral or args.llava_pixtral:
        cases = clip
    else:
        cases = HELD_OUT if args.held_out else CASES
    for case in cases:
        print(json.dumps(measure(*case)), flush=True)


if __name__ == "__main__":
    sys.exit(main())

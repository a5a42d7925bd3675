"""Vision-language configs (memmath/multimodal.py): the language model from text_config, the vision tower and the
projector, and training the language model alone.

Torch-free: every published config (validation/published_configs.py PUBLISHED_MULTIMODAL_CONFIGS) counted by hand
from its fields, part by part, with the formulas of transformers 5.24's modeling files written out below (not
memmath's builders), and the model cards' totals; the training parts of each vision= setting derived by hand; the
refusals, by name; the command line. Live (marked `live`, skipped without torch as tests/test_models.py does): each
...ForConditionalGeneration built from its config on the meta device, its tower, projector and language model
counted apart and its vision tensors compared name by name; LoRA counts against peft 0.21; QLoRA's weights against
bitsandbytes on the CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import memmath as mm
from memmath import validate
from validation.published_configs import PUBLISHED_MULTIMODAL_CONFIGS as CONFIGS
from validation.published_configs import PUBLISHED_MULTIMODAL_TOTALS as TOTALS

REPO = Path(__file__).resolve().parent.parent
GEMMA3_4B = CONFIGS["gemma-3-4b-it"]


# ---- counts by hand, from each config's fields --------------------------------------------------------------
def _get(config, key, default):
    value = config.get(key)
    return default if value is None else value


def _siglip(v):
    # modeling_siglip.py, SiglipVisionConfig defaults (768, 3072, 12 layers, 3 channels, 224 px, patch 16, head on)
    h, i, n = _get(v, "hidden_size", 768), _get(v, "intermediate_size", 3072), _get(v, "num_hidden_layers", 12)
    c, img, p = _get(v, "num_channels", 3), _get(v, "image_size", 224), _get(v, "patch_size", 16)
    block = 2 * h + 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h)  # ln1, q/k/v/out, ln2, fc1, fc2
    head = (h + 3 * h * h + 3 * h + h * h + h + 2 * h + (h * i + i) + (i * h + h)) if _get(v, "vision_use_head", True) else 0
    return (h * c * p * p + h) + (img // p) ** 2 * h + n * block + 2 * h + head


def _clip(v):
    # modeling_clip.py CLIPVisionModel, CLIPVisionConfig defaults (768, 3072, 12 layers, 224 px, patch 32)
    h, i, n = _get(v, "hidden_size", 768), _get(v, "intermediate_size", 3072), _get(v, "num_hidden_layers", 12)
    c, img, p = _get(v, "num_channels", 3), _get(v, "image_size", 224), _get(v, "patch_size", 32)
    block = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    return h + h * c * p * p + ((img // p) ** 2 + 1) * h + 2 * h + n * block + 2 * h


def _pixtral(v):
    # modeling_pixtral.py: patch_conv (no bias), ln_pre, per block two RMSNorms, gate/up/down, q/k/v/o (no biases)
    h, i, n = v["hidden_size"], v["intermediate_size"], v["num_hidden_layers"]
    return h * v["num_channels"] * v["patch_size"] ** 2 + h + n * (2 * h + 3 * h * i + 4 * h * h)


def _qwen2_vl(v):
    # modeling_qwen2_vl.py: Conv3d patches (no bias), LayerNorm blocks with fused qkv, proj, fc1, fc2 (biases)
    e, n, mlp = v["embed_dim"], v["depth"], int(v["embed_dim"] * v["mlp_ratio"])
    return e * 3 * v["temporal_patch_size"] * v["patch_size"] ** 2 + n * (
        4 * e + (3 * e * e + 3 * e) + (e * e + e) + (e * mlp + mlp) + (mlp * e + e))


def _qwen2_5_vl(v):
    # modeling_qwen2_5_vl.py: RMSNorm blocks, fused qkv and proj, gate/up/down, all with biases
    h, i, n = v["hidden_size"], v["intermediate_size"], v["depth"]
    return h * 3 * v["temporal_patch_size"] * v["patch_size"] ** 2 + n * (
        2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * (h * i + i) + (i * h + h))


def _merger(width, out, merge, layer_norm_bias):
    m = width * merge ** 2  # PatchMerger: ln_q, then mlp.0 (m -> m) and mlp.2 (m -> out), with biases
    return width * (2 if layer_norm_bias else 1) + (m * m + m) + (m * out + out)


def _decoder(t, *, tied, qkv_bias=False, qk_norm=False, sandwich=False):
    """A rotary decoder's count: embeddings, L blocks, the final norm and (untied) lm_head."""
    h, a, n, i, vocab = t["hidden_size"], t["num_attention_heads"], t["num_hidden_layers"], t["intermediate_size"], \
        t["vocab_size"]
    kv, d = t.get("num_key_value_heads") or a, t.get("head_dim") or h // a
    attention = 2 * h * a * d + 2 * h * kv * d + ((a + 2 * kv) * d if qkv_bias else 0) + (2 * d if qk_norm else 0)
    block = attention + 3 * h * i + (4 if sandwich else 2) * h
    return vocab * h * (1 if tied else 2) + h + n * block


def hand_counts(name):
    """(tower, projector, language model with lm_head) of a published config, by hand."""
    c = CONFIGS[name]
    v = c["vision_config"]
    if c["model_type"] == "gemma3":
        # Gemma3TextConfig defaults for what text_config omits: vocab 262,208, 8 heads, 4 kv heads, head_dim 256
        t = {"vocab_size": 262_208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
             **c["text_config"]}
        lm = _decoder(t, tied=True, qk_norm=True, sandwich=True)  # Gemma3Config ties lm_head by default
        return _siglip(v), v["hidden_size"] * t["hidden_size"] + v["hidden_size"], lm
    if c["model_type"] == "llava":
        # LlamaConfig defaults for what text_config omits: 4096 wide, 11008 MLP, 32 layers, 32 heads
        t = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
             **c["text_config"]}
        vh, th = v["hidden_size"], t["hidden_size"]
        return _clip(v), (vh * th + th) + (th * th + th), _decoder(t, tied=False)
    if c["model_type"] == "mistral3":
        t, vh = c["text_config"], v["hidden_size"]
        th, merge = t["hidden_size"], c["spatial_merge_size"]
        projector = vh + vh * merge ** 2 * vh + vh * th + th * th  # norm, merging_layer, linear_1, linear_2 (no bias)
        return _pixtral(v), projector, _decoder(t, tied=c.get("tie_word_embeddings", True))
    t = c  # Qwen2-VL / Qwen2.5-VL: the text fields at the top level
    lm = _decoder(t, tied=c["tie_word_embeddings"], qkv_bias=True)
    if c["model_type"] == "qwen2_vl":
        return _qwen2_vl(v), _merger(v["embed_dim"], v["hidden_size"], v["spatial_merge_size"], True), lm
    return _qwen2_5_vl(v), _merger(v["hidden_size"], v["out_hidden_size"], v["spatial_merge_size"], False), lm


@pytest.mark.parametrize("name", CONFIGS)
def test_counts_by_hand(name):
    shape = mm.from_hf_config(CONFIGS[name])
    tower, projector, language = hand_counts(name)
    assert (shape.vision.tower_params, shape.vision.projector_params) == (tower, projector)
    assert shape.n_params - shape.vision.n_params == language
    assert shape.n_params == tower + projector + language
    assert len(shape.tensors("vision")) == len(shape.vision.embeddings) + shape.vision.n_blocks * len(
        shape.vision.block) + len(shape.vision.post) + len(shape.vision.projector)


@pytest.mark.parametrize("name", CONFIGS)
def test_counts_are_near_the_model_cards(name):
    config = CONFIGS[name]
    if name.startswith("Mistral-Small"):  # the card counts the checkpoint, whose lm_head loads untied
        config = dict(config, tie_word_embeddings=False)
    assert abs(mm.from_hf_config(config).n_params / TOTALS[name] - 1) < 0.01


def test_gemma3_reads_the_text_config_with_transformers_defaults():
    # google/gemma-3-27b-it: the text_config has no vocab_size; Gemma3TextConfig's 262,208 applies.
    shape = mm.from_hf_config(CONFIGS["gemma-3-27b-it"])
    assert (shape.arch, shape.vocab_size, shape.hidden_size, shape.n_layers, shape.head_dim) == (
        "gemma3_text", 262_208, 5376, 62, 128)
    assert shape.tied_embeddings and shape.qk_norm == "head" and shape.norm_layout == "sandwich"
    assert shape.layer_types.count("full_attention") == 62 // 6 and shape.sliding_window == 1024
    assert shape.vision.tower == "siglip_vision_model" and shape.vision.n_blocks == 27
    assert shape.vision.tower_params == 416_866_032  # the Gemma 3 report's SigLIP encoder: 417M at every size
    small = mm.from_hf_config(GEMMA3_4B)
    assert (small.n_heads, small.n_kv_heads, small.head_dim) == (8, 4, 256)  # Gemma3TextConfig's defaults
    assert small.name == "gemma3" and [n.kind for n in small.notes] == ["vision_parts"]


def test_each_wrapper_reads_its_text_model():
    llava = mm.from_hf_config(CONFIGS["llava-1.5-7b-hf"])
    assert (llava.arch, llava.n_layers, llava.hidden_size, llava.intermediate_size, llava.vocab_size) == (
        "llama", 32, 4096, 11008, 32064)  # LlamaConfig's defaults, text_config's vocab_size
    assert not llava.tied_embeddings and llava.vision.image_tokens == 576
    qwen = mm.from_hf_config(CONFIGS["Qwen2-VL-7B-Instruct"])
    assert (qwen.arch, qwen.qkv_bias, qwen.vision.text_type, qwen.sliding_window) == (
        "qwen2", True, "qwen2_vl_text", None)  # use_sliding_window false
    assert mm.from_hf_config(CONFIGS["Qwen2.5-VL-3B-Instruct"]).tied_embeddings
    mistral = mm.from_hf_config(CONFIGS["Mistral-Small-3.1-24B-Instruct-2503"])
    assert mistral.tied_embeddings and mistral.head_dim == 128 and mistral.sliding_window is None
    assert "tied_by_default" in [n.kind for n in mistral.notes]  # Mistral3Config's default, said so
    assert not mm.from_hf_config(dict(CONFIGS["Mistral-Small-3.1-24B-Instruct-2503"],
                                      tie_word_embeddings=False)).tied_embeddings


def test_a_text_config_nested_or_flat_is_the_same_model():
    flat = CONFIGS["Qwen2.5-VL-7B-Instruct"]
    text_keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                 "vocab_size", "max_window_layers", "use_sliding_window", "sliding_window", "hidden_act")
    nested = {k: v for k, v in flat.items() if k not in text_keys}
    nested["text_config"] = {"model_type": "qwen2_5_vl_text", **{k: flat[k] for k in text_keys}}
    assert mm.from_hf_config(nested) == mm.from_hf_config(flat)
    assert mm.from_hf_config(json.dumps(nested)).n_params == 8_292_166_656


# ---- training: what trains under each vision= setting ------------------------------------------------------------
def _tensors(shape):
    return sum(len(shape.tensors(g)) * (shape.n_layers if g == "layer" else 1)
               for g in ("embeddings", "layer", "final_norm", "head", "vision"))


def test_full_finetuning_with_and_without_the_tower():
    # Pure bf16 with AdamW: weights, gradients and both moments 2 B each, and a 4-byte step per trainable tensor.
    shape = mm.from_hf_config(GEMMA3_4B)
    n, v = shape.n_params, shape.vision
    lm = n - v.n_params
    lm_tensors = _tensors(shape) - len(v.tensors())
    cases = {"trains": (n, _tensors(shape)), "projector": (lm + v.projector_params, lm_tensors + len(v.projector)),
             "frozen": (lm, lm_tensors)}
    for vision, (trainable, tensors) in cases.items():
        memory = mm.training_memory(shape, method=mm.Full(vision=vision), seq_len=None)
        assert memory.weights == 2 * n  # the tower's and projector's weights are always held
        assert (memory.trainable_params, memory.trainable_tensors) == (trainable, tensors)
        assert memory.gradients == 2 * trainable
        assert memory.optimizer_states == 2 * 2 * trainable + 4 * tensors
        assert "vision_trainable" in [note.kind for note in memory.notes]
    assert mm.Full().vision == "trains" and mm.LoRA().vision == "frozen" and mm.Freeze(1).vision == "frozen"


def test_training_the_language_model_only_with_lora():
    shape = mm.from_hf_config(CONFIGS["llava-1.5-7b-hf"])
    n, r, layers = shape.n_params, 16, shape.n_layers
    adapters = layers * r * (2 * (4096 + 4096))  # q and v, 4096 -> 4096 each: A r x d_in, B d_out x r
    memory = mm.training_memory(shape, method=mm.LoRA(rank=r), seq_len=None)
    assert memory.trainable_params == adapters and memory.weights == 2 * n + 4 * adapters  # fp32 adapters (peft)
    assert memory.gradients == 4 * adapters and memory.optimizer_states == 2 * 4 * adapters + 4 * 4 * layers
    kinds = [note.kind for note in memory.notes]
    assert "lora_language_model_only" in kinds and "vision_trainable" in kinds
    lora_note = next(str(note) for note in memory.notes if note.kind == "lora_language_model_only")
    assert "q_proj, v_proj" in lora_note  # CLIP's attention has q_proj and v_proj too: peft's plain names reach them
    # The projector trained beside the adapters, as peft's modules_to_save keeps it: a trainable copy of it.
    p = shape.vision.projector_params
    both = mm.training_memory(shape, method=mm.LoRA(rank=r, vision="projector"), seq_len=None)
    assert both.trainable_params == adapters + p
    assert both.weights == 2 * n + 4 * adapters + 2 * p
    assert both.gradients == 4 * adapters + 2 * p
    assert "vision_modules_to_save" in [note.kind for note in both.notes]
    # Houlsby adapters train it in place (requires_grad, no copy), as Full and Freeze do.
    houlsby = mm.training_memory(shape, method=mm.Adapters(vision="projector"), seq_len=None)
    assert houlsby.weights == 2 * n + 2 * houlsby.adapter_params
    assert houlsby.trainable_params == houlsby.adapter_params + p


def test_freezing_blocks_keeps_the_tower_frozen_unless_asked():
    shape = mm.from_hf_config(CONFIGS["Qwen2-VL-7B-Instruct"])
    per_block = shape.params_per_layer
    head = shape.group_params("final_norm") + shape.group_params("head")
    frozen = mm.Freeze(trainable_layers=2).plan(shape, mm.RECIPES["bf16"])
    assert frozen.trainable_params == 2 * per_block + head and frozen.layers_storing == 2
    merger = mm.Freeze(trainable_layers=2, vision="projector").plan(shape, mm.RECIPES["bf16"])
    assert merger.trainable_params == 2 * per_block + head + shape.vision.projector_params
    assert merger.layers_storing == shape.n_layers  # backward reaches the first block's image positions
    table = mm.Freeze(trainable_layers=2, vision="projector").groups(shape)
    assert table[table.trainable]["params"].sum() == merger.trainable_params
    assert list(table.part[:2]) == ["vision tower", "projector"]


def test_qlora_quantizes_the_tower_too():
    # bitsandbytes converts every nn.Linear but lm_head: the tower's and projector's too (checked live below).
    shape = mm.from_hf_config(GEMMA3_4B)
    plan = mm.QLoRA().plan(shape, mm.RECIPES["bf16"])
    linear = sum(t.numel for t in shape.tensors("vision") if t.linear)
    assert linear == 27 * (4 * 1152 * 1152 + 2 * 1152 * 4304)  # q/k/v/out, fc1, fc2; not the Parameter projector
    assert mm.methods.quantized_matrices(shape) == 34 * 7 + 27 * 6
    with pytest.raises(validate.FieldError, match="vision='frozen' only") as error:
        mm.QLoRA(vision="projector").plan(shape, mm.RECIPES["bf16"])
    assert error.value.field == "vision"
    assert plan.trainable_params == 34 * 8 * ((2560 + 2048) + (2560 + 1024))


def test_activations_count_the_language_model_and_say_what_they_leave_out():
    shape = mm.from_hf_config(GEMMA3_4B)
    memory = mm.training_memory(shape, method=mm.LoRA(), seq_len=512)
    # The same language model read as a text config, with Gemma3TextConfig's defaults written in.
    text = dict(GEMMA3_4B["text_config"], vocab_size=262_208, num_attention_heads=8, num_key_value_heads=4,
                head_dim=256, tie_word_embeddings=True)
    text_only = mm.training_memory(mm.from_hf_config(text),
                                   method=mm.LoRA(), seq_len=512, activations="textbook")
    assert memory.activation_model == "textbook" and memory.activations == text_only.activations
    kinds = [note.kind for note in memory.notes]
    assert {"vision_parts", "vision_activations_not_counted", "activations_textbook_fallback"} <= set(kinds)
    with pytest.raises(validate.FieldError, match="vision-language") as error:
        mm.training_memory(shape, method=mm.LoRA(), seq_len=512, activations="transformers")
    assert error.value.field == "activations"
    # A frozen tower: the language model's modelled peak (the same LoRA run on the text model) plus the tower's and
    # projector's bf16 weights, 2 B for each parameter the wrapper adds; frozen, they have nothing else. And what the
    # batch holds for its images, at the most a 512-token sequence holds: two images of 256 tokens, each the
    # processor's fp32 pixels (3 x 896 x 896 x 4 B), token_type_ids (512 int64) and SigLIP's position_ids buffer
    # ((896 / 14)^2 = 4,096 int64). The tower's forward (bf16 SDPA over 8,192 patches) weighs less than the language
    # model's peak.
    images = 2 * 3 * 896 * 896 * 4 + 512 * 8 + 4096 * 8
    need = mm.requirement(shape, method=mm.LoRA(), seq_len=512)
    text_model = mm.from_hf_config(text)
    text_peak = mm.peak_memory(text_model, method=mm.LoRA(), seq_len=512).total
    assert need.basis == "upper bound" and "vision-language" in need.reason
    assert need.bytes == int(text_peak) + 2 * (shape.n_params - text_model.n_params) + images
    assert need.bytes > mm.requirement(text_model, method=mm.LoRA(), seq_len=512).bytes
    # A tower that trains: what backward saves of it is not modelled, so the run gets a floor and no "fits": at
    # least the language model's own peak plus the tower's and projector's weights held throughout.
    trains = mm.requirement(shape, method=mm.LoRA(vision="trains"), seq_len=512)
    assert trains.basis == "floor" and "vision-language" in trains.reason and trains.refused
    assert trains.bytes >= int(text_peak) + 2 * (shape.n_params - text_model.n_params)
    # Checkpointing: transformers' enable_input_require_grads hooks the tower's patch embedding too, so the frozen
    # tower saves its layers' inputs, which memmath does not model: a floor again.
    assert mm.requirement(shape, method=mm.LoRA(), seq_len=512, checkpointing=True).basis == "floor"
    # Offloading: the language model's own upper bound, plus the tower's weights.
    offloaded = dict(method=mm.LoRA(), seq_len=512, precision="mixed", zero_stage=2, offload="optimizer")
    need = mm.requirement(shape, **offloaded)
    text_need = mm.requirement(text_model, **offloaded)
    assert text_need.basis == need.basis == "upper bound"
    assert need.bytes == text_need.bytes + 2 * (shape.n_params - text_model.n_params) + images
    serving = mm.inference_memory(shape)
    assert serving.weights == 2 * shape.n_params and "vision_working_set_not_counted" in [n.kind for n in serving.notes]


def test_vision_is_refused_by_name_where_it_means_nothing():
    for method in (mm.Full(vision="frozen"), mm.LoRA(vision="projector"), mm.Freeze(1, vision="trains")):
        with pytest.raises(validate.FieldError, match="no vision tower") as error:
            mm.training_memory("llama-2-7b", method=method, seq_len=None)
        assert error.value.field == "vision"
    with pytest.raises(validate.FieldError) as error:
        mm.Full(vision="tower")
    assert error.value.field == "vision"
    with pytest.raises(ValueError, match="every weight training"):
        mm.training_memory(mm.from_hf_config(GEMMA3_4B), method=mm.Full(vision="frozen"), seq_len=None, n_gpus=2,
                           zero_stage=3, sharding="fsdp2")


# ---- refusals: each names its field ------------------------------------------------------------------------------
REFUSED = [
    ({"model_type": "mllama", "text_config": {}, "vision_config": {}}, "model_type", "cross-attention"),
    ({"model_type": "paligemma", "vision_config": {}}, "model_type", "PaliGemma"),
    ({"model_type": "my_vlm", "vision_config": {"hidden_size": 8}}, "model_type", "vision-language"),
    (dict(GEMMA3_4B, vision_config={"model_type": "clip_vision_model"}), "vision_config.model_type", "siglip"),
    (dict(GEMMA3_4B, text_config={"model_type": "llama"}), "text_config.model_type", "gemma3_text"),
    (dict(CONFIGS["llava-1.5-7b-hf"], text_config={"model_type": "phi3"}), "text_config.model_type", "phi3"),
    (dict(GEMMA3_4B, vision_config=dict(GEMMA3_4B["vision_config"], image_size=[896, 896])),
     "vision_config.image_size", "single whole number"),
    (dict(GEMMA3_4B, vision_config=dict(GEMMA3_4B["vision_config"], hidden_size="big")),
     "vision_config.hidden_size", "whole number"),
    (dict(GEMMA3_4B, vision_config=dict(GEMMA3_4B["vision_config"], num_attention_heads=5)),
     "vision_config.num_attention_heads", "divide"),
    (dict(GEMMA3_4B, vision_config=dict(GEMMA3_4B["vision_config"], vision_use_head="no")),
     "vision_config.vision_use_head", "true or false"),
    (dict(GEMMA3_4B, text_config=dict(GEMMA3_4B["text_config"], use_bidirectional_attention=True)), "text_config",
     "use_bidirectional_attention"),
    (dict(GEMMA3_4B, text_config=[1]), "text_config", "object"),
    (dict(GEMMA3_4B, quantization_config={"quant_method": "bitsandbytes"}), "quantization_config", "pre-quantized"),
    (dict(GEMMA3_4B, torch_dtype="int8"), "torch_dtype", "float32"),
    (dict(CONFIGS["llava-1.5-7b-hf"], vision_feature_layer="last"), "vision_feature_layer", "layer index"),
    (dict(CONFIGS["Qwen2-VL-7B-Instruct"], head_dim=64, text_config={"hidden_size": 3584, "num_attention_heads": 28,
                                                                      "head_dim": 64}),
     "text_config.head_dim", "hidden_size // num_attention_heads"),
    (dict(CONFIGS["Mistral-Small-3.1-24B-Instruct-2503"], spatial_merge_size=0), "spatial_merge_size", "from 1"),
]


@pytest.mark.parametrize("config, field, words", REFUSED, ids=[f"{c['model_type']}-{f}" for c, f, _ in REFUSED])
def test_what_memmath_does_not_model_is_refused_by_name(config, field, words):
    with pytest.raises(validate.FieldError, match=words) as error:
        mm.from_hf_config(config)
    assert error.value.field == field


def test_missing_sub_configs_take_transformers_defaults_and_say_so():
    shape = mm.from_hf_config({"model_type": "llava"})  # LlavaConfig(): LlamaConfig() and its CLIP init_kwargs
    assert shape.vision.tower == "clip_vision_model" and shape.vision.n_blocks == 24 and shape.n_layers == 32
    assert {"text_config_default", "vision_config_default"} <= {note.kind for note in shape.notes}


# ---- the command line ------------------------------------------------------------------------------------------------
def _cli(*args):
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "memmath", *args], capture_output=True, text=True, env=environment,
                          cwd=REPO, timeout=120)


def test_the_command_line_reads_a_vision_language_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["gemma-3-27b-it"]))
    done = _cli("train", str(path), "--method", "lora")
    assert done.returncode == 0, done.stderr
    shape = mm.from_hf_config(CONFIGS["gemma-3-27b-it"])
    printed = " ".join(done.stdout.split())  # the lines are wrapped at 80 columns
    assert f"{shape.n_params:,} parameters" in printed and "SigLIP vision tower (27 blocks" in printed
    assert "LoRA adapts the language model's blocks only" in printed
    data = json.loads(_cli("train", str(path), "--method", "full", "--vision", "frozen", "--seq", "1024",
                           "--json").stdout)
    memory = mm.training_memory(shape, method=mm.Full(vision="frozen"), seq_len=1024)
    assert data["parts"] == {k: int(v) for k, v in memory.parts().items()}
    assert data["settings"]["method"]["vision"] == "frozen"
    assert data["model"]["trainable_params"] == shape.n_params - shape.vision.n_params
    refused = _cli("train", "llama-2-7b", "--vision", "frozen")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "--vision" in refused.stderr
    served = _cli("infer", str(path))
    assert served.returncode == 0 and "vision tower's forward pass" in " ".join(served.stdout.split())


# ---- live: transformers on the meta device, peft, bitsandbytes ------------------------------------------------------
def _built(torch, transformers, config):
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    with torch.device("meta"):
        return transformers.AutoModelForImageTextToText.from_config(hf_config)


def _parts(model):
    """(tower, projector, language model with lm_head, vision tensors as (name, shape)) of a built model."""
    tower = projector = language = 0
    vision = []
    for name, p in model.named_parameters():  # tied matrices appear once
        if "multi_modal_projector" in name or ".visual.merger." in name:
            projector += p.numel()
        elif "vision_tower" in name or ".visual." in name:
            tower += p.numel()
        else:
            language += p.numel()
            continue
        vision.append((name.removeprefix("model."), tuple(p.shape)))
    return tower, projector, language, vision


@pytest.mark.live
@pytest.mark.parametrize("name", CONFIGS)
def test_published_configs_count_like_transformers(torch, transformers, name):
    model = _built(torch, transformers, CONFIGS[name])
    tower, projector, language, vision = _parts(model)
    shape = mm.from_hf_config(CONFIGS[name])
    assert (shape.vision.tower_params, shape.vision.projector_params) == (tower, projector)
    assert shape.n_params - shape.vision.n_params == language
    assert shape.n_params == sum(p.numel() for p in model.parameters())
    assert [(t.name, t.shape) for t in shape.tensors("vision")] == vision  # every tensor, in parameters() order
    assert _tensors(shape) == len(list(model.parameters()))  # one 4-byte Adam step counter per tensor


TINY_TEXT = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=128)
SIGLIP = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=2, image_size=56, patch_size=14)
VARIANTS = {
    # the options each reader honours, at small widths
    "gemma3-untied-head": dict(model_type="gemma3", tie_word_embeddings=False, mm_tokens_per_image=4,
                               text_config=dict(TINY_TEXT, head_dim=24, model_type="gemma3_text"),
                               vision_config=dict(SIGLIP, vision_use_head=False)),
    "gemma3-siglip-head": dict(model_type="gemma3", mm_tokens_per_image=4, text_config=dict(TINY_TEXT),
                               vision_config=dict(SIGLIP, num_channels=1)),
    "llava-siglip-mistral": dict(model_type="llava", text_config=dict(TINY_TEXT, model_type="mistral"),
                                 vision_config=SIGLIP, vision_feature_layer=[-2, -5, -1],
                                 multimodal_projector_bias=False),
    "llava-clip-qwen2-tied": dict(model_type="llava", text_config=dict(TINY_TEXT, model_type="qwen2",
                                                                       tie_word_embeddings=True),
                                  vision_config=dict(SIGLIP, model_type="clip_vision_model", image_size=84)),
    "llava-pixtral": dict(model_type="llava", text_config=dict(TINY_TEXT, model_type="mistral", head_dim=32),
                          vision_config=dict(SIGLIP, model_type="pixtral", head_dim=64)),  # replaced: 32 // 2
    "llava-gemma3-text": dict(model_type="llava", text_config=dict(TINY_TEXT, model_type="gemma3_text", head_dim=16),
                              vision_config=dict(SIGLIP, model_type="clip_vision_model")),
    "mistral3-merge3-bias": dict(model_type="mistral3", spatial_merge_size=3, multimodal_projector_bias=True,
                                 tie_word_embeddings=False, text_config=dict(TINY_TEXT, model_type="mistral"),
                                 vision_config=dict(SIGLIP, model_type="pixtral")),
    "qwen2_vl-nested": dict(model_type="qwen2_vl", text_config=dict(TINY_TEXT, tie_word_embeddings=True),
                            vision_config=dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=3,
                                               spatial_merge_size=3, in_channels=1)),
    "qwen2_5_vl-flat-alias": dict(model_type="qwen2_5_vl", **TINY_TEXT,
                                  vision_config=dict(depth=4, num_hidden_layers=3, hidden_size=32, out_hidden_size=64,
                                                     intermediate_size=40, num_heads=2, temporal_patch_size=1)),
}


@pytest.mark.live
@pytest.mark.parametrize("name", VARIANTS)
def test_every_option_counts_like_transformers(torch, transformers, name):
    model = _built(torch, transformers, VARIANTS[name])
    tower, projector, language, vision = _parts(model)
    shape = mm.from_hf_config(VARIANTS[name])
    assert (shape.vision.tower_params, shape.vision.projector_params, shape.n_params - shape.vision.n_params) == (
        tower, projector, language)
    assert [(t.name, t.shape) for t in shape.tensors("vision")] == vision
    assert _tensors(shape) == len(list(model.parameters()))


@pytest.mark.live
@pytest.mark.parametrize("name", ["gemma-3-4b-it", "llava-1.5-7b-hf", "Qwen2.5-VL-3B-Instruct",
                                  "Mistral-Small-3.1-24B-Instruct-2503"])
@pytest.mark.parametrize("targets, vision", [(("q", "v"), "frozen"), ("all", "frozen"), (("q", "k", "v", "o"),
                                                                                          "projector")])
def test_lora_on_the_language_model_counts_like_peft(torch, transformers, peft, name, targets, vision):
    # LoRA limited to the language model (a target_modules regex), the projector in modules_to_save.
    shape = mm.from_hf_config(CONFIGS[name])
    method = mm.LoRA(rank=16, targets=targets, vision=vision)
    modules = sorted({adapter.module for adapter in shape.lora_adapters(method.targets)})
    extra = {}
    if vision == "projector":
        extra["modules_to_save"] = ["merger" if name.startswith("Qwen") else "multi_modal_projector"]
    model = peft.get_peft_model(_built(torch, transformers, CONFIGS[name]), peft.LoraConfig(
        r=16, target_modules=r".*language_model.*\.(" + "|".join(modules) + ")", **extra))
    trainable, every = model.get_nb_trainable_parameters()
    memory = mm.training_memory(shape, method=method, seq_len=None)
    assert memory.trainable_params == trainable
    assert shape.n_params + memory.trainable_params == every  # modules_to_save's copy sits beside the original


@pytest.mark.live
def test_qlora_weights_match_bitsandbytes_on_the_cpu(torch, transformers, require, tmp_path):
    require("bitsandbytes")
    config = dict(model_type="llava", text_config=dict(TINY_TEXT, model_type="llama"),
                  vision_config=dict(SIGLIP, vision_use_head=True))
    fields = {k: v for k, v in config.items() if k != "model_type"}
    transformers.AutoModelForImageTextToText.from_config(
        transformers.AutoConfig.for_model("llava", **fields)).save_pretrained(tmp_path)
    quantized = transformers.AutoModelForImageTextToText.from_pretrained(
        tmp_path, dtype=torch.bfloat16, device_map="cpu", quantization_config=transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16))
    stored = sum(p.numel() * p.element_size() for p in quantized.parameters())
    constants = 0
    for p in quantized.parameters():
        state = getattr(p, "quant_state", None)
        if state is not None:  # one uint8 absmax per 64 values, and the nested fp32 absmax per 256 of them
            constants += state.absmax.numel() * state.absmax.element_size() + state.state2.absmax.numel() * 4
    shape = mm.from_hf_config(config)
    memory = mm.training_memory(shape, method=mm.QLoRA(), seq_len=None)
    assert memory.weights - 4 * memory.adapter_params == stored  # the tower's linears are NF4, its MHA out_proj not
    assert memory.quantization_constants == constants

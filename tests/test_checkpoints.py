"""Weights as checkpoints store them (memmath/checkpoints.py), and peft's prepare_model_for_kbit_training.

Expected numbers come from transformers' own quantized modules built on the meta device (their parameters' bytes),
from peft's function run on a small real model, or from hand derivations written out in the comments.
"""

import copy
import json

import pytest

import memmath as mm
from memmath.checkpoints import (FP8_BLOCK, FP8_CHANNEL, MXFP4, STORED_FORMATS, get_stored_format, stored_format,
                                 stored_weight_bytes)
from memmath.kbit import kbit_prep_bytes
from memmath.models import ParamTensor

GB = 10**9

# Llama-3-8B (meta-llama/Meta-Llama-3-8B config.json): h 4096, 32 layers, 32 heads, 8 kv heads of 128, MLP 14336,
# vocabulary 128,256, untied head. Its linears: per layer 2 x 4096^2 (q, o) + 2 x 4096 x 1024 (k, v) + 3 x 4096 x
# 14336 (gate, up, down) = 218,103,808; x 32 = 6,979,321,856. Embedding and head 2 x 128,256 x 4096 = 1,050,673,152.
# Norms 65 x 4096 = 266,240.
LLAMA3_LINEAR, LLAMA3_EMBED_HEAD, LLAMA3_NORMS = 6_979_321_856, 1_050_673_152, 266_240
# Output rows of the linears per layer: 4096 (q) + 1024 (k) + 1024 (v) + 4096 (o) + 14336 x 2 (gate, up) + 4096 (down).
LLAMA3_ROWS = 32 * (4096 + 1024 + 1024 + 4096 + 2 * 14336 + 4096)

LLAMA3_CONFIG = {  # meta-llama/Meta-Llama-3-8B config.json, the fields that size it
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
# DeepSeek-V3's config.json quantization_config (deepseek-ai/DeepSeek-V3).
DEEPSEEK_V3_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                   "weight_block_size": [128, 128]}
# gpt-oss-20b's config.json quantization_config (openai/gpt-oss-20b).
GPT_OSS_MXFP4 = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                            "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}


def _bytes_of(module):
    return sum(p.numel() * p.element_size() for p in module.parameters())


# ---- FP8 -------------------------------------------------------------------------------------------------------
def test_fp8_serving_keeps_embeddings_and_head_in_16_bits_with_channel_scales():
    # 1 B per linear weight, 2 B for embeddings, head and norms, an fp32 scale per output row (FbgemmFp8Linear):
    m = mm.inference_memory("llama-3-8b", weights_format="fp8_e4m3")
    assert m.weights == LLAMA3_LINEAR + 2 * (LLAMA3_EMBED_HEAD + LLAMA3_NORMS)  # 9,081,200,640 B
    assert m.quantization_constants == 4 * LLAMA3_ROWS  # 5,505,024 B
    assert round((m.weights + m.quantization_constants) / GB, 2) == 9.09  # every tensor at 1 B was 8.03 GB
    # "fp8" is fp8_e4m3, on the command line too
    assert mm.inference_memory("llama-3-8b", weights_format="fp8").weights == m.weights


def test_fp8_linear_bytes_are_transformers_fp8_modules_bytes(torch):
    from transformers.integrations.fbgemm_fp8 import FbgemmFp8Linear
    from transformers.integrations.finegrained_fp8 import FP8Linear

    block = stored_format(DEEPSEEK_V3_FP8)
    for d_in, d_out in ((4096, 14336), (7168, 1536), (1000, 300)):  # 300 and 1000: blocks that do not divide
        tensor = ParamTensor("mlp.up_proj.weight", "mlp", (d_out, d_in), linear=True)
        with torch.device("meta"):
            fine = FP8Linear(d_in, d_out, block_size=(128, 128))
            channel = FbgemmFp8Linear(d_in, d_out, False)
        assert sum(block.tensor_bytes(tensor)) == _bytes_of(fine)
        assert sum(FP8_CHANNEL.tensor_bytes(tensor)) == _bytes_of(channel)  # input_scale_ub: a buffer, not stored


def test_deepseek_fp8_config_is_read_and_served_as_stored():
    shape = mm.from_hf_config({**LLAMA3_CONFIG, "quantization_config": DEEPSEEK_V3_FP8})
    assert shape.stored_format.name == "fp8_block" and shape.stored_format.block == (128, 128)
    m = mm.inference_memory(shape)  # as stored: no weights_format given
    assert m.weights_format == "fp8_block"
    assert m.weights == LLAMA3_LINEAR + 2 * (LLAMA3_EMBED_HEAD + LLAMA3_NORMS)
    # fp32 per 128 x 128 block, per layer: q, o 32 x 32; k, v 8 x 32; gate, up 112 x 32; down 32 x 112
    assert m.quantization_constants == 4 * 32 * (2 * 32 * 32 + 2 * 8 * 32 + 3 * 112 * 32)
    assert mm.plan_serving(shape).memory.weights_format == "fp8_block"
    assert mm.inference_memory(shape, weights_format="bf16").weights == 2 * (LLAMA3_LINEAR + LLAMA3_EMBED_HEAD
                                                                              + LLAMA3_NORMS)


# ---- MXFP4 ------------------------------------------------------------------------------------------------------
def test_mxfp4_is_four_and_a_quarter_bits_on_the_experts_only():
    # Mixtral-8x7B's experts per layer: 8 x 3 x 4096 x 14336 = 1,409,286,144 values; e2m1 two to a byte, one e8m0
    # byte per 32 values of a row: 704,643,072 + 44,040,192 B a layer, 4.25 bits a weight. All else bf16.
    shape = mm.PRESETS["mixtral-8x7b"]
    experts = 32 * 8 * 3 * 4096 * 14336
    weights, scales = stored_weight_bytes(shape, MXFP4)
    assert scales == experts // 32
    assert weights == experts // 2 + 2 * (shape.n_params - experts)
    assert MXFP4.bits_per_weight == 4.25


def test_mxfp4_blocks_are_transformers_mxfp4_experts_values(torch):
    from transformers import GptOssConfig
    from transformers.integrations.mxfp4 import Mxfp4GptOssExperts

    with torch.device("meta"):
        experts = Mxfp4GptOssExperts(GptOssConfig(num_local_experts=4, intermediate_size=64, hidden_size=96))
    # Mxfp4GptOssExperts holds the packed values (uint8, two per byte) as parameters; the e8m0 scales (E, out,
    # in / 32) ride in its precision config: 4 x 128 x 3 + 4 x 96 x 2.
    gate_up = ParamTensor("mlp.experts.gate_up_proj", "mlp", (4, 128, 96))
    down = ParamTensor("mlp.experts.down_proj", "mlp", (4, 96, 64))
    values = MXFP4.tensor_bytes(gate_up)[0] + MXFP4.tensor_bytes(down)[0]
    assert values == experts.gate_up_proj.numel() + experts.down_proj.numel()
    assert MXFP4.tensor_bytes(gate_up)[1] + MXFP4.tensor_bytes(down)[1] == 4 * 128 * 3 + 4 * 96 * 2


def test_gpt_oss_modules_to_not_convert_keep_attention_router_embeddings_and_head():
    fmt = stored_format(GPT_OSS_MXFP4)
    assert fmt.not_converted == tuple(GPT_OSS_MXFP4["modules_to_not_convert"])
    for name, kept in (("self_attn.q_proj.weight", True), ("mlp.router.weight", True), ("embed_tokens", True),
                       ("lm_head.weight", True), ("mlp.experts.gate_up_proj", False)):
        shape = (8, 64, 32) if "experts" in name else (64, 32)
        assert fmt.converts(ParamTensor(name, "mlp", shape, linear="proj" in name)) is not kept, name
    assert stored_format({**GPT_OSS_MXFP4, "dequantize": True}) is None  # Mxfp4Config(dequantize=True): bf16


def test_training_on_mxfp4_is_refused_with_the_bf16_weights_priced():
    mixtral = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
               "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
               "num_experts_per_tok": 2, "quantization_config": GPT_OSS_MXFP4}
    shape = mm.from_hf_config(mixtral)
    bf16 = 2 * mm.PRESETS["mixtral-8x7b"].n_params  # the same shape in bf16
    for method in (mm.Full(), mm.LoRA(), mm.DPO(base=mm.LoRA())):
        with pytest.raises(ValueError, match="mxfp4") as error:
            mm.Run(shape, method=method)
        assert f"{bf16 / 1e9:,.2f} GB" in str(error.value) and "dequantize=True" in str(error.value)
    assert mm.inference_memory(shape).weights_format == "mxfp4"  # serving it is fine


def test_full_finetuning_on_a_quantized_checkpoint_is_refused_and_bnb_takes_matching_qlora():
    bnb = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
           "bnb_4bit_use_double_quant": True}
    shape = mm.from_hf_config({**LLAMA3_CONFIG, "quantization_config": bnb})
    with pytest.raises(ValueError, match="fully finetune"):
        mm.Run(shape, method=mm.Full())
    with pytest.raises(ValueError, match="quant_type='nf4', double_quant=True"):
        mm.Run(shape, method=mm.QLoRA(quant_type="fp4"))
    mm.Run(shape, method=mm.QLoRA())  # the checkpoint's own format
    # stored as QLoRA stores it: the same bytes as the nf4 base (4 bits a linear weight, double-quantized absmax)
    served = mm.inference_memory("llama-3-8b", weights_format="nf4")
    assert stored_weight_bytes(shape, shape.stored_format) == (served.weights, served.quantization_constants)
    assert served.weights == LLAMA3_LINEAR // 2 + 2 * (LLAMA3_EMBED_HEAD + LLAMA3_NORMS)


# ---- GPTQ, AWQ, bitsandbytes ----------------------------------------------------------------------------------------
def test_gptq_and_awq_tensors_by_hand():
    # One 4096 -> 14336 linear at 4 bits, groups of 128 (auto-gptq QuantLinear / AutoAWQ WQLinear_GEMM):
    tensor = ParamTensor("mlp.up_proj.weight", "mlp", (14336, 4096), linear=True)
    # GPTQ: qweight int32 (4096 x 4 / 32, 14336) = 512 x 14336 x 4 B = 29,360,128 (= 4 bits a weight);
    # qzeros int32 (32, 14336 x 4 / 32 = 1792) = 229,376 B; scales fp16 (32, 14336) = 917,504 B; g_idx int32 (4096)
    # = 16,384 B.
    gptq = stored_format({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False})
    assert gptq.tensor_bytes(tensor) == (29_360_128, 229_376 + 917_504 + 16_384)
    # AWQ: qweight int32 (4096, 1792) = 29,360,128 B; qzeros int32 (32, 1792) = 229,376 B; scales fp16 (32, 14336).
    awq = stored_format({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"})
    assert awq.tensor_bytes(tensor) == (29_360_128, 229_376 + 917_504)
    # group_size -1: one group per row (in_features): qzeros (1, 1792), scales (1, 14336)
    whole = stored_format({"quant_method": "gptq", "bits": 8, "group_size": -1})
    assert whole.tensor_bytes(tensor) == (4096 * 14336, 4 * 3584 + 2 * 14336 + 4 * 4096)
    # the head and embeddings stay fp16 under both
    assert gptq.tensor_bytes(ParamTensor("lm_head.weight", "head", (128256, 4096))) == (2 * 128256 * 4096, 0)


def test_bitsandbytes_configs():
    eight = stored_format({"quant_method": "bitsandbytes", "load_in_8bit": True,
                           "llm_int8_skip_modules": ["lm_head"]})
    assert eight.name == "bnb_int8" and eight.not_converted == ("lm_head",)
    tensor = ParamTensor("self_attn.q_proj.weight", "attention", (4096, 4096), linear=True)
    assert eight.tensor_bytes(tensor) == (4096 * 4096, 4 * 4096)  # int8 values, an fp32 SCB per row
    four = stored_format({"load_in_4bit": True, "bnb_4bit_quant_type": "fp4"})  # no quant_method, no double quant
    assert four.name == "bnb_fp4" and not four.double_quant
    # one fp32 absmax per 64 values: 16,777,216 / 2 + 4 x 262,144
    assert four.tensor_bytes(tensor) == (4096 * 4096 // 2, 4 * 4096 * 4096 // 64)


@pytest.mark.parametrize("config, field", [
    ({"quant_method": "hqq"}, "quant_method"), ("gptq", "quantization_config"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "weight_block_size"),
    ({"quant_method": "fp8", "fmt": "e5m2"}, "fmt"),
    ({"quant_method": "gptq", "bits": 5}, "bits"), ({"quant_method": "awq", "bits": 8}, "bits"),
    ({"quant_method": "gptq", "group_size": 0}, "group_size"), ({"quant_method": "awq", "version": "gemv"}, "version"),
    ({"quant_method": "bitsandbytes"}, "load_in_4bit"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "int4"}, "bnb_4bit_quant_type"),
    ({"quant_method": "mxfp4", "modules_to_not_convert": "lm_head"}, "modules_to_not_convert"),
])
def test_unreadable_quantization_configs_name_the_field(config, field):
    with pytest.raises(ValueError, match=field):
        stored_format(config)
    with pytest.raises(ValueError, match="quantization_config"):
        mm.from_hf_config({**LLAMA3_CONFIG, "quantization_config": config})


def test_stored_formats_by_name_and_on_the_command_line(capsys):
    from memmath import cli

    assert get_stored_format("FP8_BLOCK") is FP8_BLOCK and set(STORED_FORMATS) <= set(mm.checkpoints.STORED_FORMATS)
    with pytest.raises(ValueError, match="weights_format"):
        get_stored_format("fp9")
    assert cli.main(["infer", "llama-3-8b", "--weights", "fp8", "--kv", "fp8", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert (settings["weights_format"], settings["kv_format"]) == ("fp8_e4m3", "fp8_e4m3")
    assert cli.main(["infer", "llama-3-8b", "--weights", "mxfp4", "--json"]) == 0  # a stored format by its name
    assert json.loads(capsys.readouterr().out)["settings"]["weights_format"] == "mxfp4"


# ---- prepare_model_for_kbit_training -----------------------------------------------------------------------------
def test_kbit_prep_bytes_are_what_peft_casts_on_a_small_model(torch):
    """peft 0.21's prepare_model_for_kbit_training on a small Llama in bf16 whose linear weights in the blocks stand
    in for bitsandbytes' Params4bit (the class name peft checks): the fp32 bytes it makes are kbit_prep_bytes'."""
    import transformers
    from peft import prepare_model_for_kbit_training

    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=2, vocab_size=300,
                                      tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)

    class Params4bit(torch.nn.Parameter):  # what bnb.nn.Linear4bit holds; peft leaves it as it is
        pass

    for layer in model.model.layers:
        for module in layer.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight = Params4bit(module.weight.data, requires_grad=False)
    before = sum(p.numel() * p.element_size() for p in model.parameters())
    prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    after = sum(p.numel() * p.element_size() for p in model.parameters())
    shape = mm.from_hf_config(config.to_dict())
    assert after - before == kbit_prep_bytes(shape, mm.recipes.get_recipe("bf16")) > 0


def test_kbit_prep_on_llama_3_8b_qlora():
    # embeddings, head and norms: 1,050,939,392 parameters from 2 to 4 bytes
    plain = mm.training_memory("llama-3-8b", method=mm.QLoRA(), seq_len=None)
    prepared = mm.training_memory("llama-3-8b", method=mm.QLoRA(), seq_len=None, kbit_prep=True)
    assert prepared.weights - plain.weights == 2 * (LLAMA3_EMBED_HEAD + LLAMA3_NORMS)
    without = plain.weights + plain.quantization_constants
    assert round(1 - without / (prepared.weights + prepared.quantization_constants), 2) == 0.27  # 26.9% less
    assert any("kbit_prep=True" in note.text for note in plain.notes)
    assert any("prepare_model_for_kbit_training cast" in note.text for note in prepared.notes)
    with pytest.raises(ValueError, match="kbit_prep"):
        mm.Run("llama-3-8b", method=mm.LoRA(), kbit_prep=True)
    dpo = mm.Run("llama-3-8b", method=mm.DPO(base=mm.QLoRA()), kbit_prep=True, seq_len=None)
    assert dpo.kbit_prep


def test_quantized_checkpoint_shape_is_a_different_model():
    plain = mm.from_hf_config(LLAMA3_CONFIG)
    stored = mm.from_hf_config(copy.deepcopy({**LLAMA3_CONFIG, "quantization_config": DEEPSEEK_V3_FP8}))
    assert plain != stored and plain.n_params == stored.n_params and plain.stored_format is None

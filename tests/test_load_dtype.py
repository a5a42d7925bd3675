"""What a 16-bit load keeps in fp32: transformers' _keep_in_fp32_modules_strict (bf16 and fp16 loads) and
_keep_in_fp32_modules (fp16 loads only), PreTrainedModel._get_dtype_plan in modeling_utils.py. The expected bytes are
transformers' own build in that dtype on the meta device, and a tiny model stepped on the CPU with torch's AdamW."""

from __future__ import annotations

import pytest

import memmath as mm
from tests.test_families_dense import _build
from validation.published_configs import (CONFIG_CLASS_DEFAULTS, ERNIE_MOE_CONFIGS, LAYERED_CONFIGS, PUBLISHED_CONFIGS,
                                          PUBLISHED_HYBRID_CONFIGS)

# the routers are built fp32 (their Parameters name the dtype), so from_config shows them as a load does
LOADS = [("GLM-4.5-Air", "bf16"), ("GLM-4.5-Air", "fp16"), ("DeepSeek-V3", "bf16"), ("DeepSeek-V2-Lite", "bf16"),
         ("gpt-oss-20b", "bf16"), ("Mixtral-8x7B-v0.1", "bf16"), ("ERNIE-4.5-21B-A3B-PT", "bf16"),
         ("NemotronHConfig", "bf16"), ("granite-4.0-h-tiny", "bf16"), ("Glm4MoeLiteConfig", "bf16"),
         ("MiniMax-M2", "bf16")]
CONFIGS = {**PUBLISHED_CONFIGS, **LAYERED_CONFIGS, **ERNIE_MOE_CONFIGS, **PUBLISHED_HYBRID_CONFIGS,
           **CONFIG_CLASS_DEFAULTS}


@pytest.mark.live
@pytest.mark.parametrize("name, dtype", LOADS)
def test_a_16_bit_load_weighs_what_transformers_builds(torch, transformers, name, dtype):
    # the dequantized load: DeepSeek-V3's FP8 quantization_config left out (from_config builds nn.Linear either way)
    config = {k: v for k, v in CONFIGS[name].items() if k != "quantization_config"}
    model = _build(torch, transformers, config, dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[dtype])
    params = list(model.parameters())
    shape = mm.from_hf_config(config)
    assert shape.fp32_kept_params(dtype) == sum(p.numel() for p in params if p.dtype == torch.float32)
    weights = sum(p.numel() * p.element_size() for p in params)
    assert mm.inference_memory(shape, weights_format=dtype).weights == weights
    assert mm.training_memory(shape, precision=dtype, method=mm.Full()).weights == weights


def test_the_router_is_what_glm_and_deepseek_keep_in_fp32():
    # one E x h router weight a MoE block, from the published configs: GLM-4.5-Air 45 MoE blocks of 128 experts at
    # hidden 4,096; DeepSeek-V3 58 of 256 at 7,168; DeepSeek-V2-Lite 26 of 64 at 2,048
    assert mm.PRESETS["glm-4.5-air"].fp32_kept_params("bf16") == 45 * 128 * 4096
    assert mm.PRESETS["deepseek-v3"].fp32_kept_params("fp16") == 58 * 256 * 7168
    assert mm.PRESETS["deepseek-v2-lite"].fp32_kept_params("bf16") == 26 * 64 * 2048
    # gpt-oss keeps its norms in fp32 only when it loads in fp16: 24 blocks of two 2,880-wide norms and the final one
    assert mm.PRESETS["gpt-oss-20b"].fp32_kept_params("fp16") == (24 * 2 + 1) * 2880
    assert mm.PRESETS["gpt-oss-20b"].fp32_kept_params("bf16") == 0
    assert mm.PRESETS["glm-4.5-air"].fp32_kept_params("fp32") == 0


def test_a_trainer_that_casts_the_module_keeps_nothing_in_fp32():
    # the mixed recipes stand for DeepSpeed's engine, which casts the whole module (module.bfloat16()): 2 B a value
    shape = mm.PRESETS["glm-4.5-air"]
    assert mm.training_memory(shape, precision="mixed", method=mm.Full()).weights == 2 * shape.n_params
    assert mm.training_memory(shape, precision="amp", method=mm.Full()).weights == 4 * shape.n_params


def test_the_layouts_say_what_stays_in_fp32():
    shape = mm.PRESETS["glm-4.5-air"]
    assert "but the router, which transformers keeps in fp32" in mm.inference_memory(shape).weights_layout
    nf4 = mm.inference_memory(shape, weights_format="nf4").weights_layout
    assert "in fp32: the router" in nf4 and "router" not in nf4.split("kept in bf16:")[1].split(";")[0]


GLM_TINY = dict(model_type="glm4_moe", vocab_size=96, hidden_size=32, intermediate_size=56, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, moe_intermediate_size=24,
                n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


# ERNIE 4.5 MoE: block 0 dense, blocks 1-2 MoE; its router weight and its moe_statics correction bias (a 1 x E fp32
# Parameter built with requires_grad=False) stay fp32, and the bias never trains
ERNIE_TINY = dict(model_type="ernie4_5_moe", vocab_size=96, hidden_size=32, intermediate_size=56, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, moe_intermediate_size=24, moe_num_experts=4, moe_k=2,
                  moe_num_shared_experts=1, moe_layer_start_index=1, moe_layer_interval=1, use_bias=True,
                  use_cache=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


@pytest.mark.live
@pytest.mark.parametrize("config", [GLM_TINY, ERNIE_TINY], ids=["glm4_moe", "ernie4_5_moe"])
@pytest.mark.parametrize("method", ["full", "freeze"])
def test_a_bf16_step_keeps_the_router_its_gradient_and_its_states_in_fp32(torch, transformers, method, config):
    """One AdamW step of a tiny MoE model loaded in bf16 on the CPU: the router's weight, gradient and both moments
    are fp32 (PyTorch keeps states in the parameter's dtype), everything else bf16; memmath's parts equal torch's."""
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items()
                                                                           if k != "model_type"})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.bfloat16).train()
    if method == "freeze":  # the last block, the final norm and the head train
        for name, p in model.named_parameters():
            p.requires_grad_(p.requires_grad and name.startswith(("model.layers.2.", "model.norm.", "lm_head.")))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3, foreach=False)
    ids = torch.randint(3, 96, (2, 16), generator=torch.Generator().manual_seed(1))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    states = sum(t.numel() * t.element_size() for state in optimizer.state.values() for t in state.values())
    memory = mm.training_memory(mm.from_hf_config(config), precision="bf16", optimizer="adamw",
                                method=mm.Full() if method == "full" else mm.Freeze(trainable_layers=1))
    assert memory.weights == sum(p.numel() * p.element_size() for p in model.parameters())
    assert memory.gradients == sum(p.grad.numel() * p.grad.element_size() for p in trainable)
    assert memory.optimizer_states == states
    assert {p.dtype for p in trainable if p.ndim == 2 and p.shape == (4, 32)} == {torch.float32}  # the routers


@pytest.mark.live
def test_an_fp16_load_of_gpt_oss_keeps_its_norms_in_fp32(torch, transformers, tmp_path):
    """_keep_in_fp32_modules (fp16 only) acts when from_pretrained loads the weights (core_model_loading.py's dtype
    plan), not in from_config: a tiny gpt-oss saved and loaded back in fp16 and in bf16."""
    config = dict(model_type="gpt_oss", vocab_size=64, hidden_size=32, intermediate_size=16, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=4,
                  num_experts_per_tok=2, sliding_window=8)
    hf_config = transformers.AutoConfig.for_model("gpt_oss", **{k: v for k, v in config.items() if k != "model_type"})
    transformers.AutoModelForCausalLM.from_config(hf_config).save_pretrained(tmp_path)
    shape = mm.from_hf_config(config)
    for dtype, torch_dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch_dtype)
        params = list(model.parameters())
        assert shape.fp32_kept_params(dtype) == sum(p.numel() for p in params if p.dtype == torch.float32)
        weights = sum(p.numel() * p.element_size() for p in params)
        assert mm.inference_memory(shape, weights_format=dtype).weights == weights

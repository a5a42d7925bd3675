"""Finetuning methods: exactly which parameters train, by hand and against peft."""

import pytest

import memmath as mm
import numpy as np


def trainable(model, method):
    return mm.training_memory(model, method=method).trainable_params


# ---- full finetuning and freezing ------------------------------------------------------------------
# Parameters built with requires_grad=False, which parameters() counts but Full trains not: ERNIE-4.5-21B-A3B-PT's
# moe_statics correction bias, 1 x 64 in each of its 27 MoE blocks (28 blocks from moe_layer_start_index 1)
FROZEN_PARAMETERS = {"ernie-4.5-21b-a3b": 27 * 64}


def test_full_trains_everything():
    for name, shape in mm.PRESETS.items():
        assert trainable(shape, mm.Full()) == shape.n_params - FROZEN_PARAMETERS.get(name, 0), name


def test_freeze_gpt2_keeps_the_tied_head_with_the_embeddings():
    # GPT-2's head is the token embedding matrix. Training the last 2 blocks trains those blocks
    # (2 x (12h^2 + 13h)) and ln_f (2h); the head stays frozen with the embeddings (and says so).
    h = 768
    m = mm.training_memory("gpt2", method=mm.Freeze(trainable_layers=2))
    assert m.trainable_params == 2 * (12 * h * h + 13 * h) + 2 * h
    assert "tied_head_frozen" in [note.kind for note in m.notes]
    # With the embeddings: + wte (50257 x h) + wpe (1024 x h), which also trains the head.
    with_embeddings = mm.Freeze(trainable_layers=2, train_embeddings=True)
    assert trainable("gpt2", with_embeddings) == m.trainable_params + 50257 * h + 1024 * h


def test_freeze_llama_trains_the_untied_head_and_final_norm_by_default():
    h, I, V = 4096, 11008, 32000
    block = 4 * h * h + 3 * h * I + 2 * h
    assert trainable("llama-2-7b", mm.Freeze(trainable_layers=1)) == block + h + V * h
    assert trainable("llama-2-7b", mm.Freeze(trainable_layers=1, train_head=False, train_final_norm=False)) == block


def test_freezing_every_block_but_training_the_rest_equals_full():
    everything = mm.Freeze(trainable_layers=32, train_embeddings=True)
    full, frozen = mm.training_memory("llama-2-7b", method=mm.Full()), mm.training_memory("llama-2-7b", method=everything)
    assert frozen.parts() == full.parts()


def test_frozen_layers_and_trainable_layers_agree():
    assert trainable("bert-base-uncased", mm.Freeze(frozen_layers=9)) == trainable(
        "bert-base-uncased", mm.Freeze(trainable_layers=3))


def test_bert_head_is_pooler_and_classifier():
    h = 768
    shape = mm.models.bert_model(n_layers=12, hidden_size=h, n_heads=12, num_labels=3)
    head = h * h + h + 3 * h + 3  # pooler dense + classifier
    assert trainable(shape, mm.Freeze(trainable_layers=0)) == head  # BERT has no final norm


# ---- Houlsby adapters ------------------------------------------------------------------------------
def test_houlsby_adapter_count():
    # Houlsby et al. 2019: each adapter has 2*m*h + m + h parameters; two per block.
    for name, h, L in [("bert-base-uncased", 768, 12), ("bert-large-uncased", 1024, 24), ("gpt2", 768, 12)]:
        for m in (8, 64, 256):
            assert trainable(name, mm.Adapters(bottleneck=m)) == L * 2 * (2 * m * h + m + h)


def test_houlsby_adapters_are_a_few_percent_of_bert_large():
    # The article / Houlsby et al.: a few percent of the parameters train (about 3%; 3.6% in the abstract,
    # with layer norms). bottleneck 64 on BERT-large: 24 x 2 x (2*64*1024 + 64 + 1024) = 6,343,680 = 1.9%;
    # adding the layer norms: + (24 x 4 + 2) x 1024 = 100,352.
    m = mm.training_memory("bert-large-uncased", method=mm.Adapters(bottleneck=64))
    assert m.trainable_params == 6_343_680 and 0.01 < m.trainable_fraction < 0.036
    with_norms = mm.training_memory("bert-large-uncased", method=mm.Adapters(bottleneck=64, train_norms=True))
    assert with_norms.trainable_params == 6_343_680 + 100_352


# ---- LoRA --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model, method, expected", [
    # Hu et al. 2021, r x (d_in + d_out) per matrix: Llama-2-7B, r=8 on q and v, 8 x 8,192 x 2 x 32.
    ("llama-2-7b", mm.LoRA(rank=8, targets=("q", "v")), 4_194_304),
    # peft's print_trainable_parameters for GPT-2 with r=8 on c_attn (the fused q, k, v):
    # "trainable params: 294,912 || all params: 124,734,720": 12 x 8 x (768 + 2304).
    ("gpt2", mm.LoRA(rank=8, targets=("q", "v")), 294_912),
    # Llama-2-7B, r=16 on all seven linear layers: 32 x 16 x (4 x 8192 + 2 x 15104 + 15104) = 39,976,960.
    ("llama-2-7b", mm.LoRA(rank=16, targets="all"), 39_976_960),
    # Mistral-7B (GQA, k and v are 4096 -> 1024), r=8 on q, k, v, o: 32 x 8 x (8192 + 5120 + 5120 + 8192).
    ("mistral-7b", mm.LoRA(rank=8, targets=("q", "k", "v", "o")), 6_815_744),
    # BERT base, r=8 on query and value: 12 x 2 x 8 x (768 + 768).
    ("bert-base-uncased", mm.LoRA(rank=8, targets=("q", "v")), 294_912),
])
def test_lora_trainable_counts(model, method, expected):
    assert trainable(model, method) == expected


def test_lora_on_gpt2_adapts_the_fused_qkv_once():
    assert trainable("gpt2", mm.LoRA(rank=8, targets=("q", "k", "v"))) == trainable("gpt2", mm.LoRA(rank=8, targets="q"))


def test_lora_gives_10000x_fewer_trainable_parameters_on_gpt3():
    # Hu et al. 2021: LoRA reduces GPT-3 175B's trainable parameters by 10,000x. Their r=4 on Wq and
    # Wv: 96 layers x 2 matrices x 4 x (12288 + 12288) = 18,874,368 (about 9,250x fewer). The preset
    # uses GPT-2's fused qkv matrix, adapted once: 96 x 4 x (12288 + 3 x 12288), the same number.
    lora = trainable("gpt3-175b", mm.LoRA(rank=4, targets="q"))
    assert lora == 96 * 2 * 4 * (12288 + 12288) == 18_874_368
    assert 1e-5 < lora / mm.PRESETS["gpt3-175b"].n_params < 2e-4


def test_qlora_trains_like_lora():
    assert trainable("llama-2-7b", mm.QLoRA(rank=8)) == 4_194_304


@pytest.mark.parametrize("method, expected", [
    (mm.Full(), "full finetuning: every weight trains"),
    (mm.Freeze(trainable_layers=2), "freezing: the last 2 blocks train, plus the final norm and head"),
    (mm.Adapters(bottleneck=16), "Houlsby adapters: two bottleneck-16 adapters per block train; the base is frozen"),
    (mm.LoRA(rank=4), "LoRA rank 4 on q, v (fp32 adapters); the base is frozen"),
    (mm.QLoRA(rank=4, double_quant=False),
     "QLoRA: NF4 base (without double quantization) + LoRA rank 4 on q, v (fp32 adapters); the base is frozen"),
])
def test_methods_describe_themselves(method, expected):
    # The line shown beside every number must name the method's own settings.
    assert method.describe() == expected


# ---- live: peft on meta-device models -----------------------------------------------------------------
@pytest.mark.live
@pytest.mark.parametrize("model_class, config, modules, rank, model, targets", [
    ("LlamaForCausalLM", dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                              intermediate_size=11008, vocab_size=32000),
     ["q_proj", "v_proj"], 8, "llama-2-7b", ("q", "v")),
    ("LlamaForCausalLM", dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                              intermediate_size=11008, vocab_size=32000),
     ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], 16, "llama-2-7b", "all"),
    ("MistralForCausalLM", dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                                num_key_value_heads=8, intermediate_size=14336, vocab_size=32000),
     ["q_proj", "k_proj", "v_proj", "o_proj"], 8, "mistral-7b", ("q", "k", "v", "o")),
    ("GPT2LMHeadModel", dict(), ["c_attn"], 8, "gpt2", ("q", "v")),
    ("GPT2LMHeadModel", dict(), ["c_attn", "c_proj", "c_fc"], 4, "gpt2", ("q", "o", "up", "down")),
    ("BertModel", dict(), ["query", "value"], 8, "bert-base-uncased", ("q", "v")),
    ("BertModel", dict(), [r".*\.attention\.output\.dense", r".*\.intermediate\.dense", r".*layer\.\d+\.output\.dense"],
     2, "bert-base-uncased", ("o", "up", "down")),
])
def test_lora_counts_match_peft(torch, transformers, peft, model_class, config, modules, rank, model, targets):
    config_class = {"LlamaForCausalLM": "LlamaConfig", "MistralForCausalLM": "MistralConfig",
                    "GPT2LMHeadModel": "GPT2Config", "BertModel": "BertConfig"}[model_class]
    with torch.device("meta"):
        base = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))
    if isinstance(modules[0], str) and modules[0].startswith(".*"):
        modules = "|".join(modules)  # a regular expression: BERT's two kinds of output.dense
    lora = peft.get_peft_model(base, peft.LoraConfig(r=rank, target_modules=modules,
                                                     fan_in_fan_out=model_class == "GPT2LMHeadModel"))
    peft_trainable, _ = lora.get_nb_trainable_parameters()
    assert trainable(model, mm.LoRA(rank=rank, targets=targets)) == peft_trainable


# ---- Freeze.groups: what stays trainable when the first blocks are frozen, part by part (hand-counted).
def _trainable(frame):
    return int(frame.loc[frame["trainable"], "params"].sum())


def test_llama_untied_head_trains():
    # Llama-2-7B block: 4*4096^2 (q,k,v,o) + 3*4096*11008 (gate, up, down) + 2*4096 (norms) = 202,383,360.
    # Last 2 blocks + final norm (4,096) + untied head (32,000 x 4,096 = 131,072,000) = 535,842,816.
    frame = mm.Freeze(frozen_layers=30).groups(mm.PRESETS["llama-2-7b"])
    assert frame.set_index("part").loc["trainable blocks", "params"] == 2 * 202_383_360
    assert frame.set_index("part").loc["trainable blocks", "blocks"] == "31-32"
    assert _trainable(frame) == 2 * 202_383_360 + 4_096 + 131_072_000
    assert int(frame["params"].sum()) == 6_738_415_616  # every parameter appears once


def test_gpt2_tied_head_stays_frozen():
    # GPT-2 block: 12h^2 + 13h = 7,087,872 at h=768; the head is the token embedding, so only the
    # last blocks and ln_f (2h = 1,536) train.
    frame = mm.Freeze(trainable_layers=2).groups(mm.PRESETS["gpt2"])
    head = frame.set_index("part").loc["output head"]
    assert head["params"] == 0 and not head["trainable"]
    assert _trainable(frame) == 2 * 7_087_872 + 1_536


def test_bert_pooler_is_the_head_and_there_is_no_final_norm():
    # BERT-large block 12h^2 + 13h = 12,596,224 at h=1,024; pooler h^2 + h = 1,049,600.
    frame = mm.Freeze(frozen_layers=18).groups(mm.PRESETS["bert-large-uncased"])
    assert _trainable(frame) == 6 * 12_596_224 + 1_049_600
    assert frame.set_index("part").loc["final norm", "params"] == 0


def test_article_ten_layers():
    frame = mm.Freeze(frozen_layers=9).groups(mm.uniform_model(7e9, 10))
    assert _trainable(frame) == 700_000_000  # one of ten equal layers of 7e9 parameters
    assert frame.set_index("part").loc["frozen blocks", "blocks"] == "1-9"


def test_matches_plan_and_rejects_arrays():
    shape = mm.PRESETS["mistral-7b"]
    method = mm.Freeze(frozen_layers=20, train_embeddings=True)
    plan = method.plan(shape, mm.recipes.get_recipe("bf16"))
    assert _trainable(method.groups(shape)) == plan.trainable_params
    with pytest.raises(ValueError, match="single number"):
        mm.Freeze(frozen_layers=np.array([1, 2])).groups(shape)


# ---- LoRA(targets="all") on families without a gate matrix (GPT-2, BERT) adapts every linear matrix they have.
def test_all_on_gpt2_adapts_c_attn_c_proj_c_fc_and_mlp_c_proj():
    # GPT-2 (h=768, MLP 3072): c_attn 768->2304, attn c_proj 768->768, c_fc 768->3072, mlp c_proj 3072->768.
    # Rank 8: 8 x ((768+2304) + (768+768) + (768+3072) + (3072+768)) = 8 x 12,288 = 98,304 per block.
    assert mm.LoRA(rank=8, targets="all").params_per_block(mm.PRESETS["gpt2"]) == 98_304


def test_all_on_bert_skips_gate():
    # BERT-base: q, k, v, o 768->768 (4 x 1,536), intermediate 768->3072, output 3072->768 (2 x 3,840).
    # Rank 4: 4 x (6,144 + 7,680) = 55,296 per block.
    assert mm.LoRA(rank=4, targets="all").params_per_block(mm.PRESETS["bert-base-uncased"]) == 55_296


def test_naming_gate_explicitly_on_gpt2_still_fails():
    with pytest.raises(ValueError, match="gate"):
        mm.LoRA(rank=8, targets=("q", "gate")).params_per_block(mm.PRESETS["gpt2"])


# ---- the rules each method owns: trainable count, adapter bits, the tied head, stored bits ----------------
def test_trainable_params_of_a_method_on_a_model():
    # Hu et al. 2021: r x (d_in + d_out) per matrix; Llama-2-7B q and v are 4,096 x 4,096, 32 blocks.
    lora = mm.LoRA(rank=8, targets=("q", "v"))
    assert lora.matrix_params(4096, 4096) == 8 * (4096 + 4096) == 65_536
    assert lora.trainable_params("llama-2-7b") == 65_536 * 2 * 32 == 4_194_304
    assert mm.Full().trainable_params("gpt2") == 124_439_808  # openai-community/gpt2, tied head counted once
    # GPT-2 with the last 2 blocks trainable: 2 x (12h^2 + 13h) + ln_f's 2h (the tied head stays frozen).
    h = 768
    assert mm.Freeze(trainable_layers=2).trainable_params(mm.PRESETS["gpt2"]) == 2 * (12 * h * h + 13 * h) + 2 * h
    ranks = mm.LoRA(rank=np.array([1, 8]), targets=("q", "v")).trainable_params("llama-2-7b")
    assert list(ranks) == [524_288, 4_194_304]


def test_adapter_bits_follow_the_adapter_format_else_the_weights():
    bf16, fp32 = mm.recipes.get_recipe("bf16"), mm.recipes.get_recipe("fp32")
    assert mm.LoRA(rank=8).adapter_bits(bf16) == 32  # peft's default: fp32 adapters on a 16-bit base
    assert mm.LoRA(rank=8, adapter_format=None).adapter_bits(bf16) == 16
    assert mm.QLoRA(rank=8, adapter_format="bf16").adapter_bits(fp32) == 16
    assert mm.Adapters(bottleneck=8).adapter_bits(fp32) == 32


@pytest.mark.parametrize("model, method, trains", [
    # GPT-2's head is its token embedding (tie_word_embeddings): it trains only with the embeddings.
    ("gpt2", mm.Freeze(trainable_layers=1), False),
    ("gpt2", mm.Freeze(trainable_layers=1, train_embeddings=True), True),
    ("llama-2-7b", mm.Freeze(trainable_layers=1), True),
    ("llama-2-7b", mm.Freeze(trainable_layers=1, train_head=False), False),
    ("gpt2", mm.Full(), True),
    ("llama-2-7b", mm.LoRA(rank=8), False),
    ("llama-2-7b", mm.Adapters(bottleneck=8, train_head=True), True),
    ("gpt2", mm.Adapters(bottleneck=8, train_head=True), False),
])
def test_whether_the_head_trains(model, method, trains):
    assert method.head_trains(mm.PRESETS[model]) is trains


@pytest.mark.parametrize("fmt, block, double_quant, bits", [
    ("bf16", 64, True, 16.0),
    ("fp32", 64, False, 32.0),
    # Dettmers et al. 2023, QLoRA, section 3: 32/64 = 0.5 extra bits; double quantization 8/64 + 32/(64*256).
    ("nf4", 64, False, 4.5),
    ("nf4", 64, True, 4 + 8 / 64 + 32 / (64 * 256)),
    ("int4", 128, False, 4 + 32 / 128),
])
def test_bits_per_weight_of_a_stored_format(fmt, block, double_quant, bits):
    assert mm.methods.bits_per_weight(fmt, block=block, double_quant=double_quant) == bits


def test_constant_bits_match_a_tensor_of_whole_blocks():
    # 0.127 in the QLoRA paper is 8/64 + 32/16,384 = 0.126953125 exactly.
    assert mm.methods.quant_constant_bits(block=64, double_quant=True) == 0.126953125
    n = 64 * 256 * 10  # whole blocks of blocks
    assert 8 * mm.methods.quant_constant_bytes(n, block=64, double_quant=True) / n == mm.methods.quant_constant_bits(block=64)
    with pytest.raises(ValueError, match="block"):
        mm.methods.quant_constant_bits(block=0)


def test_qlora_bases_as_bitsandbytes_stores_them():
    # Llama-2-7B: 32 blocks of 7 linear matrices, 224 quantized; rows per block 4 x 4,096 + 2 x 11,008 + 4,096.
    paper = mm.training_memory("llama-2-7b", method=mm.QLoRA(rank=8))
    bnb = mm.training_memory("llama-2-7b", method=mm.QLoRA(rank=8, layout="bitsandbytes"))
    # bitsandbytes 0.50.2 QuantState per matrix: code (16 fp32), state2.code (256 fp32), offset (1 fp32).
    assert bnb.quantization_constants - paper.quantization_constants == 224 * (16 + 256 + 1) * 4
    plain = mm.training_memory("llama-2-7b", method=mm.QLoRA(rank=8, double_quant=False, layout="bitsandbytes"))
    plain_paper = mm.training_memory("llama-2-7b", method=mm.QLoRA(rank=8, double_quant=False))
    assert plain.quantization_constants - plain_paper.quantization_constants == 224 * 16 * 4
    fp4 = mm.training_memory("llama-2-7b", method=mm.QLoRA(rank=8, quant_type="fp4"))
    assert (fp4.weights, fp4.quantization_constants) == (paper.weights, paper.quantization_constants)
    # LLM.int8 (Linear8bitLt): one byte per value and one fp32 scale per output row.
    int8 = mm.training_memory("llama-2-7b", method=mm.QLoRA(rank=8, quant_type="int8"))
    assert int8.quantization_constants == 32 * (4 * 4096 + 2 * 11008 + 4096) * 4 == 5_439_488
    assert int8.weights - paper.weights == 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) // 2  # 8 bits instead of 4
    assert any(n.kind == "quant_maps_not_counted" for n in paper.notes)
    assert not any(getattr(n, "kind", "") == "quant_maps_not_counted" for n in bnb.notes)
    with pytest.raises(ValueError, match="double_quant"):
        mm.QLoRA(quant_type="int8", double_quant=True)
    with pytest.raises(ValueError, match="quant_type"):
        mm.QLoRA(quant_type="int4")
    with pytest.raises(ValueError, match="layout"):
        mm.QLoRA(layout="gptq")

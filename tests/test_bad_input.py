"""Bad input gets a ValueError that names the field and says what is allowed; nothing else escapes."""

import numpy as np
import pytest

import memmath as mm

NAN = float("nan")
TINY_LLAMA = dict(n_layers=2, hidden_size=64, n_heads=4, intermediate_size=128, vocab_size=100)

# (id, call, fragments the message must contain: the field, then what is allowed)
CASES = [
    # negative or zero sizes
    ("zero batch", lambda: mm.training_memory("gpt2", batch_size=0), ["batch_size", "from 1 to"]),
    ("negative seq", lambda: mm.training_memory("gpt2", seq_len=-5), ["seq_len", "from 1 to"]),
    ("zero params", lambda: mm.uniform_model(0, 10), ["n_params", "from 1 to"]),
    ("negative layers", lambda: mm.uniform_model(1e9, -1), ["n_layers", "from 1 to"]),
    ("zero rank", lambda: mm.LoRA(rank=0), ["rank", "from 1 to"]),
    ("zero bottleneck", lambda: mm.Adapters(bottleneck=0), ["bottleneck", "from 1 to"]),
    ("zero gpus", lambda: mm.training_memory("gpt2", n_gpus=0), ["n_gpus", "from 1 to"]),
    ("zero stage 4", lambda: mm.training_memory("gpt2", zero_stage=4), ["zero_stage", "from 0 to 3"]),
    ("zero context", lambda: mm.kv_cache_bytes("gpt2", context_len=0), ["context_len", "from 1 to"]),
    ("negative required", lambda: mm.check_fit(-1, "T4"), ["required_bytes", "from 0"]),
    ("zero hidden", lambda: mm.llama_model(**dict(TINY_LLAMA, hidden_size=0)), ["hidden_size", "from 1 to"]),
    ("zero count", lambda: mm.parse_count("0"), ["parameter count", "from 1 to"]),
    ("negative array", lambda: mm.training_memory("gpt2", batch_size=np.array([4, -1])),
     ["batch_size", "outside that range"]),
    # NaN
    ("nan batch", lambda: mm.training_memory("gpt2", batch_size=NAN), ["batch_size", "whole number", "nan"]),
    ("nan params", lambda: mm.uniform_model(NAN, 10), ["n_params", "whole number"]),
    ("nan model", lambda: mm.training_memory(NAN), ["parameter count", "whole number"]),
    ("nan in array", lambda: mm.training_memory("gpt2", seq_len=np.array([128.0, NAN])), ["seq_len", "NaN"]),
    ("nan bytes", lambda: mm.format_bytes(NAN), ["n_bytes", "from 0"]),
    ("nan scale", lambda: mm.round_to_format(1.0, "int8", scale=NAN), ["scale", "number from"]),
    # fractions where counts are needed
    ("fraction batch", lambda: mm.training_memory("gpt2", batch_size=2.5), ["batch_size", "whole number", "fraction"]),
    ("fraction layers", lambda: mm.Freeze(trainable_layers=1.5), ["trainable_layers", "whole number"]),
    ("fraction params", lambda: mm.uniform_model(7.5, 1), ["n_params", "whole number"]),
    ("fraction text", lambda: mm.parse_count("1.5"), ["parameter count", "whole number"]),
    ("fraction array", lambda: mm.training_memory("gpt2", seq_len=np.array([1.5])), ["seq_len", "fractions"]),
    ("boolean count", lambda: mm.training_memory("gpt2", batch_size=True), ["batch_size", "boolean"]),
    # unknown names
    ("unknown precision", lambda: mm.training_memory("gpt2", precision="fp64"), ["precision", "bf16", "mixed_fp32_grads"]),
    ("unknown optimizer", lambda: mm.training_memory("gpt2", optimizer="lion"), ["optimizer", "adamw", "adafactor"]),
    ("unknown format", lambda: mm.get_format("fp12"), ["format", "fp32", "nf4"]),
    ("unknown preset", lambda: mm.training_memory("gpt5"), ["model", "presets", "llama-2-7b"]),
    ("unknown gpu", lambda: mm.get_gpu("RTX 9090"), ["gpu", "RTX 4090", "H200"]),
    ("unknown unit", lambda: mm.format_bytes(1, "GBs"), ["unit", "GB", "GiB"]),
    ("unknown attention", lambda: mm.training_memory("gpt2", attention="flash"), ["attention", "eager", "sdpa"]),
    ("unknown device", lambda: mm.training_memory("gpt2", device="tpu"), ["device", "cuda", "cpu"]),
    ("unknown lora target", lambda: mm.LoRA(targets=("qkv",)), ["LoRA target", "q, k, v, o, gate, up, down"]),
    ("unknown model_type", lambda: mm.from_hf_config({"model_type": "t5"}), ["model_type", "gpt2, llama, mistral, bert"]),
    ("unknown size text", lambda: mm.parse_bytes("24 gigs"), ["size", "GiB"]),
    ("unknown count text", lambda: mm.parse_count("7 apples"), ["parameter count", "7B"]),
    ("huge size text", lambda: mm.parse_bytes("1e400 GB"), ["size", "at most"]),
    ("adapter format int", lambda: mm.LoRA(adapter_format="int8"), ["adapter_format", "fp32"]),
    # a config missing a field, or with a field of the wrong kind
    ("config no model_type", lambda: mm.from_hf_config({"hidden_size": 768}), ["model_type", "gpt2"]),
    ("config no n_embd", lambda: mm.from_hf_config({"model_type": "gpt2", "n_layer": 12, "n_head": 12,
                                                    "vocab_size": 50257, "n_positions": 1024}), ["n_embd", "missing"]),
    ("config no intermediate", lambda: mm.from_hf_config({
        "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
        "vocab_size": 32000}), ["intermediate_size", "missing"]),
    ("config text field", lambda: mm.from_hf_config({
        "model_type": "bert", "hidden_size": "768", "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512}), ["hidden_size", "whole number"]),
    ("config bad tie", lambda: mm.from_hf_config({
        "model_type": "gpt2", "n_layer": 1, "n_embd": 64, "n_head": 4, "vocab_size": 10, "n_positions": 8,
        "tie_word_embeddings": "yes"}), ["tie_word_embeddings", "true or false"]),
    ("config not json", lambda: mm.from_hf_config("{not json"), ["JSON"]),
    ("config missing file", lambda: mm.from_hf_config("/no/such/dir/config.json"), ["config path", "config.json"]),
    ("config too long path", lambda: mm.from_hf_config("x" * 5000), ["config path", "config.json"]),
    ("config a list", lambda: mm.from_hf_config("[1, 2]"), ["JSON object"]),
    # heads that do not divide the width, kv heads that do not divide heads
    ("heads vs width", lambda: mm.gpt2_model(n_layers=2, hidden_size=768, n_heads=7), ["n_heads", "hidden_size", "divide"]),
    ("kv heads vs heads", lambda: mm.llama_model(**dict(TINY_LLAMA, n_kv_heads=3)), ["n_kv_heads", "n_heads", "divide"]),
    ("kv heads above heads", lambda: mm.llama_model(**dict(TINY_LLAMA, n_kv_heads=8)), ["n_kv_heads", "divide"]),
    ("uniform heads vs width", lambda: mm.uniform_model(1e9, 10, hidden_size=100, n_heads=3), ["n_heads", "divide"]),
    ("config heads vs width", lambda: mm.from_hf_config({
        "model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 30, "num_hidden_layers": 2,
        "intermediate_size": 100, "vocab_size": 10}), ["n_heads", "divide"]),
    # a LoRA target the family lacks
    ("gpt2 gate", lambda: mm.training_memory("gpt2", method=mm.LoRA(targets=("gate",))),
     ["LoRA target", "gate", "gpt2", "allowed: q, k, v, o, up, down"]),
    ("bert gate", lambda: mm.training_memory("bert-base-uncased", method=mm.QLoRA(targets=("q", "gate"))),
     ["gate", "bert", "allowed"]),
    ("lora on uniform", lambda: mm.training_memory(mm.uniform_model(7e9, 32), method=mm.LoRA()),
     ["LoRA", "uniform", "preset"]),
    # methods and layers
    ("freeze both", lambda: mm.Freeze(trainable_layers=1, frozen_layers=1), ["trainable_layers", "frozen_layers"]),
    ("freeze neither", lambda: mm.Freeze(), ["trainable_layers", "frozen_layers"]),
    ("freeze too many", lambda: mm.training_memory("gpt2", method=mm.Freeze(trainable_layers=13)),
     ["trainable_layers", "from 0 to n_layers (12)"]),
    ("freeze plain count", lambda: mm.training_memory(7e9, method=mm.Freeze(trainable_layers=1)), ["Freeze", "layers"]),
    ("adapters without width", lambda: mm.training_memory(mm.uniform_model(7e9, 32), method=mm.Adapters()),
     ["Adapters", "hidden_size"]),
    ("flag not bool", lambda: mm.training_memory("gpt2", checkpointing="yes"), ["checkpointing", "True or False"]),
    ("n_gpus array", lambda: mm.training_memory("gpt2", n_gpus=np.array([2, 4])), ["n_gpus", "single number"]),
    ("kv without heads", lambda: mm.kv_cache_bytes(7e9, context_len=10), ["kv_cache_bytes", "preset"]),
    ("too many params", lambda: mm.llama_model(n_layers=10_000, hidden_size=2**22, n_heads=1024, intermediate_size=2**22,
                                               vocab_size=10), ["parameters", "at most"]),
    ("negative terms seq", lambda: mm.korthikanti_terms(seq_len=-1, batch_size=1, hidden_size=64, n_heads=2),
     ["seq_len", "from 1 to"]),
    ("fraction terms heads", lambda: mm.korthikanti_terms(seq_len=8, batch_size=1, hidden_size=64, n_heads=1.5),
     ["n_heads", "fraction"]),
    ("bad element bits", lambda: mm.working_set_bytes("gpt2", context_len=8, element_bits=12), ["element_bits", "16"]),
]


@pytest.mark.parametrize("call, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_names_the_field_and_what_is_allowed(call, fragments):
    with pytest.raises(ValueError) as error:
        call()
    message = str(error.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"


TYPE_CASES = [
    ("string batch", lambda: mm.training_memory("gpt2", batch_size="4"), ["batch_size"]),
    ("object model", lambda: mm.training_memory(object()), ["model"]),
    ("dict method", lambda: mm.training_memory("gpt2", method={"rank": 8}), ["method"]),
    ("config int", lambda: mm.from_hf_config(42), ["config"]),
    ("format int", lambda: mm.get_format(16), ["format"]),
    ("count list", lambda: mm.parse_count(["7B"]), ["parameter count"]),
    ("bytes int", lambda: mm.parse_bytes(24), ["size"]),
    ("decode a number", lambda: mm.decode_tokens_per_second(5, "H200"), ["InferenceMemory"]),
    ("format array", lambda: mm.format_bytes(np.array([1, 2])), ["to_unit"]),
]


@pytest.mark.parametrize("call, fragments", [c[1:] for c in TYPE_CASES], ids=[c[0] for c in TYPE_CASES])
def test_wrong_kinds_of_object_get_a_type_error_that_says_what_to_pass(call, fragments):
    with pytest.raises(TypeError) as error:
        call()
    for fragment in fragments:
        assert fragment in str(error.value)


@pytest.mark.parametrize("architectures", [{"a": 1}, 3, ["BertModel", 7]])
def test_config_architectures_must_be_a_list_of_names(architectures):
    # transformers writes "architectures" as a JSON list of class names; anything else is refused by name.
    config = {"model_type": "bert", "architectures": architectures, "num_hidden_layers": 2, "hidden_size": 64,
              "num_attention_heads": 2, "intermediate_size": 256, "vocab_size": 100, "max_position_embeddings": 32}
    with pytest.raises(ValueError, match="architectures"):
        mm.from_hf_config(config)

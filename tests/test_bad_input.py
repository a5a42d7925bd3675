"""Bad input gets a ValueError that names the field and says what is allowed; nothing else escapes."""

import numpy as np
import pytest

import memmath as mm
from memmath import validate

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
    ("zero hidden", lambda: mm.models.llama_model(**dict(TINY_LLAMA, hidden_size=0)), ["hidden_size", "from 1 to"]),
    ("zero count", lambda: mm.units.parse_count("0"), ["parameter count", "from 1 to"]),
    ("negative array", lambda: mm.training_memory("gpt2", batch_size=np.array([4, -1])),
     ["batch_size", "outside that range"]),
    # NaN
    ("nan batch", lambda: mm.training_memory("gpt2", batch_size=NAN), ["batch_size", "whole number", "nan"]),
    ("nan params", lambda: mm.uniform_model(NAN, 10), ["n_params", "whole number"]),
    ("nan model", lambda: mm.training_memory(NAN), ["parameter count", "whole number"]),
    ("nan in array", lambda: mm.training_memory("gpt2", seq_len=np.array([128.0, NAN])), ["seq_len", "NaN"]),
    ("nan bytes", lambda: mm.format_bytes(NAN), ["n_bytes", "from 0"]),
    ("nan scale", lambda: mm.formats.round_to_format(1.0, "int8", scale=NAN), ["scale", "number from"]),
    # fractions where counts are needed
    ("fraction batch", lambda: mm.training_memory("gpt2", batch_size=2.5), ["batch_size", "whole number", "fraction"]),
    ("fraction layers", lambda: mm.Freeze(trainable_layers=1.5), ["trainable_layers", "whole number"]),
    ("fraction params", lambda: mm.uniform_model(7.5, 1), ["n_params", "whole number"]),
    ("fraction text", lambda: mm.units.parse_count("1.5"), ["parameter count", "whole number"]),
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
    ("unknown model_type", lambda: mm.from_hf_config({"model_type": "some_new_model"}),
     ["model_type", "text model types", "`memmath models` lists", "--traced"]),
    ("unknown size text", lambda: mm.parse_bytes("24 gigs"), ["size", "GiB"]),
    ("unknown count text", lambda: mm.units.parse_count("7 apples"), ["parameter count", "7B"]),
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
    ("heads vs width", lambda: mm.models.gpt2_model(n_layers=2, hidden_size=768, n_heads=7), ["n_heads", "hidden_size", "divide"]),
    ("kv heads vs heads", lambda: mm.models.llama_model(**dict(TINY_LLAMA, n_kv_heads=3)), ["n_kv_heads", "n_heads", "divide"]),
    ("kv heads above heads", lambda: mm.models.llama_model(**dict(TINY_LLAMA, n_kv_heads=8)), ["n_kv_heads", "divide"]),
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
    ("too many params", lambda: mm.models.llama_model(n_layers=10_000, hidden_size=2**22, n_heads=1024, intermediate_size=2**22,
                                               vocab_size=10), ["parameters", "at most"]),
    ("negative terms seq", lambda: mm.activations.korthikanti_terms(seq_len=-1, batch_size=1, hidden_size=64, n_heads=2),
     ["seq_len", "from 1 to"]),
    ("fraction terms heads", lambda: mm.activations.korthikanti_terms(seq_len=8, batch_size=1, hidden_size=64, n_heads=1.5),
     ["n_heads", "fraction"]),
    ("bad element bits", lambda: mm.inference.working_set_bytes("gpt2", context_len=8, element_bits=12), ["element_bits", "16"]),
    # A sweep is bounded (mm.validate.MAX_SWEEP_POINTS), its arrays broadcast, its values fit int64
    ("sweep too large", lambda: mm.training_memory("gpt2", batch_size=np.ones((30_000, 1), dtype=int),
                                                   seq_len=np.ones((1, 30_000), dtype=int)),
     ["batch_size", "900,000,000 points", "at most 1,048,576 points"]),
    ("sweep not broadcasting", lambda: mm.kv_cache_bytes("gpt2", context_len=np.array([8, 16]),
                                                         batch_size=np.array([1, 2, 3])),
     ["context_len", "broadcast together", "(2,)", "(3,)"]),
    ("uint64 array beyond int64", lambda: validate.count("n_bytes", np.array([2**63], dtype=np.uint64), low=0,
                                                         high=validate.MAX_BYTES),
     ["n_bytes", "in an array (int64", "outside that range"]),
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
    ("count list", lambda: mm.units.parse_count(["7B"]), ["parameter count"]),
    ("bytes int", lambda: mm.parse_bytes(24), ["size"]),
    ("decode a number", lambda: mm.inference.decode_tokens_per_second(5, "H200"), ["InferenceMemory"]),
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


# ---- each case the fuzzing found, as it was reported ------------------------------------------------------
import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

from memmath_lessons.reference import measured  # noqa: E402

GPT2_TINY = dict(model_type="gpt2", n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32)


def _case_row():
    return dict(measured.load_measured().iloc[0])


def _nested(depth):
    """A list nested `depth` deep (a repr of it passes Python's recursion limit)."""
    value = "a"
    for _ in range(depth):
        value = [value]
    return value


ISSUE_14_ERRORS = [
    # exceptions that escaped as KeyError, ZeroDivisionError, AttributeError, NotImplementedError, ...
    ("decode of zeros", lambda: mm.inference.decode_tokens_per_second(mm.inference.InferenceMemory(0, 0, 0, 0, "bf16", "bf16"), "H200"),
     ValueError, ["memory", "weights"]),
    ("frame of ints", lambda: mm.planner.suggestions_frame([1]), TypeError, ["suggestions", "Suggestion"]),
    ("bare Method", lambda: mm.training_memory("gpt2", method=mm.methods.Method()), TypeError, ["method", "LoRA"]),
    ("predict_case {}", lambda: measured.predict_case({}), ValueError, ["column 'family'"]),
    ("predict_peak_case {}", lambda: measured.predict_peak_case({}), ValueError, ["column"]),
    ("saved per layer {}", lambda: measured.predicted_saved_per_layer({}), ValueError, ["column"]),
    ("load nope.json", lambda: measured.load_measured("nope.json"), ValueError, ["shipped data files", "measured_cpu.json"]),
    ("load empty name", lambda: measured.load_measured(""), ValueError, ["shipped data files"]),
    ("metadata of a path", lambda: measured.measured_metadata("../../models.py"), ValueError, ["shipped data files"]),
    ("metadata absolute", lambda: measured.measured_metadata(os.path.abspath(mm.__file__)), ValueError, ["shipped"]),
    ("deep _name_or_path", lambda: mm.from_hf_config(dict(GPT2_TINY, _name_or_path=_nested(5000))),
     ValueError, ["_name_or_path", "string"]),
    # results that were not bytes
    ("negative batch in a row", lambda: measured.predicted_saved_per_layer(dict(_case_row(), batch_size=-1)),
     ValueError, ["batch_size", "from 1 to"]),
    ("round None", lambda: mm.formats.round_to_format(None, "bf16"), TypeError, ["value"]),
    ("format negative bits", lambda: mm.formats.NumberFormat("x", -8, "float", 4, 3, 448.0, 0.125, 2.0**-6, False, ""),
     ValueError, ["bits", "from 1 to 64"]),
    ("gpu negative memory", lambda: mm.gpus.GPU("x", -1, 10**12, 100.0, "datacenter", "1 GB"), ValueError, ["memory_bytes"]),
    ("inference negative", lambda: mm.inference.InferenceMemory(-5, 0, 0, 0, "bf16", "bf16"), ValueError, ["weights", "from 0"]),
    ("fit negative", lambda: mm.gpus.Fit(gpu=mm.GPUS["T4"], required_bytes=-1, available_bytes=10), ValueError, ["required_bytes"]),
    # arrays where a single number is required, ragged lists
    ("uniform vocab array", lambda: mm.uniform_model(1e9, 10, hidden_size=64, n_heads=4, vocab_size=np.array([100, 2**24])),
     ValueError, ["vocab_size", "single number"]),
    ("ragged seq_len", lambda: mm.training_memory("gpt2", seq_len=[[1, 2], [3]]), TypeError, ["seq_len", "rectangular"]),
    ("ragged hidden", lambda: mm.activations.korthikanti_per_layer(seq_len=8, batch_size=1, hidden_size=[[1], 2], n_heads=2),
     ValueError, ["hidden_size", "single number"]),
    ("array element_bytes", lambda: mm.activations.korthikanti_per_layer(seq_len=8, batch_size=1, hidden_size=64, n_heads=2,
                                                             element_bytes=np.array([2, 4])), ValueError, ["element_bytes"]),
    ("lora targets array", lambda: mm.LoRA(targets=np.array([1, 2])), TypeError, ["targets"]),
    ("planner rank sweep", lambda: mm.planner.path_to_fit("gpt2", "T4", method=mm.LoRA(rank=np.array([4, 8])), seq_len=128),
     ValueError, ["method", "single"]),
    ("planner seq sweep", lambda: mm.planner.suggest_changes("gpt2", "T4", seq_len=np.array([128, 256])), ValueError, ["seq_len"]),
    ("replay a number", lambda: measured.predict_case(5), TypeError, ["row"]),
    ("replay a bad attention", lambda: measured.predict_case(dict(_case_row(), attention=3)), TypeError, ["attention"]),
    # a huge integer is quoted by its length, not printed (Python refuses past 4,300 digits)
    ("4301-digit batch", lambda: mm.training_memory("gpt2", batch_size=10**4300), ValueError, ["batch_size", "digits"]),
    ("4301-digit config", lambda: mm.planner.config_from_text('{"model_type": "gpt2", "n_layer": ' + "9" * 4301 + "}"),
     ValueError, ["4,300 digits"]),
    ("config n_layer limit", lambda: mm.from_hf_config(dict(GPT2_TINY, n_layer=2**24)), ValueError,
     ["'n_layer'", "from 1 to 10,000,"]),
    # sweeps past int64: refused by name (they once wrapped around or rounded)
    ("transformers sweep", lambda: mm.training_memory("llama-3-70b", seq_len=np.array([48456, 3612330]),
                                                      batch_size=np.array([5323]), activations="transformers",
                                                      checkpointing=True, dropout=True, attention="eager"),
     ValueError, ["seq_len", "batch_size", "int64"]),
    ("peak sweep", lambda: mm.peak_memory("gpt2", seq_len=np.array([2**22]), batch_size=np.array([2**20])),
     ValueError, ["seq_len", "batch_size", "int64"]),
    ("rank sweep at huge sizes", lambda: mm.training_memory("gpt2", method=mm.LoRA(rank=np.array([1, 2])),
                                                            seq_len=212105, batch_size=283784, activations="textbook",
                                                            attention="eager"),
     ValueError, ["int64"]),
]


@pytest.mark.parametrize("call, kind, fragments", [c[1:] for c in ISSUE_14_ERRORS], ids=[c[0] for c in ISSUE_14_ERRORS])
def test_issue_14_cases_get_an_error_naming_the_field(call, kind, fragments):
    with pytest.raises(kind) as error:
        call()
    for fragment in fragments:
        assert fragment in str(error.value), f"{fragment!r} missing from: {error.value}"


def test_the_scalar_answers_of_the_overflowing_sweeps_are_exact():
    # The scalar calls compute in Python ints: 31,162,350,302,378,111,884 bytes of activations is what the
    # sweep's second point should have been (it returned -5,731,137,845,040,991,348).
    top = mm.training_memory("llama-3-70b", seq_len=3612330, batch_size=5323, activations="transformers",
                             checkpointing=True, dropout=True, attention="eager").activations
    assert isinstance(top, int) and top > 2**63
    first = mm.training_memory("llama-3-70b", seq_len=48456, batch_size=5323, activations="transformers",
                               checkpointing=True, dropout=True, attention="eager").activations
    narrow = mm.training_memory("llama-3-70b", seq_len=np.array([48456]), batch_size=np.array([5323]),
                                activations="transformers", checkpointing=True, dropout=True, attention="eager").activations
    assert int(narrow[0]) == first


def test_a_model_family_is_read_in_any_case():
    # ModelShape("GPT2", ...) passed the check (case-insensitive) but kept "GPT2", a KeyError later.
    shape = mm.ModelShape("GPT2", 2, 64, 4, None, None, 256, 100, 32, True)
    assert shape.family == "gpt2"
    assert shape.n_params == mm.models.gpt2_model(n_layers=2, hidden_size=64, n_heads=4, vocab_size=100,
                                           max_positions=32).n_params


def test_results_are_integer_bytes():
    ws = mm.inference.working_set_bytes("gpt2", context_len=8, element_bits=16.0)
    assert isinstance(ws, int) and ws == mm.inference.working_set_bytes("gpt2", context_len=8, element_bits=16)


def test_get_format_and_get_gpu_refuse_an_object_altered_after_it_was_built():
    fmt = dataclasses.replace(mm.FORMATS["bf16"])
    object.__setattr__(fmt, "bits", -16)  # frozen dataclasses can still be forced
    with pytest.raises(ValueError, match="bits"):
        mm.get_format(fmt)
    gpu = dataclasses.replace(mm.GPUS["T4"])
    object.__setattr__(gpu, "memory_bytes", -1)
    with pytest.raises(ValueError, match="memory_bytes"):
        mm.get_gpu(gpu)


def test_a_very_large_run_does_not_fit_rather_than_failing():
    # training_memory accepts it (22 zettabytes); the planner and check_fit once refused it over required_bytes.
    settings = dict(seq_len=2**22, batch_size=2**20)
    big = mm.training_memory("llama-3-70b", **settings)
    assert big.total > 2**62
    fit = mm.check_fit(big, "T4")
    assert not fit.fits and fit.required_bytes == big.total and fit.headroom_bytes < 0
    path = mm.planner.path_to_fit("llama-3-70b", "T4", max_steps=2, **settings)
    assert path and not path[-1].fits


# ---- config files ------------------------------------------------------------------------------------------
def test_a_config_file_is_read_only_when_it_is_a_regular_json_file(tmp_path):
    good = tmp_path / "config.json"
    good.write_text(json.dumps(GPT2_TINY))
    assert mm.from_hf_config(good).n_layers == 2 and mm.from_hf_config(tmp_path).n_layers == 2
    link = tmp_path / "linked" / "config.json"
    link.parent.mkdir()
    link.symlink_to(good)
    for path in (link, link.parent):  # a link, or a folder whose config.json is one
        with pytest.raises(ValueError, match="symbolic link"):
            mm.from_hf_config(path)
    other = tmp_path / "notes.txt"
    other.write_text(json.dumps(GPT2_TINY))
    with pytest.raises(ValueError, match=r"\.json file"):
        mm.from_hf_config(other)
    with pytest.raises(ValueError, match="not a regular file"):
        mm.from_hf_config("/dev/null" if os.path.exists("/dev/null") else tmp_path / "x")


def test_a_config_file_larger_than_4_mib_is_refused_unread(tmp_path):
    big = tmp_path / "config.json"
    with open(big, "w") as file:
        file.write('{"model_type": "gpt2", "pad": "')
        file.truncate(5 * 2**20)
    with pytest.raises(ValueError, match="4 MiB"):
        mm.from_hf_config(big)
    with pytest.raises(ValueError, match="4 MiB"):
        mm.from_hf_config('{"pad": "' + "x" * (5 * 2**20) + '"}')


def test_messages_about_a_config_quote_field_names_and_short_values_only(tmp_path):
    secret = "s3cr3t-" * 50  # what another JSON file might hold
    path = tmp_path / "other.json"
    for fields in ({"model_type": secret}, dict(GPT2_TINY, n_layer=secret), dict(GPT2_TINY, tie_word_embeddings=secret),
                   {"model_type": "bert", "architectures": secret}):
        path.write_text(json.dumps(fields))
        with pytest.raises(ValueError) as error:
            mm.from_hf_config(path)
        # short: the unsupported-type message lists the ~25 types memmath reads (some 300 characters), never the value
        assert secret not in str(error.value) and len(str(error.value)) < 600, str(error.value)


@pytest.mark.parametrize("build, field", [
    (lambda: dataclasses.replace(mm.training_memory("gpt2"), weights=-1), "weights"),
    (lambda: dataclasses.replace(mm.training_memory("gpt2"), activations=2.5), "activations"),
    (lambda: dataclasses.replace(mm.peak_memory("gpt2", seq_len=8), forward=-3), "forward"),
    (lambda: mm.activations.ActivationEstimate(-1, 1, 0, 0, 0), "per_layer"),
    (lambda: mm.activations.ActivationTerm("mlp", "x", "s*b*h", 2, -64), "bytes"),
    (lambda: mm.planner.Suggestion("x", mm.Run("gpt2"), -5, 1, True), "total"),
])
def test_result_dataclasses_hold_only_non_negative_whole_bytes(build, field):
    with pytest.raises(ValueError if field != "activations" else (ValueError, TypeError), match=field):
        build()

"""Lesson 7 (inference memory): it runs, shows the article's and the papers' numbers, survives its extremes."""

import json
import re

import lessons
import marimo as mo
import pytest

import memmath as mm

NAME = "07_inference"


@pytest.fixture(scope="module")
def default_run():
    return lessons.run(NAME)


# The default run: Llama-3-8B (meta-llama/Meta-Llama-3-8B's config.json: 32 layers, hidden 4096, 32 query and 8
# key/value heads of 128, MLP 14,336, vocabulary 128,256; 8,030,261,248 parameters, the presets' count checked
# against PyTorch) at its trained 8,192 tokens, one sequence, bf16, sdpa, on an RTX 4090.
LLAMA3_8B = 8_030_261_248
LLAMA3_8B_KV = 2 * 32 * 8 * 128 * 2 * 8192  # kipply 2022: 1,073,741,824 B = 1.07 GB
# The prefill working set (working_set_bytes' LLaMA phases, s = 8192, b = 1, e = 2 B): the embeddings and rotary
# tables (s*e*h + 2*e*s*d = 71,303,168) held all pass, plus the MLP phase, the largest: s*e*(3h + 3I) = 905,969,664.
LLAMA3_8B_WORKING = 8192 * 2 * 4096 + 2 * 2 * 8192 * 128 + 8192 * 2 * (3 * 4096 + 3 * 14336)


def test_the_default_kv_cache_is_the_papers_recipe(default_run):
    outputs, defs = default_run
    assert defs["memory"].kv_cache == LLAMA3_8B_KV
    assert "1.07 GB" in lessons.output_text(outputs)
    # The worked example of the "Three parts" section stays Llama-2-13B at 8,192 tokens (kipply 2022):
    # 2 x 40 layers x 40 heads x 128 x 8,192 tokens x 2 B = 6,710,886,400 B = 6.71 GB.
    assert "6.71 GB" in lessons.output_text(outputs)


def test_weights_are_two_bytes_per_parameter(default_run):
    _, defs = default_run
    assert defs["memory"].weights == 2 * LLAMA3_8B
    assert defs["memory"].rule_of_thumb == -(-2 * LLAMA3_8B * 12 // 10)
    assert defs["memory"].working_set == LLAMA3_8B_WORKING
    assert defs["memory"].total == 2 * LLAMA3_8B + LLAMA3_8B_KV + LLAMA3_8B_WORKING == 18_111_537_152


def test_gqa_cuts_the_cache_by_heads_over_kv_heads(default_run):
    _, defs = default_run
    table = defs["gqa_frame"].set_index("model")
    # Per token in bf16: 2 x 32 layers x 32 kv heads x 128 x 2 B = 524,288 B for Llama-2-7B (MHA);
    # Llama-3-8B and Mistral-7B keep 8 kv heads: 131,072 B, a quarter.
    assert table.loc["llama-2-7b", "KB per token"] == pytest.approx(524.3, abs=0.05)
    assert table.loc["llama-3-8b", "KB per token"] == pytest.approx(131.1, abs=0.05)
    assert table.loc["mistral-7b", "cut (heads / kv)"] == 4


def test_rule_of_thumb_limit_for_llama_2_7b_is_shown(default_run):
    outputs, _ = default_run
    # Hand-derived in tests/test_inference.py: 2,695,366,247 B of allowance / 623,616 B per token.
    assert "4,322 tokens" in lessons.output_text(outputs)


def test_decode_bound_is_bandwidth_over_bytes_read(default_run):
    _, defs = default_run
    # RTX 4090: 1,008 GB/s (NVIDIA datasheet); each step reads the weights and the KV cache.
    expected = 1008e9 / (2 * LLAMA3_8B + LLAMA3_8B_KV)
    assert defs["per_sequence"] == pytest.approx(expected)


def test_the_default_run_fits_and_decodes(default_run):
    # 18,111,537,152 B against the 4090's 24,138 MiB usable (24,564 reported less an Ada card's 426 MiB CUDA context,
    # measured on an RTX 6000 Ada): 25,310,527,488 - 18,111,537,152 = 7,198,990,336 B spare.
    outputs, _ = default_run
    text = _plain(outputs)
    assert "fits on one RTX 4090, with 7.20 GB to spare" in text
    assert "does not fit on one" not in text and "No single GPU" not in text and "does not decode there" not in text
    assert f"at most {1008e9 / (2 * LLAMA3_8B + LLAMA3_8B_KV):,.1f} tokens/s per sequence" in text


def test_every_control_at_both_ends():
    seen = set()
    for control, which, outputs, defs in lessons.extreme_runs(NAME):
        seen.add(control)
        assert lessons.bad_text(outputs) == [], (control, which)
        assert defs["memory"].total > 0
        assert not re.search(r"\b1 times\b", _plain(outputs)), (control, which)
    assert {"model_dropdown", "source_radio", "context_slider", "batch_slider", "weights_format_dropdown",
            "kv_format_dropdown", "attention_radio", "gpu_dropdown", "unit_radio"} <= seen


def _plain(outputs):
    return lessons.plain_text(outputs)  # the visible words, nested callouts and folds unescaped


def _run(**controls):
    made = {}
    if "paste" in controls:
        made["source_radio"] = mo.ui.radio(["preset", "paste config.json"], value="paste config.json")
        if controls["paste"] is not None:
            made["config_text_area"] = mo.ui.text_area(value=controls["paste"])
    if "weights" in controls:
        made["weights_format_dropdown"] = mo.ui.dropdown(["fp32", "bf16", "fp8_e4m3", "int8", "int4", "nf4"],
                                                         value=controls["weights"])
    if "context" in controls:
        made["context_slider"] = mo.ui.slider(steps=[2**k for k in range(7, 18)], value=controls["context"])
    if "batch" in controls:
        made["batch_slider"] = mo.ui.slider(steps=[2**k for k in range(0, 9)], value=controls["batch"])
    if "attention" in controls:
        made["attention_radio"] = mo.ui.radio(["sdpa", "eager"], value=controls["attention"])
    if "model" in controls:
        made["model_dropdown"] = mo.ui.dropdown(list(mm.PRESETS), value=controls["model"])
    if "gpu" in controls:
        made["gpu_dropdown"] = mo.ui.dropdown(list(mm.GPUS), value=controls["gpu"])
    return lessons.run_with(NAME, **made)


def test_an_impossible_working_set_says_what_it_means():
    # Llama-2-13B, 131,072 tokens x 256 sequences, eager attention: 40 heads x 131,072^2 scores x 256
    # sequences x 10 B (bf16 scores plus LLaMA's fp32 softmax) = 1.76e15 B, about 5,700 of the largest cards.
    outputs, defs = _run(model="llama-2-13b", context=131072, batch=256, attention="eager")
    assert defs["memory"].working_set > 40 * 131072**2 * 256 * 10
    text = _plain(outputs)
    assert "No single GPU holds this" in text and "B300" in text
    # The largest cards hold 288 GiB = 294,912 MiB (NVIDIA HGX B300, AMD MI355X datasheets; the B300 comes first in
    # the catalog); less the 1,343 MiB CUDA context, 293,569 MiB are usable.
    assert f"is {defs['memory'].total / (293_569 * 2**20):,.0f} times what the largest card" in text
    assert "eager attention's scores" in text and "40 heads x 131,072 x 131,072 scores x 256 sequences" in text


@pytest.mark.parametrize("model, trained", [
    # max_position_embeddings in meta-llama/Llama-2-13b-hf's config.json: 4096; GPT-3: 2,048 (Brown et al. 2020).
    ("llama-2-13b", 4096), ("gpt3-175b", 2048), ("mistral-7b", 32768),
])
def test_every_model_with_a_known_trained_context_warns_past_it(model, trained):
    outputs, _ = _run(model=model, context=65536)
    assert f"{model} was trained on at most {trained:,} tokens" in _plain(outputs)
    outputs, _ = _run(model=model, context=trained)
    assert "was trained on at most" not in _plain(outputs)


def test_a_run_just_past_the_largest_card_says_how_many_times():
    # GPT-3 175B in bf16 (174,604,259,328 parameters, Brown et al. 2020): 349.2 GB of weights alone, more than the
    # B300's 307.83 GB usable (293,569 MiB). The multiple has one decimal below ten: never "1 times".
    outputs, defs = _run(model="gpt3-175b", context=2048)
    ratio = defs["memory"].total / (293_569 * 2**20)
    assert 1 < ratio < 2
    assert f"is {ratio:,.1f} times what the largest card in the catalog can use" in _plain(outputs)


def test_decode_bound_only_for_cards_the_model_fits():
    # Llama-2-13B in bf16 at 8,192 tokens: 26.03 GB of weights + 6.71 GB of cache, more than a 4090's 24.35 GB usable.
    outputs, defs = _run(model="llama-2-13b")
    table = defs["fit_frame"]
    assert "does not decode there at all" in _plain(outputs)
    assert set(table["fits"]) == {"yes", "no"}
    for fits, bound in zip(table["fits"], table["decode bound (tokens/s)"]):
        assert (bound == "does not fit") == (fits == "no")
    outputs, _ = _run(gpu="A100 80GB")
    assert "does not decode there at all" not in _plain(outputs)


def test_fp8_weights_on_a_card_without_fp8_arithmetic_say_so():
    # The RTX 3090 is Ampere (compute capability 8.6): bf16 tensor cores, no fp8 (NVIDIA: fp8 from 8.9 on).
    import marimo as mo
    outputs, _ = lessons.run_with(NAME, gpu_dropdown=mo.ui.dropdown(list(mm.GPUS), value="RTX 3090"),
                                  weights_format_dropdown=mo.ui.dropdown(["bf16", "fp8_e4m3"], value="fp8_e4m3"))
    assert "RTX 3090 (Ampere) has no fp8 arithmetic" in _plain(outputs)
    outputs, _ = lessons.run_with(NAME, gpu_dropdown=mo.ui.dropdown(list(mm.GPUS), value="RTX 4090"),
                                  weights_format_dropdown=mo.ui.dropdown(["bf16", "fp8_e4m3"], value="fp8_e4m3"))
    assert "no fp8 arithmetic" not in _plain(outputs)


# ---- the core path, the CUDA reserve, what a slider move re-runs ----------------------------------
def test_core_path_comes_first_claim_control_number_takeaway(default_run):
    # The article's claim, the one control, the number with its recipe, the takeaway, then the sections.
    outputs, _ = default_run
    text = _plain(outputs)
    places = [text.index(s) for s in ("The claim.", "The control.", "The number.", "The takeaway.", "Three parts")]
    assert places == sorted(places), places
    # kipply 2022: 2 x 32 layers x 8 kv heads x 128 x 2 B x 8,192 tokens x 1 sequence = 1,073,741,824 B.
    assert ("1.07 GB = 2 (key and value) x 32 layers x 8 key/value heads x 128 x 2 B (bf16) x 8,192 tokens x 1 sequence"
            in text)


def test_the_verdict_keeps_the_cuda_context_back(default_run):
    # RTX 4090: 24,564 MiB reported (nvidia-smi); an Ada card's CUDA context, 426 MiB (0.42 GiB) measured on an RTX
    # 6000 Ada (unslothai/unsloth-zoo pull request 1053), leaves 24,138 MiB = 25,310,527,488 B = 25.31 GB usable.
    outputs, defs = default_run
    text = _plain(outputs)
    assert ("426 MiB (0.42 GiB) are kept back for the CUDA context, which the driver takes before PyTorch allocates "
            "anything") in text
    assert "unsloth-zoo pull request 1053" in text and "25.31 GB are usable" in text
    row = defs["fit_frame"].set_index("gpu").loc["RTX 4090"]
    spare = 24_138 * 2**20 - defs["memory"].total
    assert row["headroom (GB)"] == f"{spare / 1e9:,.2f} GB spare"


def test_every_card_in_the_table_keeps_the_reserve():
    # Every card the table says holds the run keeps its CUDA context free beside it, and every "no" lacks room for
    # both (each card's memory as the driver reports it, from the catalog's sources). The contexts: 426 MiB on Ada
    # (an RTX 6000 Ada's, unslothai/unsloth-zoo pull request 1053), 256 MiB on Ampere GA10x (an RTX 3090's,
    # invoke-ai/InvokeAI issue 9413), else 1,343 MiB (a V100's, Hugging Face's Model training anatomy).
    ada = {"RTX 4060 Ti 16GB", "RTX 4080", "RTX 4090", "L4", "L40S"}
    ga10x = {"RTX 3060", "RTX 3090", "A10G", "RTX A6000"}
    _, defs = _run(model="llama-2-7b", context=1024)
    for gpu, fits in zip(defs["fit_frame"]["gpu"], defs["fit_frame"]["fits"]):
        context = 426 if gpu in ada else 256 if gpu in ga10x else 1343
        room = mm.get_gpu(gpu).memory_bytes - context * 2**20 - defs["memory"].total
        assert (fits == "yes") == (room >= 0), gpu



@pytest.mark.parametrize("control", ["context_slider", "batch_slider"])
def test_a_slider_move_reruns_one_cell(control):
    # Every re-run cell costs marimo 6-10 ms of its own; one cell computes the run and feeds both charts.
    assert len(lessons.cells_rerun_by(NAME, control)) == 1


# ---- sliding windows: the recipe multiplies to the number shown -------------------------------------------
def _recipe_bytes(text):
    """The KV cache recipe after "KV cache at this context: SIZE = ", evaluated: its factors multiplied."""
    recipe = text.split("KV cache at this context:", 1)[1].split(" = ", 1)[1].split(" sequence", 1)[0]
    recipe = re.sub(r"\((key and value|the window|[a-z0-9_]+)\)", "", recipe).replace(",", "")
    expression = re.sub(r"[A-Za-z/\-]+", "", recipe.replace(" x ", " * "))
    return eval(expression)  # digits, *, +, ( and ) only


@pytest.mark.parametrize("model, context, expected, shown", [
    # mistralai/Mistral-7B-v0.1: 32 layers, all sliding over 4,096 tokens, 8 key/value heads of 128:
    # 2 x 32 x 8 x 128 x 2 B x 4,096 = 536,870,912 B, not the 1.07 GB 8,192 tokens would take.
    ("mistral-7b", 8192, 2 * 32 * 8 * 128 * 2 * 4096,
     "0.54 GB = 2 (key and value) x 32 sliding-window layers x 8 key/value heads x 128 x 2 B (bf16) x 4,096 tokens "
     "(the window) x 1 sequence"),
    # google/gemma-2-9b: 42 layers alternating sliding (4,096) and full, 8 key/value heads of 256:
    # 2 x 8 x 256 x 2 B x (21 x 8,192 + 21 x 4,096) = 2,113,929,216 B.
    ("gemma-2-9b", 8192, 2 * 8 * 256 * 2 * (21 * 8192 + 21 * 4096),
     "2.11 GB = 2 (key and value) x 8 key/value heads x 256 x 2 B (bf16) x (21 full-attention layers x 8,192 tokens "
     "+ 21 sliding-window layers x 4,096 tokens (the window)) x 1 sequence"),
    # microsoft/Phi-3-mini-4k-instruct: 32 layers sliding over 2,047 tokens, 32 key/value heads of 96.
    ("phi-3-mini", 2048, 2 * 32 * 32 * 96 * 2 * 2047, "0.80 GB = 2 (key and value) x 32 sliding-window layers"),
])
def test_a_sliding_window_model_names_its_window_and_its_recipe_adds_up(model, context, expected, shown):
    outputs, defs = _run(model=model, context=context)
    text = _plain(outputs)
    assert defs["memory"].kv_cache == expected
    assert shown in text and "sliding window" in text
    assert _recipe_bytes(text) == expected


@pytest.mark.parametrize("model", [n for n, s in mm.PRESETS.items() if s.family != "bert" and s.sliding_window])
@pytest.mark.parametrize("context", [128, 131072])
def test_every_recipe_multiplies_to_its_cache(model, context):
    outputs, defs = _run(model=model, context=context)
    assert _recipe_bytes(_plain(outputs)) == defs["memory"].kv_cache


# ---- a mixture of experts: its active parameters and what a decode step reads ------------------------------
def test_moe_facts_and_decode_bound_read_only_the_active_experts():
    # Qwen/Qwen3-30B-A3B's config.json (tests/test_inference.py derives it): 3,353,032,704 active parameters,
    # 8 of 128 experts per layer; at batch 1 a step reads them in bf16 (6,706,065,408 B) plus the cache at 8,192
    # tokens, 2 x 48 x 4 x 128 x 2 B x 8,192 = 805,306,368 B. H200: 4.8 TB/s (NVIDIA).
    outputs, defs = _run(model="qwen3-30b-a3b", gpu="H200")
    text = _plain(outputs)
    assert "30,532,122,624 parameters (30.5B), of which 3,353,032,704 (3.35B) are active per token" in text
    assert "8 of its 128 experts in each layer" in text
    assert defs["read_per_step"] == 6_706_065_408 + 805_306_368
    assert defs["per_sequence"] == pytest.approx(4.8e12 / (6_706_065_408 + 805_306_368))
    assert "reads 7.51 GB per step (the shared weights and 8 of the 128 experts in each layer, 6.71 GB" in text


def test_moe_at_a_batch_states_its_assumption():
    # 4 tokens x 8 experts = 32 of 128 experts per layer at most: the lesson says it assumes that many.
    outputs, defs = _run(model="qwen3-30b-a3b", gpu="H200", batch=4)
    assert "min(128, 4 x 8) = 32 distinct experts per layer" in _plain(outputs)
    per_layer_experts = 3 * 2048 * 768 * 2  # bf16 bytes of one expert
    assert defs["memory"].weights_read == defs["memory"].weights - 48 * (128 - 32) * per_layer_experts


# ---- a pasted config.json, as in lesson 8 ---------------------------------------------------------------
def test_the_default_paste_is_gemma_3_and_its_cache_mixes_windows():
    # google/gemma-3-1b-pt: 26 layers, every sixth full (4), the others sliding over 512 tokens; 1 key/value head of
    # 256. At 8,192 tokens: 2 x 1 x 256 x 2 B x (4 x 8,192 + 22 x 512) = 45,088,768 B = 45.09 MB.
    outputs, defs = _run(paste=None)
    text = _plain(outputs)
    assert defs["memory"].kv_cache == 2 * 256 * 2 * (4 * 8192 + 22 * 512) == 45_088_768
    assert "Your config.json" in text and "999,885,952 parameters" in text  # the model card's 1B, counted by PyTorch
    assert ("45.09 MB = 2 (key and value) x 1 key/value head x 256 x 2 B (bf16) x (4 full-attention layers x 8,192 "
            "tokens + 22 sliding-window layers x 512 tokens (the window)) x 1 sequence") in text
    assert lessons.bad_text(outputs) == []


@pytest.mark.parametrize("paste, said", [
    ("not json", "not valid JSON"),
    ("", "paste the contents of a transformers config.json"),
    ('{"model_type": "falcon", "hidden_size": 4544}', "is not supported"),
    ('{"model_type": "llama", "hidden_size": 4096}', "missing the field"),
    (json.dumps({"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                 "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512}), "keeps no KV cache"),
    ('{"model_type": "llama", "hidden_size": -5, "num_hidden_layers": 2, "num_attention_heads": 2, '
     '"intermediate_size": 8, "vocab_size": 10}', "cannot be used"),
])
def test_a_bad_paste_shows_the_error_in_the_page(paste, said):
    outputs, defs = _run(paste=paste)
    text = _plain(outputs)
    assert "This config.json cannot be used" in text and said in text
    assert "Traceback" not in lessons.output_text(outputs) and lessons.bad_text(outputs) == []
    assert defs["model"] is None and "No model to serve" in text


# ---- one model in one format: lesson 1, lesson 7 and `memmath infer --json` agree -------------------------
@pytest.mark.parametrize("model, weights", [("llama-2-13b", "int8"), ("llama-2-13b", "nf4"), ("mixtral-8x7b", "nf4")])
def test_lessons_1_and_7_and_the_command_line_agree_on_a_quantized_model(model, weights, capsys):
    from memmath import cli
    assert cli.main(["infer", model, "--weights", weights, "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)["parts"]
    loaded = parts["weights"] + parts["quantization_constants"]  # as transformers + bitsandbytes store it
    _, defs7 = _run(model=model, weights=weights)
    assert defs7["memory"].weights + defs7["memory"].quantization_constants == loaded
    row = defs7["formats_frame"].set_index("format").loc[weights]
    assert row["weights (GB)"] + row["constants (GB)"] == pytest.approx(loaded / 1e9, abs=0.006)
    # Lesson 1, the same preset and format: both schemes, each named; the bitsandbytes one is the command line's.
    outputs1, _ = lessons.run_with("01_weights_and_formats",
                                   preset_dropdown=mo.ui.dropdown({model: model}, value=model),
                                   format_dropdown=mo.ui.dropdown(["bf16", weights], value=weights))
    text1 = lessons.plain_text(outputs1)
    every = mm.inference_memory(mm.PRESETS[model].n_params, weights_format=weights)
    assert f"{mm.format_bytes(every.weights + every.quantization_constants)} in all" in text1
    assert f"every weight in {weights}" in text1
    assert "Loaded through transformers with bitsandbytes" in text1 and f"it takes {mm.format_bytes(loaded)}" in text1
    # The lesson 7 table's last column is lesson 1's first figure.
    assert row["every weight in the format (GB)"] == pytest.approx(
        (every.weights + every.quantization_constants) / 1e9, abs=0.006)


def test_problem_five_decodes_a_moe_at_batch_1_and_32(default_run):
    # Qwen3-30B-A3B on an H100 (3.35 TB/s, NVIDIA) at 4,096 tokens: batch 1 reads 6,706,065,408 B of active weights
    # + 2 x 48 x 4 x 128 x 2 B x 4,096 = 402,653,184 B of cache; batch 32 sends 256 tokens-to-experts per layer,
    # enough to reach all 128 experts, so every weight is read (61,064,245,248 B) plus 32 caches.
    outputs, _ = default_run
    text = _plain(outputs)
    assert f"at most {3.35e12 / (6_706_065_408 + 402_653_184):,.0f} tokens/s" in text
    assert "At batch 32, 32 x 8 = 256 routings can reach all 128 experts of a layer" in text
    assert f"at most {3.35e12 / (61_064_245_248 + 32 * 402_653_184):,.1f} tokens/s per sequence" in text


def test_the_verdict_names_what_fits_instead_as_the_command_line_does(capsys):
    # Llama-2-13B in bf16 at 8,192 tokens on an RTX 4090 (26.03 GB of weights alone, 24.35 GB usable): the lesson reads
    # plan.instead, the changes `memmath infer` lists as fitting, each at the command line's total.
    from memmath import cli

    assert cli.main(["infer", "llama-2-13b", "--context", "8192", "--gpu", "RTX 4090", "--json"]) == 1
    fitting = [c for c in json.loads(capsys.readouterr().out)["changes"] if c["fits"]]
    assert [c["change"] for c in fitting] == ["weights in nf4", "weights in int8"]
    outputs, defs = _run(model="llama-2-13b", context=8192, gpu="RTX 4090")
    assert defs["plan"].fits is False and defs["plan"].serve == mm.Serve("llama-2-13b", context_len=8192)
    shown = " or ".join(f"{c['change']} ({mm.format_bytes(c['required_bytes'])})" for c in fitting)
    assert f"what fits instead, with 5% to spare: {shown}" in " ".join(_plain(outputs).split())
    outputs, defs = _run(model="llama-2-7b", context=2048, gpu="RTX 4090")
    assert defs["plan"].fits and "what fits instead" not in _plain(outputs)


@pytest.mark.parametrize("model", ["lfm2-1.2b", "qwen3-next-80b-a3b"])
def test_a_hybrid_with_an_8_bit_cache_is_refused_by_name_not_crashed(model):
    # transformers 5.24's QuantizedCache raises for a model whose layers keep a conv or recurrent state, so an fp8 or
    # int8 cache for these hybrids is refused: the lesson says why, and its charts hold no earlier run's numbers.
    outputs, defs = lessons.run_with("07_inference", model_dropdown=mo.ui.dropdown([model], value=model),
                                     kv_format_dropdown=mo.ui.dropdown(["fp8_e4m3"], value="fp8_e4m3"))
    assert lessons.bad_text(outputs) == []
    text = _plain(outputs)
    assert "No answer for this cache format." in text and "QuantizedCache" in text
    assert "plan" not in defs

"""Lesson 1, weights and number formats: it runs, reproduces the article's 14 GB, and survives every control's extremes."""

import lessons
import marimo as mo
import pytest

import memmath as mm
from memmath_lessons import viz

LESSON = "01_weights_and_formats"


@pytest.fixture(scope="module")
def default_run():
    return lessons.run(LESSON)


def test_runs_and_shows_nothing_bad(default_run):
    outputs, _ = default_run
    assert lessons.bad_text(outputs) == []


def test_the_articles_14_gb(default_run):
    outputs, defs = default_run
    # The article: 7B parameters x 16 bits / 8 = 14,000,000,000 bytes = 14 GB.
    assert defs["article_weight_bytes"] == 7_000_000_000 * 16 // 8
    assert "14.00 GB" in lessons.output_text(outputs)
    # The default controls (7B slider, bf16) show the same model.
    assert defs["n_params"] == 7_000_000_000 and defs["weight_bytes"] == 14 * 10**9


def test_rounding_table_at_the_default_value(default_run):
    _, defs = default_run
    table = defs["rounding_table"].set_index("format")
    # 0.1 in bf16: 0.1 = 1.6 x 2**-4; with 7 mantissa bits the step is 2**-11, and
    # round(0.1 / 2**-11) = round(204.8) = 205 steps = 0.10009765625.
    assert table.loc["bf16", "stored value"] == "0.100097656"
    # int8 with a block absmax of 1: round(0.1 x 127) = 13 steps of 1/127 = 0.102362205 (9 digits).
    assert table.loc["int8", "stored value"] == "0.102362205"
    # fp32 keeps 24 significant bits: 0.1 = 13,421,773 x 2**-27 = 0.100000001490116, not 0.1.
    assert table.loc["fp32", "stored value"] == "0.100000001"


def test_problem_one_counts_the_scales_it_names(default_run):
    _, defs = default_run
    # Llama-2-13B (h=5120, L=40, I=13824, V=32000, untied): 2*V*h + h + L*(4h^2 + 3hI + 2h) = 13,015,864,320.
    n = 2 * 32000 * 5120 + 5120 + 40 * (4 * 5120**2 + 3 * 5120 * 13824 + 2 * 5120)
    assert n == 13_015_864_320
    # nf4: 4 bits each, plus one 4-byte fp32 scale per 64 weights (ceil(n / 64) blocks), as the problem says.
    assert defs["answer_13b_nf4"] == n // 2 + -(-n // 64) * 4
    # Double quantization: one 1-byte scale per 64, one 4-byte constant per 256 scales (QLoRA, section 3).
    blocks = -(-n // 64)
    assert defs["answer_13b_nf4_dq"] == n // 2 + blocks + -(-blocks // 256) * 4


def test_overflow_is_shown_not_hidden():
    # 70,000 is past fp16's largest value, 65,504 = (2 - 2**-10) x 2**15 (IEEE-754 half precision).
    value = mm.get_format("fp16").max_value
    assert value == (2 - 2.0**-10) * 2.0**15
    outputs, defs = lessons.run_with(LESSON, value_number=lessons.mo.ui.number(start=-1e6, stop=1e6, value=70_000))
    table = defs["rounding_table"].set_index("format")
    assert table.loc["fp16", "stored value"] == "infinity"
    assert table.loc["fp8_e4m3", "what happened"].startswith("overflow")
    assert lessons.bad_text(outputs) == []


def test_fit_table_matches_hand_arithmetic(default_run):
    _, defs = default_run
    fits = defs["gpu_fits"].set_index("gpu")
    # 14e9 B of weights: an RTX 3060 reports 12,288 MiB = 12,884,901,888 B (too small);
    # an RTX 4090 reports 24,564 MiB = 25,757,220,864 B (fits).
    assert not fits.loc["RTX 3060", "fits"] and fits.loc["RTX 4090", "fits"]


def test_every_control_at_its_extremes():
    seen = set()
    for control, which, outputs, defs in lessons.extreme_runs(LESSON):
        seen.add(control)
        assert lessons.bad_text(outputs) == [], (control, which)
        assert defs["weight_bytes"] > 0
    assert {"params_slider", "preset_dropdown", "format_dropdown", "unit_radio", "value_number",
            "block_absmax_slider", "context_checkbox"} <= seen


def test_largest_slider_model_is_over_400b():
    _, defs = lessons.run_with(LESSON, params_slider=lessons.mo.ui.slider(steps=[0.1, 1000], value=1000))
    assert defs["n_params"] >= 400 * 10**9


def test_cuda_context_checkbox_sets_aside_each_cards_measured_mebibytes():
    # Ticked, each card keeps its own context back (check_fit's default): an RTX 4090 (Ada) 426 MiB, measured on an
    # RTX 6000 Ada (unslothai/unsloth-zoo pull request 1053); an H100 1,343 MiB, Hugging Face's V100 figure ("1343 MB"
    # from pynvml's info.used // 1024**2 in "Model training anatomy", so MiB), a conservative bound.
    _, off = lessons.run_with(LESSON)
    _, defs = lessons.run_with(LESSON, context_checkbox=mo.ui.checkbox(value=True))
    assert defs["reserved_bytes"] is None and off["reserved_bytes"] == 0
    less = off["gpu_fits"].set_index("gpu")["headroom (GB)"] - defs["gpu_fits"].set_index("gpu")["headroom (GB)"]
    assert round(less["RTX 4090"] * 1e9) == 426 * 2**20 and round(less["H100 80GB"] * 1e9) == 1_408_237_568


def test_format_chart_labels_totals_rounded_once(default_run):
    # int4 at 7B: 4 bits + one fp32 absmax per 64 weights (32 / 64 = 0.5 bits) = 4.5 bits x 7e9 / 8 = 3.9375e9 B,
    # labelled 3.94 GB; fp32: 28.00 GB. The label is the total rounded once, the same on every part's row.
    _, defs = default_run
    grid = defs["formats_grid"]
    seven = grid[grid["size"] == defs["viz"].MODEL_SIZE_STEPS.index(7)]
    totals = seven.groupby("format")["totalGB"].agg(["min", "max"])
    assert (totals["min"] == totals["max"]).all()
    assert totals.loc["int4", "max"] == 3.94 and totals.loc["fp32", "max"] == 28.0


def test_a_move_re_runs_one_cell():
    # Every cell a move re-runs costs marimo ~6-10 ms whatever it does. The size slider re-ran six, then
    # two; now one, which fills the callout, the format chart's rows and the cards' verdicts, chart and table.
    for control in ("params_slider", "preset_dropdown", "format_dropdown", "unit_radio", "block_absmax_slider",
                    "value_number", "context_checkbox"):
        assert len(lessons.cells_rerun_by(LESSON, control)) == 1, control


def test_the_core_path_comes_first(default_run):
    # The claim, the control, the number with its recipe, the takeaway; then the sections.
    outputs, _ = default_run
    text = lessons.plain_text(outputs)
    claim = text.index("the bytes needed per parameter set the weight memory")
    number = text.index("7,000,000,000 parameters (7B) × 16 bits ÷ 8 = 14.00 GB of weights in bf16")
    takeaway = text.index("Takeaway:")
    deeper = text.index("The formula")
    assert claim < number < takeaway < deeper


def test_the_format_chart_follows_the_size():
    # Live, the marimo slider moves the chart (one control per quantity): at 70B, 70e9 x 4 B = 280 GB in fp32,
    # x 2 B = 140 GB in bf16; int8 adds one 4-byte scale per 64 weights: 70e9 / 64 x 4 = 4.375e9 B.
    _, defs = lessons.run_with(LESSON, params_slider=lessons.mo.ui.slider(steps=list(viz.MODEL_SIZE_STEPS), value=70))
    chart = defs["formats_chart"]
    assert chart.signals["caption"] == "Model size: 70B parameters"
    (rows,) = chart.rows.values()
    gb = {(r["format"], r["part"]): r["GB"] for r in rows}
    assert gb[("fp32", "Weights")] == 280 and gb[("bf16", "Weights")] == 140
    assert gb[("int8", "Weights")] == 70 and gb[("int8", "Quantization constants")] == 4.375


RESERVE_WORDS = ("426 MiB", "RTX 6000 Ada", "256 MiB", "RTX 3090", "1,343 MiB", "before PyTorch allocates any tensor",
                 "V100", "Model training anatomy", "lazy module loading")


def test_the_cuda_reserve_is_said_with_its_number_and_source(default_run):
    # Where the lesson says which cards hold the weights, one sentence says what is reserved and why.
    outputs, _ = default_run
    text = lessons.plain_text(outputs)
    assert "Reserved: nothing for the CUDA context" in text and all(w in text for w in RESERVE_WORDS)
    outputs, on = lessons.run_with(LESSON, context_checkbox=mo.ui.checkbox(value=True))
    text = lessons.plain_text(outputs)
    assert "Reserved: each card's CUDA context" in text
    assert all(w in text for w in RESERVE_WORDS)
    _, off = default_run
    less = off["gpu_fits"].set_index("gpu")["headroom (GB)"] - on["gpu_fits"].set_index("gpu")["headroom (GB)"]
    # 426 MiB = 0.446693376 GB on the Ada cards, 256 MiB = 0.268435456 GB on Ampere GA10x, 612 MiB = 0.641728512 GB
    # on the B200 and GB200, 1,343 MiB elsewhere.
    assert less.round(9).isin([0.446693376, 0.268435456, 0.641728512, 1.408237568]).all()
    assert less.round(9)["RTX 3090"] == 0.268435456 and less.round(9)["L40S"] == 0.446693376
    assert less.round(9)["B200"] == 0.641728512


def _preset_run(preset, weights_format):
    return lessons.run_with(LESSON, preset_dropdown=mo.ui.dropdown({preset: preset}, value=preset),
                            format_dropdown=mo.ui.dropdown(list(dict.fromkeys(["bf16", weights_format])), value=weights_format))


def test_a_published_model_in_an_integer_format_names_both_schemes():
    # mistralai/Mixtral-8x7B-v0.1 in nf4. Every weight in nf4: 46,702,792,704 / 2 B + 729,731,136 blocks of 64 +
    # 4 B x 2,850,513 groups of 256 = 24,092,529,540 B = 24.09 GB (QLoRA's double quantization).
    n = 46_702_792_704
    every = n // 2 + 729_731_136 + 4 * 2_850_513
    assert mm.inference_memory(n, weights_format="nf4").weights + mm.inference_memory(
        n, weights_format="nf4").quantization_constants == every
    # Through transformers + bitsandbytes only nn.Linear becomes nf4 (q, k, v, o: 41,943,040 weights a layer, at 0.5 B,
    # with 665,600 B of constants); the 3-D experts (1,409,286,144 a layer), router, norms, embeddings and head stay
    # bf16: 32 x (20,971,520 + 665,600 + 2 x (1,409,286,144 + 32,768 + 8,192)) + 2 x (2 x 131,072,000 + 4,096).
    loaded = 32 * (20_971_520 + 665_600 + 2 * (1_409_286_144 + 32_768 + 8_192)) + 2 * (2 * 131_072_000 + 4_096)
    outputs, _ = _preset_run("mixtral-8x7b", "nf4")
    text = lessons.plain_text(outputs)
    assert f"{mm.format_bytes(every)} in all. That is with every weight in nf4" in text
    assert every == 24_092_529_540 and loaded == 91_413_618_688
    assert "Loaded through transformers with bitsandbytes" in text
    assert f"it takes {mm.format_bytes(loaded)} : the size lesson 7 and memmath infer give" in text
    assert "routed experts (3-D tensors, not nn.Linear)" in text
    assert lessons.bad_text(outputs) == []


def test_a_bare_parameter_count_or_a_float_format_has_one_scheme(default_run):
    outputs, _ = default_run  # 7B parameters, bf16
    assert "bitsandbytes, which converts only" not in lessons.plain_text(outputs)
    outputs, _ = _preset_run("llama-2-13b", "bf16")
    assert "bitsandbytes, which converts only" not in lessons.plain_text(outputs)


def test_problem_one_gives_the_bitsandbytes_size_too(default_run):
    # Llama-2-13B in nf4 through transformers + bitsandbytes: 7,201,418,240 B (tests/test_inference.py derives it).
    outputs, defs = default_run
    assert defs["answer_13b_nf4_loaded"] == 7_201_418_240
    assert "7.20 GB, the size lesson 7 gives" in lessons.plain_text(outputs)


def test_the_format_chart_follows_the_unit():
    # The chart drew GB whatever the Unit said. 7B in bf16 is 14e9 B = 14e9 / 2**30 = 13.0385 GiB;
    # int8 adds 7e9 / 64 x 4 B = 437,500,000 B of scales: 7.4375e9 B in all = 6.93 GiB.
    _, defs = lessons.run_with(LESSON, unit_radio=mo.ui.radio(options=["GB", "GiB"], value="GiB"))
    chart = defs["formats_chart"]
    (rows,) = chart.rows.values()
    gib = {(r["format"], r["part"]): r["GiB"] for r in rows}
    totals = {r["format"]: r["totalGiB"] for r in rows}
    assert gib[("bf16", "Weights")] == 13.0385 and totals["int8"] == 6.93
    spec = str(chart.spec)
    assert "Memory (GiB)" in spec and "Weights in each format (GiB)" in spec and "(GB)" not in spec


def test_model_menu_counts_read_as_counts():
    # gemma-3-1b's 999,885,952 parameters showed as "1e+03M": three significant digits of 0.99989B are 1.00B.
    options = list(viz.model_size_controls()[1].options)
    assert "gemma-3-1b (1.00B parameters)" in options
    assert not [o for o in options if "e+" in o], options


def test_a_mixture_of_experts_says_its_active_parameters():
    # Mixtral-8x7B (model card: 46.7B parameters, 12.9B active per token): 32 layers route each token to 2 of 8
    # experts of 3 x 4,096 x 14,336 weights, so 32 x 6 x 176,160,768 = 33,822,867,456 of 46,702,792,704 sit idle
    # for a token: 12,879,925,248 are active.
    outputs, _ = _preset_run("mixtral-8x7b", "bf16")
    text = lessons.plain_text(outputs)
    assert "each token passes through 12,879,925,248 parameters (12.9B) , 2 of the 8 experts of each layer" in text
    assert "the weights above count all 46,702,792,704" in text
    outputs, _ = _preset_run("llama-2-13b", "bf16")  # dense: no such sentence
    assert "mixture of experts" not in lessons.plain_text(outputs)

"""Lesson 0, start here: it runs, shows GPU memory as the driver reports it, links all nine lessons,
and survives every control's extremes."""

import lessons
import pytest

LESSON = "00_start_here"
NINE = ["00_start_here", "01_weights_and_formats", "02_full_finetuning", "03_activations", "04_freezing",
        "05_adapters", "06_lora_qlora", "07_inference", "08_planner"]  # notebooks/README.md


@pytest.fixture(scope="module")
def default_run():
    return lessons.run(LESSON)


def test_runs_and_shows_nothing_bad(default_run):
    outputs, _ = default_run
    assert lessons.bad_text(outputs) == []


def test_the_map_links_all_nine_lessons(default_run):
    outputs, _ = default_run
    text = lessons.output_text(outputs)
    for stem in NINE:
        # As `marimo run notebooks` serves the lessons; the site build rewrites it to {stem}.html.
        assert f'href="?file={stem}.py"' in text, stem


def test_rtx_4090_as_the_driver_reports_it(default_run):
    outputs, defs = default_run
    # nvidia-smi reports an RTX 4090 as 24564 MiB; 24564 x 2**20 = 25,757,220,864 B,
    # = 23.99 GiB (24564 / 1024) = 25.76 GB.
    assert defs["gpu_mib"] == 24564
    text = lessons.output_text(outputs)
    assert "24,564 MiB" in text and "23.99 GiB" in text and "25.76 GB" in text
    rows = defs["gpu_units"].set_index("GPU")
    assert rows.loc["A100 80GB", "driver reports (MiB)"] == 81920 and rows.loc["A100 80GB", "GiB"] == 80.0


def test_demo_reproduces_the_articles_numbers(default_run):
    outputs, defs = default_run
    # The demo starts at 7B: 7e9 x 2 B = 14 GB of weights; x 8 B = 56 GB to finetune (the article).
    assert defs["demo_weights"] == 14 * 10**9
    assert defs["demo_training"].without_activations == 56 * 10**9
    text = lessons.output_text(outputs)
    assert "14.00 GB" in text and "56.00 GB" in text


def test_training_needs_more_than_serving(default_run):
    _, defs = default_run
    # Both sides hold the same bf16 weights; training adds gradients, optimizer states and activations.
    assert defs["serving"].weights == defs["training"].weights
    assert defs["training"].gradients == defs["training"].weights  # one 16-bit gradient per 16-bit weight
    assert defs["training"].total > defs["serving"].total


def test_llama_2_7b_training_budget_by_hand(default_run):
    # Llama-2-7B (h 4,096, 32 blocks of 32 heads of 128, MLP 11,008, vocabulary 32,000): 2 x 32,000 x 4,096 (embeddings,
    # head) + 32 x (4 x 4,096^2 + 3 x 4,096 x 11,008 + 2 x 4,096) + 4,096 = 6,738,415,616 parameters in 291 tensors
    # (9 per block, the embeddings, the final norm, the head). Pure bf16 with Adam: 2 B weight + 2 B gradient + 2 x 2 B
    # moments per parameter and a 4-byte step per tensor.
    outputs, defs = default_run
    training = defs["training"]
    h, L, a, d, I, V = 4096, 32, 32, 128, 11008, 32000
    n = 2 * V * h + L * (4 * h * h + 3 * h * I + 2 * h) + h
    assert n == 6_738_415_616
    # Activations, one sequence of s = t = 2,048 tokens at e = 2 B, as transformers 5.24's LlamaForCausalLM saves them
    # with SDPA and no dropout (LlamaConfig's attention_dropout is 0.0): memmath/hf_activations.py's docstring, held
    # to PyTorch's CPU measurements to the byte by tests/test_fidelity.py.
    b, s, e = 1, 2048, 2
    t = b * s
    # Each block: two RMSNorms, each its input upcast to fp32 4*t*h, rsqrt 4*t and its normalized output e*t*h (the
    # weight trains); the q/k/v input e*t*h (one storage); SDPA's q, k, v after the rotation and its output 4 x e*t*h,
    # with a fp32 log-sum-exp 4*b*a*s; the gate/up input e*t*h; SwiGLU's gate output, up output and silu(gate) and
    # down_proj's input, 4 x e*t*I.
    block = 2 * (4 * t * h + 4 * t + e * t * h) + e * t * h + (4 * e * t * h + 4 * b * a * s) + e * t * h + 4 * e * t * I
    # Outside the blocks: the token ids 8*t, the rotary cos and sin tables e*s*d each, the final RMSNorm, the head's
    # input e*t*h. The loss: the fp32 log-softmax 4*t*V, the shifted labels (at b = 1 a view of pad(labels, (0, 1)),
    # 8*(s + 1); transformers/loss/loss_utils.py) and a 4-byte total weight.
    outside = 8 * t + 2 * e * s * d + (4 * t * h + 4 * t + e * t * h) + e * t * h
    loss = 4 * t * V + 8 * (s + 1) + 4
    activations = L * block + outside + loss
    assert training.activations == activations == 12_553_068_556
    total = 2 * n + 2 * n + 4 * n + 4 * 291 + activations
    assert training.total == total == 66_460_394_648
    text = lessons.plain_text(outputs)
    # The parts add to 66.46 GB; the card must hold the step's peak, what `memmath train llama-2-7b --optimizer adam`
    # requires (tests/test_course_consistency_early_lessons.py holds the page to it).
    assert f"Its parts add to {total / 1e9:.2f} GB (the bar)" in text  # 66.46 GB
    need = defs["training_need"]
    assert need.basis == "peak" and need.bytes > total
    assert f"training needs {need.bytes / 1e9:.2f} GB against 14.75 GB for serving" in text
    assert "with fused (SDPA) attention and no dropout, as the model's config sets them" in text


def test_every_model_lesson_0_offers_is_traced_exactly():
    # The exact activation model traces sliding windows at any length (Phi-3-mini's window is 2,047
    # tokens, its config.json: the default 2,048 was the textbook's before), so every preset lesson 0 offers is
    # counted as transformers runs it, and its sentence names no fallback.
    import marimo as mo

    import memmath as mm

    _, opening = lessons.run(LESSON)
    options = list(opening["model_dropdown"].options)  # what the lesson offers
    assert "phi-3-mini" in options and "llama-3-8b" in options
    outputs, defs = lessons.run_with(LESSON, model_dropdown=mo.ui.dropdown(options=options, value="phi-3-mini"))
    assert defs["training"].activation_model == "transformers"
    assert "textbook model (Korthikanti et al. 2022), since" not in lessons.plain_text(outputs)
    for name in options:
        assert mm.Run(name).activations == "transformers", name


def test_every_control_at_its_extremes():
    seen = set()
    for control, which, outputs, defs in lessons.extreme_runs(LESSON):
        seen.add(control)
        assert lessons.bad_text(outputs) == [], (control, which)
    assert {"demo_params_slider", "unit_radio", "gpu_dropdown", "model_dropdown"} <= seen


@pytest.mark.parametrize("billions", [1, 7, 100])
def test_chart_total_labels_equal_the_callout(billions):
    # The chart labelled 56 GB as "52.16 GiB" (parts rounded one by one, then added) where
    # 56e9 / 2**30 = 52.154 GiB; 100B: 800e9 / 2**30 = 745.058 -> 745.06 GiB, the callout's number.
    import marimo as mo

    import memmath as mm

    for unit in ("GB", "GiB"):
        outputs, defs = lessons.run_with(LESSON, demo_params_slider=mo.ui.slider(start=1, stop=100, step=1,
                                                                                 value=billions),
                                         unit_radio=mo.ui.radio(options=["GB", "GiB"], value=unit))
        text = lessons.output_text(outputs)
        step = defs["demo_grid"].query("billions == @billions and scenario == 'step'")
        label = f"{step[f'total{unit}'].iloc[0]:,.2f} {unit}"  # the label the chart writes (format ',.2f')
        # The callout prints memmath's integer total with format_bytes; the page shows it (HTML-escaped in a callout).
        assert mm.format_bytes(defs["demo_training"].without_activations, unit) == label, (billions, unit)
        assert label in text, (billions, unit, label)
    hand = {1: ("8.00", "7.45"), 7: ("56.00", "52.15"), 100: ("800.00", "745.06")}[billions]
    assert (f"{step['totalGB'].iloc[0]:,.2f}", f"{step['totalGiB'].iloc[0]:,.2f}") == hand


def test_each_control_re_runs_one_cell():
    # Every cell a move re-runs costs marimo ~6-10 ms whatever it does. The size slider re-ran three
    # (one drew a new chart); now one cell computes the budgets, hands the live chart its rows and says them.
    assert len(lessons.cells_rerun_by(LESSON, "demo_params_slider")) == 1
    assert len(lessons.cells_rerun_by(LESSON, "gpu_dropdown")) == 1
    assert len(lessons.cells_rerun_by(LESSON, "model_dropdown")) == 1
    assert len(lessons.cells_rerun_by(LESSON, "unit_radio")) == 2  # the two places that show a unit


def test_the_core_path_comes_first(default_run):
    # The claim, the control, the number with its recipe, the takeaway; then the sections.
    outputs, _ = default_run
    text = lessons.plain_text(outputs)
    claim = text.index("CUDA out of memory")
    number = text.index("7,000,000,000 × 2 B (bf16) = 14.00 GB")  # 7e9 parameters x 2 bytes
    step = text.index("= 56.00 GB before activations")  # x (2 + 2 + 4) bytes
    takeaway = text.index("Takeaway:")
    deeper = text.index("The question this workbook follows")
    assert claim < number < step < takeaway < deeper


def test_the_size_chart_is_one_live_chart_fed_the_sliders_rows(default_run):
    # The chart is drawn once, in a cell no control reads; the slider's cell hands it the rows of its size.
    _, defs = default_run
    chart = defs["demo_chart"]
    assert type(chart).__name__ == "LiveChart" and chart.signals["caption"] == "Parameters (billions): 7"
    (rows,) = chart.rows.values()
    by_scenario = {s: sum(r["GB"] for r in rows if r["scenario"] == s) for s in ("load", "step")}
    assert by_scenario == {"load": 14.0, "step": 56.0}  # 7e9 x 2 B; 7e9 x (2 + 2 + 4) B
    assert not any(lessons.cells_rerun_by(LESSON, c) & _cell_of(LESSON, "demo_chart")
                   for c in ("demo_params_slider", "unit_radio"))


def _cell_of(name, variable):
    app = lessons.load_app(name)
    app._maybe_initialize()
    return {cell_id for cell_id, cell in app._graph.cells.items() if variable in cell.defs}

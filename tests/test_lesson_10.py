"""Lesson 10, problems that chain the lessons: every answer derived again by hand from the published configs,
the command line giving the lesson's numbers, every control at its ends, and "measure it yourself" with and
without torch (the measurement held to memmath as tests/test_fidelity_live.py holds it)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import lessons
import pytest

from validation.published_configs import PUBLISHED_CONFIGS

LESSON = "10_problems"
MIB = 2**20
MARGIN = 0.05  # the planner keeps 5% of the requirement free (memmath.FIT_MARGIN, the peak's tolerance)
# What nvidia-smi reports for each card (MiB), as memmath's GPU catalog records it.
A100_80GB, A100_40GB, RTX_4090 = 81920 * MIB, 40960 * MIB, 24564 * MIB
# The CUDA context memmath reserves by default, the card's: an A100 has no published context with lazy loading, so
# the V100's 1,343 MiB (Hugging Face, Model training anatomy), a conservative bound; an RTX 4090 is an Ada card,
# 426 MiB (measured on an RTX 6000 Ada, unslothai/unsloth-zoo pull request 1053).
RESERVE = {A100_80GB: 1343 * MIB, A100_40GB: 1343 * MIB, RTX_4090: 426 * MIB}


def ceil_div(a, b):
    return -(-a // b)


def fits(required, card):
    """The planner's verdict by hand: the requirement and 5% of it, rounded up, within the card less the reserve."""
    return required + ceil_div(required * 5, 100) <= card - RESERVE[card]


@pytest.fixture(scope="module")
def default_run():
    return lessons.run(LESSON)


def test_runs_and_shows_nothing_bad(default_run):
    outputs, _ = default_run
    assert lessons.bad_text(outputs) == []


# ---- Problem 1: Llama-3-8B, full finetuning, pure bf16 AdamW, 4,096 tokens, 8 GPUs --------------------------------
LLAMA = PUBLISHED_CONFIGS["Meta-Llama-3-8B"]


def llama_counts():
    c = LLAMA
    h, I, L, a, kv, V = (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_attention_heads"],
                         c["num_key_value_heads"], c["vocab_size"])
    d = h // a
    n = 2 * V * h + L * (2 * h * h + 2 * h * kv * d + 3 * h * I + 2 * h) + h  # untied head
    tensors = 9 * L + 3  # 7 matrices and 2 norms per block; embeddings, final norm, head
    return n, tensors


def llama_activations(b, s):
    """What transformers 5.24's LlamaForCausalLM saves for backward with SDPA and no dropout, tensor by tensor (the
    derivation of tests/test_lesson_00.py for Llama-2-7B, with grouped-query k and v: kv_heads x head_dim wide, since
    SDPA takes them unrepeated)."""
    c = LLAMA
    h, I, L, a, kv, V = (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_attention_heads"],
                         c["num_key_value_heads"], c["vocab_size"])
    d, e, t = h // a, 2, b * s
    block = (2 * (4 * t * h + 4 * t + e * t * h)  # two RMSNorms: fp32 input, rsqrt, the normalized output
             + e * t * h  # the q/k/v projections' input
             + e * t * h + 2 * e * t * kv * d + 4 * b * a * s + e * t * h  # SDPA's q, k, v, log-sum-exp, output
             + e * t * h  # the gate/up input
             + 4 * e * t * I)  # SwiGLU: gate and up outputs, silu(gate), down_proj's input
    outside = 8 * t + 2 * e * s * d + (4 * t * h + 4 * t + e * t * h) + e * t * h  # ids, rotary cos/sin, norm, head input
    labels = 8 * (s + 1) if b == 1 else 8 * t  # at b = 1 a view of pad(labels, (0, 1)); else a contiguous copy
    return L * block + outside + 4 * t * V + labels + 4  # + the fp32 log-softmax, labels, the loss's total weight


def zero_parts(stage, n_gpus, b, s=4096):
    """Per-GPU parts of pure bf16 AdamW with ZeRO (Rajbhandari et al. 2020): stage 1 shards the states, 2 the
    gradients too, 3 the weights too; memmath's even sharding rounds each up."""
    n, tensors = llama_counts()
    weights, grads, states = 2 * n, 2 * n, 4 * n + 4 * tensors  # two bf16 moments and a 4-byte step per tensor
    return {"weights": ceil_div(weights, n_gpus) if stage >= 3 else weights,
            "gradients": ceil_div(grads, n_gpus) if stage >= 2 else grads,
            "optimizer_states": ceil_div(states, n_gpus) if stage >= 1 else states,
            "activations": llama_activations(b, s)}


def test_problem_1_by_hand(default_run):
    outputs, defs = default_run
    n, tensors = llama_counts()
    assert (n, tensors) == (8_030_261_248, 291)
    assert llama_activations(1, 4096) == 28_562_243_596 and llama_activations(2, 4096) == 57_122_390_020
    plans = defs["p1_plans"]
    # (a) Without ZeRO, at the start of a steady step's backward pass the card holds the weights, the optimizer
    # states (made at step 1, kept since) and every saved activation: already more than an A100 80GB.
    none = zero_parts(0, 8, 2)
    lower = none["weights"] + none["optimizer_states"] + none["activations"]
    assert lower > A100_80GB
    assert plans[0].requirement.basis == "peak" and plans[0].requirement.bytes >= lower and not plans[0].fits
    # (b) ZeRO-3 over 8: the parts are the sums by hand, but memmath has no peak model for sharding, so the card is
    # judged on a safe upper bound of the step's peak, above their sum; on an A100 80GB it fits.
    z3 = zero_parts(3, 8, 2)
    memory = plans[3].memory
    assert {k: int(getattr(memory, k)) for k in z3} == z3
    assert sum(z3.values()) == 65_152_651_414
    assert plans[3].requirement.basis == "upper bound" and plans[3].requirement.bytes > sum(z3.values())
    assert fits(plans[3].requirement.bytes, A100_80GB) and plans[3].fits
    # (c) b = 2 fits; b = 3 adds 28.56 GB of activations and does not, even on the sum alone.
    assert not fits(sum(zero_parts(3, 8, 3).values()), A100_80GB)
    assert defs["p1_largest_batch"] == 2
    # (d) 8 x A100 40GB at b = 1: stage 0 holds at least weights, states and activations; stages 1 and 2 sum too
    # much; stage 3's sum would fit, but its bound does not, so no stage is stated as fitting.
    s0 = zero_parts(0, 8, 1)
    assert s0["weights"] + s0["optimizer_states"] + s0["activations"] > A100_40GB
    by_stage = {z: sum(zero_parts(z, 8, 1).values()) for z in (1, 2, 3)}
    assert [fits(by_stage[z], A100_40GB) for z in (1, 2, 3)] == [False, False, True]
    assert [defs["p1_small"][z].fits for z in (1, 2, 3)] == [False, False, False]
    assert defs["p1_lowest_stage"] is None
    assert all(defs["p1_small"][z].requirement.bytes >= by_stage[z] for z in (2, 3))
    # ZeRO-3 over n A100 40GB: the fewest whose bound fits; more than the sums alone would need (6).
    fewest = next(k for k in range(2, 64) if fits(sum(zero_parts(3, k, 1).values()), A100_40GB))
    assert fewest == 6 and defs["p1_fewest"] > fewest
    text = lessons.plain_text(outputs)
    assert f"{plans[3].requirement.bytes / 1e9:.2f} GB ; the run fits" in text
    assert "2 sequences per GPU (16 per step)" in text and f"at least {defs['p1_fewest']} A100 40GB" in text
    assert "No stage fits" in text


def test_problem_1_chart_holds_the_answers_rows(default_run):
    _, defs = default_run
    grid = defs["p1_grid"]
    need = grid[(grid.kind == "need") & (grid.b == 2)].set_index("stage")["GB"]
    assert need["ZeRO 3"] == round(defs["p1_plans"][3].requirement.bytes / 1e9, 2)
    assert need["ZeRO 3"] > round(sum(zero_parts(3, 8, 2).values()) / 1e9, 2) == 65.15
    parts = grid[(grid.kind == "part") & (grid.b == 1) & (grid.stage == "ZeRO 1")].set_index("label")["GB"]
    assert parts["Optimizer states"] == round(zero_parts(1, 8, 1)["optimizer_states"] / 1e9, 2) == 4.02


# ---- Problem 2: Qwen3-30B-A3B, QLoRA, 8,192 tokens, checkpointing ------------------------------------------------
QWEN = PUBLISHED_CONFIGS["Qwen3-30B-A3B"]


def qwen_counts():
    c = QWEN
    h, L, a, kv, d, V = (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"],
                         c["head_dim"], c["vocab_size"])
    E, k, Ie = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    attention = h * a * d + 2 * h * kv * d + a * d * h  # q, k, v, o
    norms = 2 * h + 2 * d  # input and post-attention RMSNorms, q_norm and k_norm over one head
    router = E * h
    experts = E * 3 * h * Ie  # gate_up_proj (E x 2·Ie x h) and down_proj (E x h x Ie): 3-D tensors
    outside = 2 * V * h + h  # untied embeddings and head, the final norm
    total = outside + L * (attention + norms + router + experts)
    active = outside + L * (attention + norms + router + k * 3 * h * Ie)
    return dict(total=total, active=active, attention=L * attention, experts=L * experts)


def qwen_qlora_parts():
    """QLoRA rank 8 on q, v, NF4 with double quantization: bitsandbytes replaces only nn.Linear layers
    (transformers/integrations/bitsandbytes.py: `type(module) is nn.Linear`), so only q, k, v, o are 4-bit; the 3-D
    experts, the router (a parameter), the embeddings, the head (kept out) and the norms stay bf16."""
    c = QWEN
    h, L, a, kv, d = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    counts = qwen_counts()
    quantized = counts["attention"]
    r = 8
    adapters = L * (r * (h + a * d) + r * (h + kv * d))  # A r x d_in and B d_out x r on q_proj and v_proj
    weights = quantized // 2 + 2 * (counts["total"] - quantized) + 4 * adapters  # fp32 adapters

    def constants(numel):  # one 8-bit absmax per 64 weights, one fp32 constant per 256 of them (QLoRA, section 3)
        blocks = ceil_div(numel, 64)
        return blocks + 4 * ceil_div(blocks, 256)

    per_block = 2 * constants(h * a * d) + 2 * constants(h * kv * d)  # q and o, k and v
    return dict(weights=weights, quantization_constants=L * per_block, gradients=4 * adapters,
                optimizer_states=8 * adapters + 4 * 2 * 2 * L, adapters=adapters)  # fp32 moments, a step per tensor


def qwen_saved_and_recomputed(s=8192, b=1):
    """The checkpointed step: what the forward pass saves, and one block's recomputation, as transformers 5.24's
    Qwen3MoeForCausalLM keeps them (bf16, SDPA, QLoRA with frozen norms and head)."""
    c = QWEN
    h, a, kv, d, V, L = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
                         c["vocab_size"], c["num_hidden_layers"])
    E, k, Ie = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    e, t, r = 2, b * s, 8
    saved = (L * e * t * h  # every block's checkpointed input
             + 4 * t * h + 4 * t  # the final norm's fp32 input and rsqrt (its weight is frozen: no output kept)
             + 4 * t * V + 8 * (s + 1) + 4)  # fp32 log-softmax, shifted labels (b = 1: a view), total weight
    recomputed = (
        (4 * t * h + 4 * t) + 2 * 4 * t * h + 2 * 4 * t * r  # input norm; LoRA A's fp32 input copies, B's inputs (q, v)
        + (4 * t * a * d + 4 * t * a) + (4 * t * kv * d + 4 * t * kv)  # q_norm, k_norm: fp32 inputs and rsqrt
        + e * t * a * d + 2 * e * t * kv * d + 4 * b * a * s + e * t * a * d  # SDPA q, k, v, log-sum-exp, output
        + (4 * t * h + 4 * t)  # post-attention norm
        + 4 * t * E + 8 * t * k + 4 * t + 4 * t * k  # router: fp32 softmax, top-k indices, sum, weights
        + 3 * 8 * t * k + 4 * E  # token indices, sort permutation, inverse permutation; grouped_mm offsets
        + e * t * k * 2 * Ie + e * t * k * Ie + e * t * k * h + e * t * k)  # gate_up out, SiLU out, experts out, weights
    return saved, recomputed


def test_problem_2_by_hand(default_run):
    outputs, defs = default_run
    counts, parts = qwen_counts(), qwen_qlora_parts()
    assert (counts["total"], counts["active"]) == (30_532_122_624, 3_353_032_704)
    assert parts["adapters"] == 3_342_336 and parts["weights"] == 59_718_660_096
    single = defs["p2_single"]
    for key in ("weights", "quantization_constants", "gradients", "optimizer_states"):
        assert int(getattr(single, key)) == parts[key], key
    saved, recomputed = qwen_saved_and_recomputed()
    assert int(single.activations) == saved + recomputed
    static = sum(v for k, v in parts.items() if k != "adapters")
    # (b) ZeRO-3 over two RTX 4090: half the weights alone exceed the card.
    assert parts["weights"] // 2 > RTX_4090
    assert defs["p2_4090"].memory.weights >= parts["weights"] // 2 and not defs["p2_4090"].fits
    # (c) Three cards: a third of the static parts and the saved activations do not fit; four cards: the sum would,
    # but ZeRO-3's peak is not modelled and the verdict judges a safe upper bound on it: more cards than four.
    assert not fits(static // 3 + saved, RTX_4090)
    four = sum(ceil_div(parts[k], 4) for k in ("weights", "quantization_constants", "gradients", "optimizer_states"))
    assert fits(four + saved + recomputed, RTX_4090) and defs["p2_fewest"] > 4
    # (d) Two A100 80GB without ZeRO: the peak at the loss's backward holds the weights and constants, the inputs (the
    # ids and labels, 8 B per token each, and the rotary inv_freq), the states, the saved tensors and two fp32
    # gradients over the vocabulary. The rest of the working set is within 1% here; either way it fits.
    t, V, d = 8192, QWEN["vocab_size"], QWEN["head_dim"]
    lower = (parts["weights"] + parts["quantization_constants"] + 2 * 8 * t + 4 * d // 2 + parts["optimizer_states"]
             + saved + 2 * 4 * t * V)
    peak = defs["p2_a100"].requirement.bytes
    assert lower <= peak <= 1.01 * lower
    assert fits(int(1.01 * lower), A100_80GB) and defs["p2_a100"].fits
    text = lessons.plain_text(outputs)
    assert f"{counts['active']:,} parameters are active per token" in text
    assert f"{counts['experts']:,} parameters in all" in text and "59.72 GB (adapters included)" in text
    assert f"{defs['p2_fewest']} RTX 4090" in text and "(d) Yes." in text


# ---- Problem 3: Gemma 2 9B served to four users at 8,192 tokens on an RTX 4090 -----------------------------------
GEMMA = PUBLISHED_CONFIGS["gemma-2-9b"]


def gemma_parts(fmt, s=8192, b=4):
    c = GEMMA
    h, I, L, a, kv, d, V, w = (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_attention_heads"],
                               c["num_key_value_heads"], c["head_dim"], c["vocab_size"], c["sliding_window"])
    linears = [h * a * d, h * kv * d, h * kv * d, a * d * h, h * I, h * I, I * h]  # q, k, v, o, gate, up, down
    rows = [a * d, kv * d, kv * d, h, I, I, h]  # their output rows
    total = V * h + L * (sum(linears) + 4 * h) + h  # tied embeddings, four norms per block (Gemma 2), final norm
    assert total == 9_241_705_984
    rest = total - L * sum(linears)  # embeddings and norms stay bf16
    if fmt == "bf16":
        weights, constants = 2 * total, 0
    elif fmt == "int8":  # LLM.int8: int8 weights and one fp32 scale per output row
        weights, constants = L * sum(linears) + 2 * rest, L * 4 * sum(rows)
    else:  # nf4 with double quantization
        weights = L * sum(linears) // 2 + 2 * rest
        constants = L * sum(ceil_div(n, 64) + 4 * ceil_div(ceil_div(n, 64), 256) for n in linears)
    sliding = L // 2  # layer_types alternate sliding and full attention (Gemma2Config)
    kv_cache = 2 * kv * d * 2 * b * ((L - sliding) * s + sliding * min(s, w))  # a sliding layer keeps its window
    return dict(weights=weights, constants=constants, kv_cache=kv_cache, kv_without_window=2 * L * kv * d * 2 * s * b,
                mlp=4 * b * s * I * 2)  # the prefill's MLP: gate and up outputs, gelu(gate), the product, bf16


def test_problem_3_by_hand(default_run):
    outputs, defs = default_run
    plans = defs["p3_plans"]
    for fmt in ("bf16", "int8", "nf4"):
        hand, memory = gemma_parts(fmt), plans[fmt].memory
        assert (memory.weights, memory.quantization_constants, memory.kv_cache) == (
            hand["weights"], hand["constants"], hand["kv_cache"]), fmt
        # The prefill's working set is fitted to 28 measured prefills (README); by hand its bulk is the MLP's four
        # t x I tensors alive at once.
        assert abs(memory.working_set - hand["mlp"]) <= 0.01 * hand["mlp"]
    hand = gemma_parts("bf16")
    assert hand["kv_cache"] == 8_455_716_864 and defs["p3_kv_without_window"] == hand["kv_without_window"]
    available = RTX_4090 - RESERVE[RTX_4090]  # serving keeps no margin (memmath.plan_serving's verdict)
    assert hand["weights"] + hand["kv_cache"] > available and not plans["bf16"].fit.fits  # (b): before any working set
    for fmt in ("int8", "nf4"):  # (c): with the working set at 1% above its hand estimate
        h = gemma_parts(fmt)
        assert h["weights"] + h["constants"] + h["kv_cache"] + 1.01 * h["mlp"] <= available and plans[fmt].fit.fits
    # (d) Each decode step reads the weights and constants once and the four caches: 1,008 GB/s (NVIDIA) over that.
    nf4 = gemma_parts("nf4")
    assert plans["nf4"].decode_tokens_per_second == pytest.approx(1008e9 / (nf4["weights"] + nf4["constants"]
                                                                             + nf4["kv_cache"]), rel=1e-12)
    # (e) Eager attention (transformers' eager_attention_forward) makes the bf16 scores of every head and sequence
    # and takes their softmax in fp32: both alive at once, a·s²·b·(2 + 4) B, more than the whole card has.
    scores = GEMMA["num_attention_heads"] * 8192**2 * 4 * (2 + 4)
    assert defs["p3_eager"].working_set >= scores > available
    text = lessons.plain_text(outputs)
    assert "8.46 GB , not the 11.27 GB" in text and "(c) int8, nf4." in text and "(d) 69 tokens per second." in text


# ---- One run, one answer: the command line gives the lesson's numbers -----------------------------------------
def _cli(args):
    from memmath import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main([*args, "--json"])
    return json.loads(out.getvalue())


def test_the_command_line_gives_the_lessons_numbers(default_run):
    _, defs = default_run
    p1 = _cli(["train", "llama-3-8b", "--seq", "4096", "--batch", "2", "--gpus", "8", "--zero-stage", "3",
               "--gpu", "A100 80GB"])
    assert p1["required"]["bytes"] == defs["p1_plans"][3].requirement.bytes and p1["verdict"]["fits"]
    p2 = _cli(["train", "qwen3-30b-a3b", "--method", "qlora", "--seq", "8192", "--checkpointing", "--gpus", "2",
               "--gpu", "A100 80GB"])
    assert p2["required"]["bytes"] == defs["p2_a100"].requirement.bytes
    p3 = _cli(["infer", "gemma-2-9b", "--context", "8192", "--batch", "4", "--weights", "int8", "--gpu", "RTX 4090"])
    assert p3["total"] == defs["p3_plans"]["int8"].memory.total


def test_every_control_at_its_extremes():
    seen = set()
    for control, which, outputs, _ in lessons.extreme_runs(LESSON):
        seen.add(control)
        assert lessons.bad_text(outputs) == [], (control, which)
    assert {"unit_radio", "p1_batch_slider", "measure_batch_slider", "measure_seq_slider", "measure_precision_radio",
            "measure_checkpointing_checkbox"} <= seen


def test_the_batch_slider_re_runs_one_cell():
    assert len(lessons.cells_rerun_by(LESSON, "p1_batch_slider")) == 1


# ---- Measure it yourself -------------------------------------------------------------------------------------------
PRESSED = SimpleNamespace(value=True)  # a run_button in the run its press triggers


def test_the_lesson_never_imports_torch_unless_the_button_is_pressed():
    # The static export and every page load run the lesson without a press: torch must stay unimported.
    code = ("import sys; sys.path.insert(0, 'tests'); import lessons; lessons.run('10_problems'); "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=lessons.NOTEBOOKS.parent, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False"]


def test_the_prediction_is_shown_before_any_measurement(default_run):
    _, defs = default_run
    assert defs["measure_result"] is None
    # The tiny GPT-2 (validation/measure.py's "gpt2": 3 blocks of width 64, MLP 256, vocabulary 1,000, 256 positions,
    # tied head): wte 64,000 + wpe 16,384 + 3 x (c_attn 64·192 + 192, c_proj 64·64 + 64, c_fc 64·256 + 256,
    # mlp c_proj 256·64 + 64, two LayerNorms 4·64) + ln_f 128 = 230,464 parameters, 2 B each in bf16.
    block = 64 * 192 + 192 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64 + 4 * 64
    assert 64_000 + 16_384 + 3 * block + 128 == 230_464
    assert defs["measure_prediction"]["param_bytes"] == 2 * 230_464
    assert "460,928" in defs["measure_view"].html  # with or without torch


def test_with_torch_the_lesson_offers_the_measurement(default_run, transformers):
    assert "Press the button to measure" in default_run[1]["measure_view"].html


def test_without_torch_the_lesson_says_how_to_install_it(monkeypatch):
    from marimo._output.formatters import formatters

    from memmath_lessons import measure_yourself

    # marimo's app.run registers its PyTorch and transformers formatters whenever "torch" or "transformers" is a key
    # of sys.modules, and the None below would make that import fail (seen when another test file imported them in
    # this process first): without them installed marimo registers neither, so take both out of its list here.
    monkeypatch.delitem(formatters.THIRD_PARTY_FACTORIES, "torch", raising=False)
    monkeypatch.delitem(formatters.THIRD_PARTY_FACTORIES, "transformers", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError, as without torch
    monkeypatch.setitem(sys.modules, "transformers", None)  # and transformers, installed or not
    assert measure_yourself.missing_packages() == ["torch", "transformers"]
    result = measure_yourself.measure(measure_yourself.Setup())
    assert result.measured is None and measure_yourself.INSTALL_COMMAND in result.message
    outputs, defs = lessons.run_with(LESSON, measure_button=PRESSED)
    assert lessons.bad_text(outputs) == []
    html = defs["measure_view"].html
    assert "memmath[torch]" in html and "Traceback" not in html
    _, unpressed = lessons.run(LESSON)
    assert "memmath[torch]" in unpressed["measure_view"].html  # said before a press too


def test_each_model_choice_is_predicted_without_torch(monkeypatch):
    from memmath_lessons import measure_yourself

    monkeypatch.setitem(sys.modules, "torch", None)
    # Qwen3 of width 64: embedding 64,000 (tied head) + 3 x (q 64·64, k and v 64·32 each, o 64·64, q/k norms 16 each,
    # MLP 3·64·176, two norms 2·64 = 46,240) + final norm 64 = 202,784 parameters, 2 B each in bf16.
    assert 64_000 + 3 * (4096 + 2 * 2048 + 4096 + 32 + 3 * 64 * 176 + 128) + 64 == 202_784
    assert measure_yourself.predicted(measure_yourself.Setup(model="qwen3"))["param_bytes"] == 2 * 202_784
    with pytest.raises(ValueError, match="model"):
        measure_yourself.Setup(model="gpt-5")


@pytest.mark.parametrize("field, value", [("batch_size", 0), ("seq_len", 257), ("precision", "fp8")])
def test_a_setup_out_of_range_is_refused_by_name(field, value):
    from memmath_lessons import measure_yourself

    with pytest.raises(ValueError, match=field):
        measure_yourself.Setup(**{field: value})


def test_with_torch_the_measurement_agrees_as_the_validation_does(monkeypatch):
    from memmath_lessons import measure_yourself

    # An installed wheel: the repository's validation/ package is not importable, and not needed.
    monkeypatch.setitem(sys.modules, "validation", None)
    monkeypatch.setitem(sys.modules, "validation.measure", None)
    if measure_yourself.missing_packages():
        reason = f"torch is not installed ({', '.join(measure_yourself.missing_packages())})"
        if os.environ.get("MEMMATH_REQUIRE_TORCH") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    outputs, defs = lessons.run_with(LESSON, measure_button=PRESSED)
    assert lessons.bad_text(outputs) == []
    measured, predicted = defs["measure_result"].measured, defs["measure_prediction"]
    assert measured["total_params"] == 230_464 and measured["param_bytes"] == 2 * 230_464  # bf16, by hand above
    for key in ("param_bytes", "grad_bytes", "optimizer_state_bytes"):  # tests/test_fidelity_live.py's tolerances
        assert predicted[key] == measured[key], key
    assert abs(predicted["saved_bytes"] - measured["saved_bytes"]) <= 0.01 * measured["saved_bytes"]
    for key in ("peak_step1_bytes", "peak_step2_bytes"):
        assert abs(predicted[key] - measured[key]) <= 0.05 * measured[key], key
    # the step timeline too: each phase of both steps held to 5%, as memmath.measure holds them
    for step in (1, 2):
        for phase in ("forward", "backward", "optimizer_step"):
            key = f"peak_step{step}_{phase}_bytes"
            assert abs(predicted[key] - measured[key]) <= 0.05 * measured[key], key
    html = defs["measure_view"].html
    assert f"{measured['saved_bytes']:,}" in html and html.count(">yes<") == 6 + 6
    assert "Peak of step 2&#x27;s optimizer step" in html or "Peak of step 2's optimizer step" in html

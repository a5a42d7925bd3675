"""Lesson 6 (LoRA and QLoRA): it runs, its numbers are the papers' and hand derivations, and its controls hold at their ends."""

import re

import pytest

import lessons
import marimo as mo
import memmath as mm

LESSON = "06_lora_qlora"


@pytest.fixture(scope="module")
def default_run():
    return lessons.run(LESSON)


def test_lesson_runs_clean(default_run):
    assert lessons.bad_text(default_run[0]) == []


def test_llama2_7b_r8_on_q_and_v(default_run):
    # Hu et al. 2021, section 4.1: r x (d_in + d_out) per matrix; 8 x (4,096 + 4,096) x 2 matrices x 32 blocks = 4,194,304.
    _, defs = default_run
    assert defs["lora_trainable"] == 8 * (4096 + 4096) * 2 * 32 == 4_194_304
    assert "4,194,304" in lessons.output_text(default_run[0])


def test_merged_weight_gives_the_same_output(default_run):
    assert default_run[1]["merge_same"] is True


def test_the_merge_is_timed_in_at_most_12_rounds_at_load(default_run):
    # The load-time check times 12 interleaved rounds (fewer if its 0.5 s budget runs out), a press 25.
    times = default_run[1]["merge_button"].value["times"]
    assert 3 <= times["run"].max() <= 12
    assert set(times.groupby("run").size()) == {3}  # every round times the three layers


def test_quantization_constants_in_bits_per_parameter(default_run):
    # Dettmers et al. 2023: 32/64 = 0.5 bits; with double quantization 8/64 + 32/(64*256) = 0.126953125 bits.
    rows = default_run[1]["quant_rows"].set_index("storage")["constants (bits per weight)"]
    assert rows["NF4, fp32 constants"] == 0.5
    assert rows["NF4 + double quantization"] == 8 / 64 + 32 / (64 * 256)


# ---- activations by hand, as transformers 5.24's LlamaForCausalLM saves them for backward ------------------
# memmath/hf_activations.py's docstring lays the forward pass out (and tests/test_fidelity.py holds it to PyTorch's
# CPU measurements to the byte). Notation: b batch, s sequence, t = b*s tokens, e = 2 B (bf16), h hidden, a heads of
# d, I MLP width, V vocabulary, r rank. LlamaConfig's attention_dropout is 0.0 and transformers picks SDPA.
LLAMA_2_7B = dict(h=4096, L=32, a=32, d=128, I=11008, V=32000)
LLAMA_2_13B = dict(h=5120, L=40, a=40, d=128, I=13824, V=32000)
LLAMA_65B = dict(h=8192, L=80, a=64, d=128, I=22016, V=32000)


def _llama_params(h, L, I, V, **_):
    # embeddings and head V*h each; per block q, k, v, o h*h, gate and up h*I, down I*h, two RMSNorms h; final norm h
    return 2 * V * h + L * (4 * h * h + 3 * h * I + 2 * h) + h


def _loss(b, s, V):
    # ForCausalLMLoss: logits.float() -> log-softmax 4*t*V; pad(labels, (0, 1))[..., 1:].contiguous(): at b = 1 a view
    # of the padded storage, 8*(s + 1), else a copy, 8*b*s; and a 4-byte total weight
    return 4 * b * s * V + (8 * (s + 1) if b == 1 else 8 * b * s) + 4


def test_full_lora_qlora_side_by_side(default_run):
    _, defs = default_run
    full, lora, qlora = defs["side_by_side"].values()
    assert lora.trainable_params == qlora.trainable_params == 4_194_304
    assert qlora.weights < lora.weights / 3  # 4-bit linear weights versus 16-bit
    # fp32 adapters cost 4 + 4 + 8 = 16 B per adapter parameter with Adam, bf16 ones 2 + 2 + 4 = 8 B.
    fp32, base = defs["lora_fp32"], defs["lora_base"]
    assert fp32.without_activations - base.without_activations == 8 * 4_194_304
    # And what they save (hf_activations, LoRA): peft's fp32 adapter on a bf16 base casts its input, so A keeps a fresh
    # 4*t*h copy per adapted matrix (q and v: two) and B its fp32 r-wide input 4*t*r; bf16 adapters keep the input q
    # and v share, once, 2*t*h, and B's inputs 2*t*r each. The base linears are frozen and keep nothing, in every
    # block alike (the first one too). Batch 4 x 512: t = 2,048, h = 4,096, r = 8, 32 blocks.
    t, h, r = 4 * 512, 4096, 8
    per_block = (2 * 4 * t * h + 2 * 4 * t * r) - (2 * t * h + 2 * 2 * t * r)
    assert fp32.activations - base.activations == 32 * per_block == 1_612_709_888
    assert fp32.total - base.total == 8 * 4_194_304 + 1_612_709_888


def test_side_by_side_activations_by_hand(default_run):
    # Llama-2-7B at the section's start: batch 4 x 512 tokens, pure bf16, LoRA r = 8 on q and v with fp32 adapters.
    outputs, defs = default_run
    full, lora, qlora = defs["side_by_side"].values()
    b, s, e, r = 4, 512, 2, 8
    t = b * s
    h, L, a, d, I, V = (LLAMA_2_7B[k] for k in ("h", "L", "a", "d", "I", "V"))
    norm = 4 * t * h + 4 * t  # an RMSNorm: its input upcast to fp32 and rsqrt, both for the input gradient
    attention = 4 * e * t * h + 4 * b * a * s  # SDPA's q, k, v (after the rotation) and output; fp32 log-sum-exp
    swiglu = 3 * e * t * I  # gate output, up output, silu(gate)
    rotary = 2 * e * s * d  # the cos and sin tables every block shares
    # Full finetuning, each block: two RMSNorms with their normalized outputs e*t*h (the weights train), the q/k/v input
    # e*t*h (one storage), attention, the gate/up input e*t*h, SwiGLU, down_proj's input e*t*I. Outside: the token ids
    # 8*t, rotary, the final RMSNorm with its output, the head's input e*t*h.
    full_block = 2 * (norm + e * t * h) + e * t * h + attention + e * t * h + swiglu + e * t * I
    full_outside = 8 * t + rotary + norm + e * t * h + e * t * h
    assert full.activations == L * full_block + full_outside + _loss(b, s, V) == 12_552_282_116
    # LoRA (fp32 adapters on q, v): the frozen norms and linears keep only what the input gradient needs; each adapted
    # matrix adds A's fp32 copy of its input 4*t*h and B's input 4*t*r. The first block reads frozen embeddings (no
    # input gradient), so its first RMSNorm keeps nothing; the frozen final norm keeps its input and rsqrt only.
    lora_block = norm + 2 * (4 * t * h + 4 * t * r) + attention + norm + swiglu
    lora_outside = rotary + norm
    assert lora.activations == L * lora_block - norm + lora_outside + _loss(b, s, V) == 11_046_502_404
    # QLoRA's 4-bit base is dequantized to bf16 for each product and, frozen, saves nothing: what LoRA saves.
    assert qlora.activations == lora.activations
    text = _plain(outputs)
    assert (f"Activations: full finetuning keeps {full.activations / 1e9:.2f} GB, LoRA {lora.activations / 1e9:.2f} GB "
            f"and QLoRA {qlora.activations / 1e9:.2f} GB") in text
    assert "costs 1.65 GB here: 33.55 MB of weights, gradients and optimizer states and 1.61 GB of activations" in text
    assert "Activations: what transformers' forward pass saves for the backward pass, with SDPA attention and no dropout, as the model's config sets them" in text


def test_the_13b_on_a_4090_by_hand(default_run):
    # Problem 3: Llama-2-13B, LoRA r = 8 on q, v (peft's fp32 adapters), pure bf16, AdamW, batch 1 x 512, checkpointing.
    outputs, defs = default_run
    lora, qlora = defs["problem_lora"], defs["problem_qlora"]
    b, s, e, r = 1, 512, 2, 8
    t = b * s
    h, L, a, I, V = (LLAMA_2_13B[k] for k in ("h", "L", "a", "I", "V"))
    n = _llama_params(**LLAMA_2_13B)
    assert n == 13_015_864_320
    adapters = r * (h + h) * 2 * L  # Hu et al. 2021: r x (d_in + d_out), 2 matrices per block
    # fp32 adapters: 4 B weight + 4 B gradient + 2 x 4 B AdamW moments, and a 4-byte step for each of 2 x 2 x L tensors.
    state = 4 * adapters + 8 * adapters + 4 * (2 * 2 * L)
    # Activations, non-reentrant checkpointing per block (hf_activations): every block keeps its input e*t*h; backward
    # recomputes one block at a time, which saves what a LoRA block saves (see the side-by-side test: two RMSNorms'
    # fp32 input and rsqrt, A's fp32 copies and B's inputs, SDPA's q, k, v, output and log-sum-exp, SwiGLU); outside,
    # the frozen final norm's fp32 input and rsqrt; then the loss.
    norm = 4 * t * h + 4 * t
    recomputed = 2 * norm + 2 * (4 * t * h + 4 * t * r) + 4 * e * t * h + 4 * b * a * s + 3 * e * t * I
    saved = L * e * t * h + recomputed + norm + _loss(b, s, V)
    assert lora.activations == qlora.activations == saved == 391_243_788
    lora_total = 2 * n + 4 * adapters + state + saved
    assert lora.total == lora_total == 26_527_830_668
    # QLoRA (Dettmers et al. 2023): the 7 x L linear matrices in NF4, 4 bits each; double quantization keeps one 8-bit
    # constant per 64 weights and one fp32 constant per 256 blocks; embeddings, head and norms stay bf16.
    linear = L * (4 * h * h + 3 * h * I)
    assert qlora.weights == linear // 2 + 2 * (n - linear) + 4 * adapters
    assert qlora.quantization_constants == linear // 64 + 4 * linear // (64 * 256)
    qlora_total = linear // 2 + 2 * (n - linear) + 4 * adapters + linear // 64 + 4 * linear // (64 * 256) + state + saved
    assert qlora.total == qlora_total == 7_697_520_268
    # An RTX 4090: 24,564 MiB (nvidia-smi) less its Ada CUDA context, 426 MiB (measured on an RTX 6000 Ada,
    # unslothai/unsloth-zoo pull request 1053) = 24,138 MiB = 25,310,527,488 B usable.
    assert qlora_total < 24_138 * 2**20 < 2 * n < lora_total
    text = _plain(outputs)
    # The page judges what the card must hold (the step's peak, memmath.requirement) by the one rule: the parts'
    # sums above are shown beside it, and the 16-bit weights alone (2n = 26.03 GB) pass the usable memory.
    lora_need, qlora_need = defs["problem_needs"]
    assert f"the parts add to {lora_total / 1e9:.2f} GB" in text  # 26.53 GB
    usable = 24_138 * 2**20
    short = lora_need.bytes + -(-lora_need.bytes * 5 // 100) - usable
    assert f"LoRA: the card must hold {lora_need.bytes / 1e9:.2f} GB" in text
    assert f"it does not fit: short by {short / 1e9:.2f} GB" in text
    assert qlora_need.bytes + -(-qlora_need.bytes * 5 // 100) <= usable
    assert f"QLoRA: the card must hold {qlora_need.bytes / 1e9:.2f} GB, and it fits, with " \
           f"{(usable - qlora_need.bytes) / 1e9:.2f} GB to spare" in text
    assert f"Both keep {saved / 1e9:.2f} GB of activations" in text  # 7.70 GB


def test_fp32_adapters_exercise_sets_activations_aside(default_run):
    # Problem 4: Llama-2-7B, r = 64 on all seven matrices: 64 x (4 x (4,096 + 4,096) + 3 x (4,096 + 11,008)) x 32.
    outputs, defs = default_run
    fp32, bf16 = defs["problem_fp32"], defs["problem_bf16"]
    adapters = 64 * (4 * (4096 + 4096) + 3 * (4096 + 11008)) * 32
    assert fp32.trainable_params == adapters == 159_907_840
    assert fp32.activations == bf16.activations == 0  # "activations aside"
    assert fp32.total - bf16.total == (16 - 8) * adapters  # 4 + 4 + 8 B against 2 + 2 + 4 B
    assert f"8 B: {8 * adapters / 1e9:.2f} GB more" in _plain(outputs)


def test_guanaco_65b_by_hand(default_run):
    # Dettmers et al. 2023's Guanaco 65B run (artidoro/qlora scripts/finetune_guanaco_65b.sh): LLaMA-65B, NF4 with
    # double quantization, LoRA r = 64 on all linear layers with bf16 adapters, 32-bit AdamW, checkpointing,
    # batch 4 x 528 tokens.
    outputs, defs = default_run
    guanaco, fit = defs["guanaco"], defs["guanaco_fit"]
    b, s, e, r = 4, 528, 2, 64
    t = b * s
    h, L, a, I, V = (LLAMA_65B[k] for k in ("h", "L", "a", "I", "V"))
    n = _llama_params(**LLAMA_65B)
    linear = L * (4 * h * h + 3 * h * I)
    adapters = r * (4 * (h + h) + 3 * (h + I)) * L
    assert adapters == guanaco.trainable_params == 799_539_200
    weights = linear // 2 + 2 * (n - linear) + 2 * adapters  # NF4 base; embeddings, head, norms, adapters in bf16
    constants = linear // 64 + 4 * linear // (64 * 256)
    state = 2 * adapters + 8 * adapters + 4 * (7 * 2 * L)  # bf16 gradients, fp32 moments, a step per tensor
    # Activations, checkpointed: every block's input e*t*h, one block recomputed, the frozen final norm, the loss. A block
    # with bf16 adapters on all seven: the first RMSNorm's fp32 input and rsqrt; q, k, v's A share its output e*t*h;
    # SDPA's q, k, v, output (o_proj's A reads it: the same storage) and log-sum-exp; the second RMSNorm; gate and
    # up's A share its output e*t*h; SwiGLU; down's A keeps its input e*t*I; the seven B inputs e*t*r.
    norm = 4 * t * h + 4 * t
    block = 2 * norm + e * t * h + 4 * e * t * h + 4 * b * a * s + e * t * h + 3 * e * t * I + e * t * I + 7 * e * t * r
    saved = L * e * t * h + block + norm + _loss(b, s, V)
    assert guanaco.activations == saved == 3_828_270_340
    total = weights + constants + state + saved
    assert guanaco.total == total == 47_881_672_324
    # An RTX A6000 reports 49,140 MiB; less its Ampere GA10x CUDA context, 256 MiB (measured on an RTX 3090,
    # invoke-ai/InvokeAI issue 9413), 48,884 MiB. The card must hold the step's
    # peak (memmath.requirement, as `memmath train` judges a run; not all the parts are alive at once), with 5% of
    # it kept free.
    need = defs["guanaco_need"]
    assert need.basis == "peak" and need.bytes < total
    headroom = 48_884 * 2**20 - need.bytes
    assert fit.fits and fit.headroom_bytes == headroom and fit.margin_bytes == -(-need.bytes * 5 // 100)
    # Without checkpointing every block keeps the whole block (the first one's RMSNorm nothing: the embeddings are
    # frozen) and the rotary cos and sin tables, e*s*d each, are kept once.
    unchecked = L * block - norm + 2 * e * s * 128 + norm + _loss(b, s, V)
    assert defs["guanaco_no_checkpointing"].total == weights + constants + state + unchecked
    text = _plain(outputs)
    assert f"This run needs {need.bytes / 1e9:.2f} GB" in text and f"its parts add to {total / 1e9:.2f} GB" in text
    assert f"fits, with {headroom / 1e9:.2f} GB to spare (more than the {fit.margin_bytes / 1e9:.2f} GB, 5% of the " \
           "requirement, kept free)" in text
    assert f"activations are {saved / 1e9:.2f} GB, what transformers' forward pass saves" in text
    # Without checkpointing: what the card must hold (its step's peak, memmath.requirement), and its parts' sum.
    import memmath as mm
    from memmath_lessons.reference import paper_setups

    unchecked_need = mm.requirement(paper_setups.get_setup("qlora_guanaco_65b").run(checkpointing=False))
    assert (f"the same run would need {unchecked_need.bytes / 1e9:.2f} GB (its parts: "
            f"{(weights + constants + state + unchecked) / 1e9:.2f} GB)") in text


def test_papers_headline_numbers(default_run):
    _, defs = default_run
    gpt3 = 174_604_259_328  # Brown et al. 2020's shape, counted as GPT-2's layout: V*h + P*h + L*(12h^2 + 13h) + 2h
    assert defs["gpt3_lora"].trainable_params == 4 * (12288 + 12288) * 2 * 96 == 18_874_368
    assert 1.0e12 < defs["gpt3_weights_and_states"] < 1.2e12 < defs["gpt3_full"].without_activations  # 6 and 8 B/param
    assert abs(defs["gpt3_lora"].total - 350e9) < 3e9  # "350 GB" (Hu et al. 2021)
    assert round(gpt3 / defs["gpt3_lora"].trainable_params, -3) == 9_000  # "roughly 10,000x"
    assert defs["llama65_full"].total > 780e9  # "more than 780 GB" (Dettmers et al. 2023)
    assert defs["guanaco_fit"].fits  # one 48 GB card at the paper's settings


def test_every_control_at_both_ends():
    seen = set()
    for control, which, outputs, _defs in lessons.extreme_runs(LESSON):
        seen.add(control)
        bad = lessons.bad_text(outputs)
        assert bad == [], f"{control} at its {which}: {bad}"
        assert not re.search(r"\binf\b", lessons.output_text(outputs)), f"{control} at its {which} shows inf"
    assert {"rank_slider", "block_size_slider", "q65_seq_slider", "precision_dropdown", "adapter_format_radio"} <= seen


def _timings(base, unmerged, merged):
    import pandas as pd
    rows = [{"run": i, "variant": v, "seconds": t * (1 + 0.01 * i)} for i in range(3)
            for v, t in (("base W x", base), ("W x + B A x (unmerged)", unmerged), ("merged W' x", merged))]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("merged, says", [
    (1.02, "timed the same to within 2%: merging costs nothing at inference"),
    (1.15, "yet its fastest run took 1.15× the base's and its median 1.15×: a gap of up to 15% between identical work"),
])
def test_merge_timing_prose_follows_the_measurement(merged, says):
    # The merged layer measured 1.15x the base while the text said any gap is noise. Timings here are
    # made up (seconds per call), so the sentence is checked for a quiet and for a noisy machine.
    outputs, _ = lessons.run_with(LESSON, merge_times=_timings(1.0, 1.3, merged))
    text = lessons.output_text(outputs)
    assert says in text


# ---- the core path, the CUDA reserve, what a slider move re-runs ----------------------------------
def _plain(outputs):
    """Visible text, tags dropped, whitespace collapsed (a callout keeps its HTML JSON-escaped in data-html)."""
    import html
    text = html.unescape(lessons.output_text(outputs))
    text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text).replace("\\n", " ")
    text = re.sub(r"<[^>]+>", " ", text.replace("data-html='", ">"))
    return re.sub(r"\s+", " ", html.unescape(text))


def test_core_path_comes_first_claim_control_number_takeaway(default_run):
    # The article's claim, the one control, the number with its recipe, the takeaway, then the sections.
    outputs, _ = default_run
    text = _plain(outputs)
    places = [text.index(s) for s in ("The claim.", "The control.", "The number.", "The takeaway.", "The formula")]
    assert places == sorted(places), places
    # The recipe of the number, by hand: 8 x (4,096 + 4,096 + 4,096 + 4,096) x 32 blocks = 4,194,304.
    assert "4,194,304 trainable parameters = 8 × 16,384 (d_in + d_out, summed over the 2 adapted matrices of a block) × 32 blocks" in text


def test_fits_keep_the_cuda_context_back(default_run):
    # An RTX A6000 reports 49,140 MiB (nvidia-smi); an Ampere GA10x card's CUDA context is 256 MiB (measured on an
    # RTX 3090, invoke-ai/InvokeAI issue 9413): 48,884 MiB usable. An RTX 4090 (Ada, 426 MiB measured on an RTX 6000
    # Ada, unslothai/unsloth-zoo pull request 1053): 24,564 - 426 = 24,138 MiB.
    outputs, defs = default_run
    assert defs["guanaco_fit"].available_bytes == 48_884 * 2**20
    text = _plain(outputs)
    assert ("after 256 MiB (0.27 GB) kept back for the RTX A6000's CUDA context, which the driver takes before "
            "PyTorch allocates anything") in text
    assert "invoke-ai/InvokeAI issue 9413" in text and "unsloth-zoo pull request 1053" in text
    assert "less 426 MiB (0.45 GB) kept back for the RTX 4090's CUDA context" in text
    assert f"{mm.format_bytes(24_138 * 2**20)} usable" in text


def test_go_deeper_holds_the_papers_numbers_folded(default_run):
    outputs, _ = default_run
    text = _plain(outputs)
    assert "Go deeper" in text and "Do the papers' headline numbers follow from their setups?" in text
    assert text.index("Go deeper") < text.index("Why 1.2 TB and not one of ours?")



@pytest.mark.parametrize("control, cells", [("rank_slider", 2), ("block_size_slider", 1), ("q65_batch_slider", 1),
                                            ("q65_seq_slider", 1), ("batch_slider", 1), ("seq_len_slider", 1)])
def test_a_slider_move_reruns_one_cell_per_section_it_moves(control, cells):
    # Every re-run cell costs marimo 6-10 ms of its own. The rank moves the core path's number and the
    # side-by-side section (two cells); the merge is checked and timed only when its button is pressed.
    assert len(lessons.cells_rerun_by(LESSON, control)) == cells


def test_the_measured_qlora_fold_states_what_the_recorded_runs_show(default_run):
    # The fold's prose states counts over every recorded QLoRA run; recount them here from the measurements
    # (validation/quantized.py's bytes) against memmath's prediction, run by run.
    from memmath_lessons.reference.measured import load_measured_quantized, predict_case, predict_peak_case

    cases = load_measured_quantized()
    static = saved = peaks = 0
    for _, case in cases.iterrows():
        m = predict_case(case)
        static += (int(m.weights), int(m.quantization_constants), int(m.gradients), int(m.optimizer_states)) == (
            case.param_bytes, case.quantization_constant_bytes, case.grad_bytes, case.optimizer_state_bytes)
        # an 8-bit base's matmul holds its input outside autograd's saved tensors (held_by_ctx_bytes)
        saved += int(m.activation_detail.saved_by_forward) == case.saved_bytes + case.held_by_ctx_bytes
        for step, column in (("first", "peak_step1_bytes"), ("steady", "peak_step2_bytes")):
            peaks += abs(int(predict_peak_case(case, step=step).total) / case[column] - 1) <= 0.05
    text = lessons.plain_text(default_run[0])
    assert static == saved == len(cases) == 100
    assert f"In every one of the {len(cases)} runs" in text
    assert f"within 5% in {peaks} of the {2 * len(cases)} steps" in text
    fold = default_run[1]["qlora_measured_fold"]
    assert "Does bitsandbytes store what QLoRA's count says? (measured)" in text
    assert "bitsandbytes 0.50.2" in lessons.plain_text([fold])


def test_the_takeaway_gives_the_share_of_the_run_shown():
    # At rank 256 on every linear layer the takeaway said "a fraction of a percent". Llama-2-7B: 256 x
    # (4 x (4,096 + 4,096) + 3 x (4,096 + 11,008)) = 256 x 78,080 = 19,988,480 a block, x 32 = 639,631,360 of
    # 6,738,415,616 parameters: 9.492%; twice the rank, 1,279,262,720 of them, 18.985%.
    everything = mo.ui.dropdown(options={"all": ("q", "k", "v", "o", "gate", "up", "down")}, value="all")
    outputs, defs = lessons.run_with(LESSON, rank_slider=mo.ui.slider(steps=[8, 256], value=256),
                                     targets_dropdown=everything)
    text = lessons.plain_text(outputs)
    assert defs["lora_trainable"] == 639_631_360
    assert "the adapters are 9.492% of the model's parameters" in text and "fraction of a percent" not in text
    assert "r = 512 would train 18.985%" in text
    # The default, r = 8 on q and v: 8 x 2 x 8,192 x 32 = 4,194,304 parameters, 0.062%.
    outputs, _ = lessons.run(LESSON)
    assert "the adapters are 0.062%, a fraction of a percent, of the model's parameters" in lessons.plain_text(outputs)
    assert "(fp32 adapters on the bf16 base)" in lessons.plain_text(outputs)


def test_menus_show_names_not_code_names(default_run):
    # The side-by-side section's menus listed mixed_fp32_grads, sgd_momentum, adam_amsgrad.
    _, defs = default_run
    for menu in ("precision_dropdown", "optimizer_dropdown"):
        assert not [o for o in defs[menu].options if "_" in o], list(defs[menu].options)
    assert {"mixed + fp32 gradient accumulation", "pure bf16"} <= set(defs["precision_dropdown"].options)
    assert {"SGD with momentum", "Adam (amsgrad)", "8-bit Adam"} <= set(defs["optimizer_dropdown"].options)
    assert set(defs["precision_dropdown"].options.values()) == set(mm.RECIPES)
    assert set(defs["optimizer_dropdown"].options.values()) == set(mm.OPTIMIZERS)
    assert defs["precision_dropdown"].value == "bf16" and defs["optimizer_dropdown"].value == "adamw"


def test_the_static_chart_marks_what_the_card_must_hold_beside_the_parts():
    # The static site's chart (its own rank and matrix inputs) drew each method's sum of the parts while the live
    # table beside it judges the step's peak: each bar now carries memmath.requirement's number as a tick and label.
    import memmath as mm
    from memmath_lessons import site_charts

    targets = {"q, v": ("q", "v"), "q, k, v, o": ("q", "k", "v", "o"), "MLP": ("gate", "up", "down"),
               "all linear": ("all",)}
    spec = site_charts.lora_methods(targets).spec  # JSON text
    need = mm.requirement("llama-2-7b", method=mm.LoRA(rank=8, targets=("q", "v")), batch_size=4, seq_len=512)
    assert need.basis == "peak" and str(round(need.bytes / 1e9, 2)) in spec
    assert "GB at the peak" in spec and '"tick"' in spec

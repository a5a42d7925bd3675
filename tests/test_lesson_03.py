"""Lesson 3 (activations): it runs, its numbers match hand derivations, every control survives its extremes."""

import re

import marimo as mo
import numpy as np
import pytest

import lessons
from memmath_lessons.step_slider import step_slider

NAME = "03_activations"


@pytest.fixture(scope="module")
def default_run():
    return lessons.run(NAME)


def test_runs_clean(default_run):
    outputs, _ = default_run
    assert lessons.bad_text(outputs) == []


def test_formula_table_sums_to_34_and_5(default_run):
    # Korthikanti et al. 2022, section 4.1: 34 bytes per s*b*h and 5 per a*s^2*b at 16 bits, 1-byte masks.
    _, defs = default_run
    table = defs["terms_table"]
    assert table.loc[table["counted per"] == "s*b*h", "bytes each"].sum() == 34
    assert table.loc[table["counted per"] == "a*s*s*b", "bytes each"].sum() == 5


def test_default_numbers_by_hand(default_run):
    # Defaults: GPT-2 small (L=12, h=768, a=12, V=50,257), b=4, s=1,024, eager attention, bf16, counted by
    # Korthikanti et al.'s model with its 1-byte dropout masks (the lesson asks for activations="textbook" by name:
    # memmath's default for a gpt2_model shape is the exact trace, 6,049,357,828 B here, see below).
    _, defs = default_run
    s, b, h, a, V = 1024, 4, 768, 12, 50257
    assert defs["per_layer"] == s * b * h * (34 + 5 * a * s // h) == 358_612_992
    detail = defs["detail"]
    assert detail.loss == 4 * s * b * V == 823_410_688  # fp32 logits
    assert detail.layers_storing == 12
    # Final norm and head inputs (2 x 2 sbh) plus the 1-byte embedding dropout mask (sbh).
    assert detail.outside_layers == 5 * s * b * h
    assert defs["training"].activations == 12 * 358_612_992 + 5 * s * b * h + 823_410_688


def test_crossover_at_512_tokens(default_run):
    # Weights + gradients + AdamW states in pure bf16: 8 B x 124,439,808 params + 4 B x 148 step tensors
    # = 995,519,056 B. At b=4: s=256 keeps 12*sbh*(34+20) + 5*sbh + 4sbV = 719,392,768 B (below);
    # s=512 keeps 12 * 116,391,936 B in the blocks alone = 1,396,703,232 B (above).
    _, defs = default_run
    assert np.all(defs["sweep"].without_activations == 8 * 124_439_808 + 4 * 148)
    assert defs["crossover"] == 512


def test_fused_and_checkpointing_by_hand():
    # Fused attention: 34 sbh + 4 a s b per layer; checkpointing: 2 sbh per layer (16-bit block input).
    s, b, h, a = 1024, 4, 768, 12
    _, base = lessons.run(NAME)
    _, defs = lessons.run_with(NAME, attention_radio=mo.ui.radio(options=base["attention_radio"].options,
                                                                 value="fused SDPA / FlashAttention"),
                               checkpointing_switch=mo.ui.switch(value=True))
    assert defs["per_layer"] == 34 * s * b * h + 4 * a * s * b
    assert defs["detail"].per_layer == 2 * s * b * h
    assert defs["detail"].recompute_peak == 34 * s * b * h + 4 * a * s * b


def test_every_control_at_its_extremes():
    seen = set()
    for control, which, outputs, defs in lessons.extreme_runs(NAME):
        seen.add(control)
        assert lessons.bad_text(outputs) == [], (control, which)
        parts = np.asarray(list(defs["training"].parts().values()), dtype=object)
        assert all(int(p) >= 0 for p in parts), (control, which)
    assert {"preset_dropdown", "batch_slider", "seq_slider", "width_slider", "heads_slider", "layers_slider",
            "vocab_slider", "attention_radio", "checkpointing_switch", "unit_radio", "sweep_radio"} <= seen


def test_activations_pass_the_weights_alone_at_the_first_point(default_run):
    # GPT-2 small, b=4, s=128: 12 blocks x sbh(34 + 5*12*128/768) = 12 x 44 x 393,216 = 207,618,048 B, plus
    # 5 sbh = 1,966,080 outside the blocks and 4sbV = 102,926,336 of logits: 312,510,464 B, already more
    # than the 2 x 124,439,808 = 248,879,616 B of bf16 weights.
    _, defs = default_run
    assert defs["sweep"].activations[0] == 312_510_464
    assert defs["crossover_weights"] == 128
    # The axis unit sits at the geometric middle of 248,879,616 B (weights) and the activations at s=65,536
    # (about 1.2e13 B): about 5e10 B, so GB.
    assert defs["unit_sweep"] == "GB"


def test_checked_against_pytorch_default_case(default_run):
    # Recorded by validation/measure.py: the tiny GPT-2 (3 blocks, h = 64, a = 4, V = 1,000) in bf16,
    # eager attention, no dropout, b = 2, s = 64: the forward pass saved 2,123,780 B, 525,312 B per block.
    _, defs = default_run
    case = defs["measured_case"]
    assert case["case_id"] == "gpt2/bf16/adamw/full/eager/nodrop/nockpt/b2s64"
    assert case["saved_bytes"] == 2_123_780 and list(case["saved_per_layer"]) == [525_312] * 3
    assert defs["measured_hf"].saved_by_forward == 2_123_780  # activations="transformers": to the byte
    # The textbook by hand (Korthikanti et al. at e = 2 B, no dropout, eager): per block
    # s*b*h*16e + a*s^2*b*e = 128*64*32 + 4*64^2*2*2 = 327,680 B; 3 blocks; plus the final norm's and
    # head's inputs 2*e*s*b*h = 32,768 B and the fp32 logits 4*s*b*V = 512,000 B.
    assert defs["measured_textbook"].saved_by_forward == 3 * 327_680 + 32_768 + 512_000 == 1_527_808
    frame = defs["measured_frame"].groupby("source", sort=False)["bytes"].sum()
    assert list(frame) == [2_123_780, 2_123_780, 1_527_808]
    # gelu_new's four 4h-wide tensors per block: 4 x (2 B x 128 tokens x 256) = 262,144 B.
    terms = defs["block_terms"].set_index("what one block keeps")["bytes"]
    assert terms.filter(like="gelu_new").sum() == 262_144


def test_checked_against_pytorch_all_over(default_run):
    _, defs = default_run
    errors = defs["measured_errors"]
    # the first grid (160), the first model types read from config.json (28), 8-bit Adam (56), the other
    # model types (48 in grid blocks 8-11), the use_cache cases (18 in grid block 12), less those
    # memmath refuses by name (load_measured leaves them out)
    from memmath_lessons.reference.measured import REFUSED_CASES

    assert len(errors) == 160 + 28 + 56 + 48 + 18 - len(REFUSED_CASES)
    # README "Fidelity": the textbook's worst case is -83% (a BERT case with checkpointing).
    assert errors["textbook"].min() == pytest.approx(-0.83, abs=0.005)


def test_every_case_the_controls_can_pick_was_recorded():
    from memmath_lessons.reference.measured import load_measured

    cases = load_measured()
    full = cases[(cases["method"] == "full") & (cases["optimizer"] == "adamw") & (cases["batch_size"] == 2)
                 & (cases["seq_len"] == 64)]
    for shape in ("gpt2", "llama-mha", "llama-gqa", "bert"):
        for attention in ("eager", "sdpa"):
            for dropout in (False, True):
                for checkpointing in (False, True):
                    match = full[(full["shape"] == shape) & (full["attention"] == attention)
                                 & (full["dropout"] == dropout) & (full["checkpointing"] == checkpointing)]
                    assert len(match) >= 1, (shape, attention, dropout, checkpointing)


def test_heads_slider_offers_only_divisors_of_the_width():
    # 128 heads on a width of 64 read "using 64" while the slider showed 128. The slider offers the
    # divisors of h only; a count that no longer divides it falls to the largest one below that does.
    heads = step_slider([1, 2, 4, 8, 16, 32, 64, 128], value=128)
    outputs, defs = lessons.run_with(NAME, width_slider=mo.ui.slider(64, 12288, step=64, value=64),
                                     heads_slider=heads)
    assert defs["heads_slider"].steps == [1, 2, 4, 8, 16, 32, 64]  # the divisors of 64, sent to the same slider
    assert defs["heads_slider"] is heads and defs["heads_slider"].shown == defs["n_heads"] == 64
    # The note under the slider (its cell, skipped here for the override, shows it in the lesson).
    assert "Attention heads shows 64, not your 128" in defs["heads_note"].html
    assert "using 64" not in lessons.output_text(outputs)


def test_heads_keep_their_value_when_the_width_changes():
    # 12 heads divide 768 (GPT-2) and 1,536 (= 12 x 128): a width change keeps the learner's 12.
    heads = step_slider([1, 2, 3, 4, 6, 8, 12, 16], value=12)
    _, defs = lessons.run_with(NAME, width_slider=mo.ui.slider(64, 12288, step=64, value=1536), heads_slider=heads)
    assert defs["heads_slider"].shown == defs["n_heads"] == 12
    assert 1536 // 128 in defs["heads_slider"].steps and 128 in defs["heads_slider"].steps  # 1,536 = 12 x 128
    assert "Attention heads shows" not in defs["heads_note"].html


def test_one_layer_checkpointing_says_why_it_keeps_more():
    # One block: checkpointing keeps its input (2sbh) AND rebuilds the whole block (34sbh + 5as^2b) in backward,
    # more than the 34sbh + 5as^2b kept without it.
    outputs, _ = lessons.run_with(NAME, layers_slider=mo.ui.slider(1, 128, value=1))
    assert "checkpointing keeps <em>more</em>, not less: with 1 layer" in lessons.output_text(outputs)
    outputs, _ = lessons.run(NAME)
    assert "keeps <em>more</em>" not in lessons.output_text(outputs)  # 12 layers: it saves


def test_no_ratio_prints_as_zero():
    # GPT-3 175B at b = 1, s = 128, fused: activations are a few GB against 2.8 TB of weights and states.
    outputs, _ = lessons.run_with(NAME, preset_dropdown=mo.ui.dropdown(
        options=["gpt2", "gpt3-175b"], value="gpt3-175b"), batch_slider=mo.ui.slider(steps=[1, 2], value=1),
        seq_slider=mo.ui.slider(steps=[128, 256], value=128))
    text = lessons.output_text(outputs)
    assert "0.00×" not in text and "0.00x" not in text
    assert re.search(r"0\.00\d+×", text)  # two significant digits instead


def test_checkpointed_llama_formula_counts_only_the_block_input():
    # The table listed GPT's GeLU terms (296,960 B) while the text said the block keeps only its
    # input. Tiny LLaMA, bf16: s·b·h = 64 x 2 x 64 = 8,192 elements x 2 B = 16,384 B.
    outputs, defs = lessons.run_with(
        NAME, measured_family_dropdown=mo.ui.dropdown(options={"GPT-2": "gpt2", "LLaMA (multi-head)": "llama-mha"},
                                                      value="LLaMA (multi-head)"),
        measured_checkpointing_switch=mo.ui.switch(value=True))
    text = lessons.output_text(outputs)
    assert "Right, the formula's terms at the same sizes: <strong>16,384 B</strong>" in text
    assert "GeLU" not in text.split("One block, tensor by tensor")[1].split("Why the textbook misses")[0]



def test_a_slider_move_reruns_one_cell():
    # Every re-run cell costs ~6-10 ms of marimo's own; a batch or length move re-ran 10 cells before.
    # Now one: the core number, its chart's rows, the comparison, training against inference and the sweep, all
    # into live views.
    # The width too: it sends the heads slider its divisors in place rather than re-running the slider's cell.
    for control in ("seq_slider", "batch_slider", "layers_slider", "vocab_slider", "heads_slider", "width_slider"):
        assert len(lessons.cells_rerun_by(NAME, control)) == 1, control


def test_the_core_path_comes_first(default_run):
    # The claim, the control, the number with its recipe, the takeaway, then the sections.
    outputs, _ = default_run
    text = lessons.output_text(outputs)
    claim, number, takeaway = text.index("The claim."), text.index("The number."), text.index("Takeaway.")
    assert claim < text.index("Sequence length s (tokens)") < number < takeaway < text.index("<h2")
    # GPT-2 small at b = 4, s = 1,024: 12 x 358,612,992 B (blocks) + 5sbh = 15,728,640 B (outside)
    # + 4sbV = 823,410,688 B (logits) = 5,142,495,232 B; weights + gradients + AdamW: 995,519,056 B.
    recipe = text[number:takeaway]
    assert "activations 5.14 GB" in recipe and "995.52 MB" in recipe and "358.61 MB" in recipe
    # ... and it says whose model these numbers are.
    plain = recipe.replace("&#x27;", "'").replace("&quot;", '"')
    assert "by Korthikanti et al.'s formula: <strong>activations 5.14 GB" in plain
    assert 'activations="textbook"' in plain



def test_the_pytorch_check_folds_its_detail(default_run):
    # How the cases were recorded and the tensor-by-tensor comparison serve the careful reader: they fold
    # under the question they answer (the case's controls stay open: a frozen control of the static site must show).
    outputs, _ = default_run
    text = lessons.output_text(outputs)
    for question in ("How were the cases recorded?", "Why does the textbook miss? One block, tensor by tensor"):
        fold = text.index(question)
        assert text.rfind("<marimo-accordion", 0, fold) > text.rfind("</marimo-accordion>", 0, fold), question
    assert "validation/measure.py" in text[text.index("How were the cases recorded?"):]


def gpt2_saved_by_hand(s, b, h, a, V, L, *, dropout, mask, stat):
    """What transformers' GPT-2 (eager attention, 16-bit: e = 2 B, no checkpointing) saves for backward in one
    training step, read off its code tensor by tensor. mask: bytes per dropout-mask element; stat: bytes per
    LayerNorm mean and rstd (one each per token)."""
    e, sbh, sb = 2, s * b * h, s * b
    block = (e * sbh * 8  # ln_1 input, c_attn input, copies of q, k and v, attn.c_proj input, ln_2 input, c_fc input
             + e * 4 * sbh * 5  # gelu_new's four 4h-wide tensors (input, tanh, 1 + tanh, 0.5*x), mlp.c_proj input
             + e * a * s * s * b  # the softmax output
             + 2 * 2 * stat * sb)  # mean and rstd of ln_1 and ln_2
    if dropout:  # the attention dropout's mask and the dropped probabilities; the residual and MLP masks
        block += mask * a * s * s * b + e * a * s * s * b + 2 * mask * sbh
    outside = (8 * sb + 8 * s  # int64 token ids, and the position ids (one row, shared by the batch)
               + (mask * sbh if dropout else 0)  # the embedding dropout's mask
               + 2 * e * sbh + 2 * stat * sb)  # the final norm's input, mean and rstd, the head's input
    loss = 4 * sb * V + 8 * sb + 4  # fp32 log-softmax, the shifted int64 labels, the 4-byte total weight
    return L * block + outside + loss


def test_training_against_inference_follows_memmaths_default(default_run):
    # The section on training against inference is not about the formula: it quotes memmath's default for the
    # lesson's gpt2_model, the exact trace of transformers' GPT-2 code with the config's dropout (p = 0.1).
    outputs, defs = default_run
    cases = defs["measured_cases"].set_index("case_id")
    # The hand count against real training steps recorded on the CPU (validation/measure.py: tiny GPT-2, 3 blocks,
    # h = 64, a = 4, V = 1,000, bf16), where masks and LayerNorm statistics take the element size, 2 B:
    for case_id, (s, b, dropout) in {"gpt2/bf16/adamw/full/eager/nodrop/nockpt/b2s64": (64, 2, False),
                                     "gpt2/bf16/adamw/full/eager/drop/nockpt/b4s32": (32, 4, True),
                                     "gpt2/bf16/adamw/full/eager/drop/nockpt/b4s128": (128, 4, True)}.items():
        assert gpt2_saved_by_hand(s, b, 64, 4, 1000, 3, dropout=dropout, mask=2, stat=2) == \
            cases.loc[case_id, "saved_bytes"], case_id
    # The lesson's defaults on CUDA (memmath's default device): PyTorch's CUDA dropout keeps a 1-byte bool mask and
    # its layer_norm an fp32 mean and rstd for 16-bit input. 12 blocks of 58 sbh + 5 as^2b + 16 sb = 434,176,000 B,
    # 15,802,368 B outside them and 823,443,460 B for the loss.
    exact = gpt2_saved_by_hand(1024, 4, 768, 12, 50257, 12, dropout=True, mask=1, stat=4)
    assert defs["training_exact"].activations == exact == 6_049_357_828
    # Inference for the same batch and length, bf16: the KV cache is 2 (k, v) x L x s x b x h x 2 B; the prefill's
    # peak with eager attention is the outside (token embeddings e*s*b*h, position embeddings e*s*h, the causal mask
    # e*b*s^2) plus the attention phase (the block input, its normed copy and the fused qkv, 5e*s*b*h, and the
    # scores and scaled scores, 2e*a*b*s^2), larger than the MLP phase (e*s*b*(4h + 16h) + e*a*b*s^2).
    s, b, h, a, e = 1024, 4, 768, 12, 2
    kv = 2 * 12 * s * b * h * e
    working = e * s * b * h + e * s * h + e * b * s * s + 5 * e * s * b * h + 2 * e * a * b * s * s
    assert (kv, working) == (150_994_944, 249_036_800)
    weights = 2 * 124_439_808
    assert defs["inference"].total == weights + kv + working == 648_911_360
    text = " ".join(lessons.output_text(outputs).replace("&#x27;", "'").split())
    section = text[text.index("Training must keep its activations"):text.index("does the inference side in full")]
    # 6,049,357,828 B; 5,142,495,232 B (the formula, above); training 6,049,357,828 + 995,519,056 B of weights,
    # gradients and AdamW states = 7,044,876,884 B.
    assert "6.05 GB here by memmath's default (the exact trace" in section
    assert "the formula above counts 5.14 GB" in section
    assert "249.04 MB" in section and "150.99 MB" in section
    assert "training 7.04 GB, inference 648.91 MB" in section


def test_the_problems_by_hand(default_run):
    outputs, _ = default_run
    text = " ".join(lessons.output_text(outputs).replace("&#x27;", "'").split())
    # 1. GPT-2 small, s = 1,024, b = 1: 786,432 x (34 + 80) = 89,653,248 B, of which 5*12*1,024^2 = 62,914,560 B
    # (70%) are the scores.
    assert "= <strong>89,653,248 B</strong> (89.65 MB). The score term 5·a·s²·b = 62,914,560 B is 70% of it." in text
    # 2. GPT-2 XL (L = 48, h = 1,600, a = 25, V = 50,257), s = 1,024, b = 8, by Korthikanti et al.'s formula:
    # sbh = 13,107,200; eager 48 x sbh x (34 + 80) = 71,722,598,400 B, fused 48 x (34 sbh + 4asb = 819,200)
    # = 21,430,272,000 B, both + 5 sbh = 65,536,000 B outside + 4sbV = 1,646,821,376 B of logits:
    # 73,434,955,776 B and 23,142,629,376 B; the saving is 48 x (5as^2b - 4asb) = 50,292,326,400 B.
    assert "By Korthikanti et al.'s formula, how much activation memory does fused attention save?" in text
    assert ("Eager: 73.43 GB; fused: 23.14 GB. It saves 50.29 GB: in each of the 48 layers, 5·a·s²·b = "
            "5 × 25 × 1,024² × 8 = 1.05 GB of scores become a 4·a·s·b log-sum-exp of 0.82 MB.") in text
    # 3. 34 x 4,096^2 + 4 x 32 x 4,096 = 570,949,632 B against 2 x 4,096^2 = 33,554,432 B: 17.0x.
    assert "34·s·b·h + 4·a·s·b = 570,949,632 B; with it, the input alone, 2·s·b·h = 33,554,432 B: <strong>17.0× less" \
        in text
    # 4. GPT-2 small, s = 1,024, b = 8: 12 x 2sbh = 150,994,944 B of block inputs against 4sbV = 1,646,821,376 B.
    assert "Block inputs: 12 × 2·s·b·h = 150.99 MB. Logits: 4·s·b·V = 4 × 1,024 × 8 × 50,257 = 1.65 GB, about 11× more." \
        in text


def test_the_timeline_section_shows_the_steps_peak_the_planner_judges(default_run):
    import memmath as mm

    outputs, defs = default_run
    # Its default: Llama-2-7B, full finetuning, batch 1, 2,048 tokens, pure bf16 with AdamW, no checkpointing.
    run = mm.Run("llama-2-7b", batch_size=1, seq_len=2048)
    assert defs["timeline_run"] == run
    peak = mm.peak_memory(run).total
    assert defs["timeline"].peak.total == peak == mm.requirement(run).bytes
    text = lessons.output_text(outputs)
    assert f"optimizer step, {mm.format_bytes(peak)}" in text  # the highest moment, named, in the prose


def test_the_timeline_with_checkpointing_moves_the_saved_activations_away():
    import marimo as mo

    _, base = lessons.run(NAME)
    _, defs = lessons.run_with(NAME, timeline_checkpointing_switch=mo.ui.switch(value=True))
    saved = lambda d: max(p.parts["saved activations"] for p in d["timeline"].points)  # noqa: E731
    # Checkpointing keeps each block's input only (Chen et al. 2016): far less saved at once.
    assert saved(defs) < saved(base) / 5

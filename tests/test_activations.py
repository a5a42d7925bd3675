"""Activation memory: Korthikanti et al.'s per-layer formula and its variants, by hand."""

from fractions import Fraction

import numpy as np
import pytest

import memmath as mm

SHAPES = [  # (s, b, h, a): GPT-2 small, LLaMA-2-7B, GPT-3, and an h that does not divide a*s
    (1024, 8, 768, 12), (4096, 1, 4096, 32), (2048, 1, 12288, 96), (100, 3, 96, 5),
]


@pytest.mark.parametrize("s, b, h, a", SHAPES)
def test_korthikanti_formula_at_16_bit(s, b, h, a):
    # Korthikanti et al. 2022, equation 1: s*b*h*(34 + 5*a*s/h) bytes per layer, 16-bit activations,
    # 1-byte dropout masks, no recomputation. Evaluated with exact fractions.
    expected = Fraction(s * b * h) * (34 + Fraction(5 * a * s, h))
    assert expected.denominator == 1
    assert mm.korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=h, n_heads=a) == int(expected)


@pytest.mark.parametrize("s, b, h, a", SHAPES)
def test_fused_attention_drops_the_s_squared_term(s, b, h, a):
    # Korthikanti et al., section 5 (selective recomputation / fused attention): the 5*a*s^2*b term
    # of scores, softmax and its dropout goes; measured (torch 2.13 CPU, validation/measure.py): fused kernels keep a 4-byte log-sum-exp
    # per row and head instead (4*a*s*b).
    got = mm.korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=h, n_heads=a, attention="sdpa")
    assert got == 34 * s * b * h + 4 * a * s * b


@pytest.mark.parametrize("s, b, h, a", SHAPES)
def test_without_dropout(s, b, h, a):
    # Korthikanti's per-layer terms (section 4.1): attention 11sbh + 5as^2b, MLP 19sbh, norms 4sbh.
    # Without dropout three things go: the two 1-byte masks after attention and MLP (2sbh), the
    # softmax's dropout mask (as^2b) and the dropout output (2as^2b; the PV product then reuses the
    # softmax output, already stored): 32sbh + 2as^2b.
    got = mm.korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=h, n_heads=a, dropout=False)
    assert got == 32 * s * b * h + 2 * a * s * s * b


def test_fp32_activations_and_cpu_masks():
    s, b, h, a = 512, 2, 768, 12
    # fp32 (e = 4) with 1-byte masks: every 2-byte term doubles, masks stay: 66sbh + 9as^2b.
    assert mm.korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=h, n_heads=a, element_bytes=4) == (
        66 * s * b * h + 9 * a * s * s * b)
    # Measured (torch 2.13 CPU, validation/measure.py): on the CPU PyTorch's dropout mask has the element size: bf16 masks of
    # 2 bytes give sbh*(32 + 4) + as^2b*(2 + 2 + 2).
    m = mm.training_memory("gpt2", batch_size=b, seq_len=s, device="cpu")
    assert m.activation_detail.per_layer == 36 * s * b * h + 6 * a * s * s * b


def test_full_recomputation_keeps_each_blocks_input():
    # Korthikanti et al., section 5: full recomputation keeps 2*s*b*h per layer (the block input at
    # 16 bit), plus one block's full set while it is recomputed during backward.
    s, b, h, a, L, V = 1024, 4, 768, 12, 12, 50257
    m = mm.training_memory("gpt2", batch_size=b, seq_len=s, checkpointing=True)
    full_layer = 34 * s * b * h + 5 * a * s * s * b
    assert m.activation_detail.per_layer == 2 * s * b * h
    assert m.activations == L * 2 * s * b * h + full_layer + 5 * s * b * h + 4 * s * b * V


def test_the_loss_term_dominates_small_models():
    # Measured (torch 2.13 CPU, validation/measure.py): the fp32 log-softmax over the vocabulary stores 4*b*s*V bytes; for GPT-2 small
    # at s = 1024 that is 4 x 1024 x 50257 = 205,852,672 bytes per sequence, more than any block.
    detail = mm.training_memory("gpt2", batch_size=1, seq_len=1024, attention="sdpa").activation_detail
    assert detail.loss == 4 * 1024 * 50257 and detail.loss > detail.per_layer


def test_bert_classifier_loss_is_per_sequence():
    # A sequence classifier's logits are b x num_labels in fp32; the pooler reads the first token (b x h).
    shape = mm.bert_model(n_layers=12, hidden_size=768, n_heads=12, num_labels=2)
    detail = mm.training_memory(shape, batch_size=8, seq_len=128).activation_detail
    assert detail.loss == 4 * 8 * 2
    assert detail.outside_layers == 2 * 8 * 768 + 128 * 8 * 768  # pooler input + embedding dropout mask


def test_batch_and_length_arrays_broadcast():
    s = np.array([128, 256, 512])[:, None]
    b = np.array([1, 2, 4, 8])[None, :]
    grid = mm.korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=768, n_heads=12)
    assert grid.shape == (3, 4)
    for i, si in enumerate((128, 256, 512)):
        for j, bj in enumerate((1, 2, 4, 8)):
            assert grid[i, j] == mm.korthikanti_per_layer(seq_len=si, batch_size=bj, hidden_size=768, n_heads=12)


def test_a_sweep_too_large_for_int64_is_refused_not_wrapped():
    # 2**22 tokens x 2**20 sequences: the exact answer (about 9e22 bytes) does not fit int64; a scalar
    # call is exact, a sweep says so instead of returning a wrapped number.
    shape = mm.uniform_model(7e9, 32, hidden_size=4096, n_heads=32)
    exact = mm.training_memory(shape, seq_len=2**22, batch_size=2**20).activations
    assert exact > 2**63
    with pytest.raises(ValueError, match="int64"):
        mm.training_memory(shape, seq_len=np.array([2**22]), batch_size=np.array([2**20]))


# ---- korthikanti_terms: the per-layer activation formula, tensor by tensor (Korthikanti et al. 2022, section 4.1).
def _coefficients(terms, unit):
    return sum(t.coefficient for t in terms if t.unit == unit)


def test_paper_coefficients_34_and_5():
    # Section 4.1, 16-bit activations, 1-byte masks: attention 11 sbh + 5 as^2b, MLP 19 sbh, norms 4 sbh.
    terms = mm.korthikanti_terms(seq_len=1, batch_size=1, hidden_size=1, n_heads=1)
    assert _coefficients(terms, "s*b*h") == 34
    assert _coefficients(terms, "a*s*s*b") == 5
    by_block = {block: sum(t.coefficient for t in terms if t.block == block and t.unit == "s*b*h")
                for block in ("attention", "mlp", "norms")}
    assert by_block == {"attention": 11, "mlp": 19, "norms": 4}


def test_gpt2_layer_by_hand():
    # GPT-2 small, s=1024, b=1, h=768, a=12: sbh*(34 + 5*a*s/h) = 786,432 * (34 + 80) = 89,653,248 B.
    terms = mm.korthikanti_terms(seq_len=1024, batch_size=1, hidden_size=768, n_heads=12)
    assert sum(t.bytes for t in terms) == 89_653_248


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("dropout", [True, False])
@pytest.mark.parametrize("element_bytes", [2, 4])
def test_terms_sum_to_per_layer(attention, dropout, element_bytes):
    kw = dict(seq_len=777, batch_size=3, hidden_size=1600, n_heads=25, element_bytes=element_bytes,
              dropout=dropout, attention=attention)
    assert sum(t.bytes for t in mm.korthikanti_terms(**kw)) == mm.korthikanti_per_layer(**kw)


def test_fused_attention_keeps_no_square_term():
    # FlashAttention keeps one fp32 log-sum-exp per row and head: 4*a*s*b (s=2048, b=2, a=16: 262,144 B).
    terms = mm.korthikanti_terms(seq_len=2048, batch_size=2, hidden_size=1024, n_heads=16, attention="sdpa")
    assert not [t for t in terms if t.unit == "a*s*s*b"]
    assert [t.bytes for t in terms if t.unit == "a*s*b"] == [4 * 16 * 2048 * 2]


def test_no_dropout_drops_masks():
    # Without dropout: 16e sbh (32 at e=2) and only the softmax output, 2 as^2b.
    terms = mm.korthikanti_terms(seq_len=1, batch_size=1, hidden_size=1, n_heads=1, dropout=False)
    assert _coefficients(terms, "s*b*h") == 32
    assert _coefficients(terms, "a*s*s*b") == 2


def test_terms_broadcast_over_arrays():
    seqs = np.array([128, 256])
    terms = mm.korthikanti_terms(seq_len=seqs, batch_size=1, hidden_size=64, n_heads=2)
    total = sum(t.bytes for t in terms)
    expected = seqs * 64 * (34 + 5 * 2 * seqs / 64)
    np.testing.assert_array_equal(total, expected.astype(np.int64))


def test_sweep_past_int64_raises_instead_of_wrapping():
    # 128 layers x 5*a*s^2*b at a=128, s=2**22, b=2**10 is 5 * 2**68 B: an int64 sweep would wrap.
    model = mm.gpt2_model(n_layers=128, hidden_size=8192, n_heads=128)
    with pytest.raises(ValueError, match="seq_len and batch_size"):
        mm.training_memory(model, seq_len=np.array([2**20, 2**22]), batch_size=2**10)
    # The same point as a scalar stays an exact Python int.
    scalar = mm.training_memory(model, seq_len=2**22, batch_size=2**10).activations
    assert scalar > 5 * 2**68

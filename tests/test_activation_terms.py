"""korthikanti_terms: the per-layer activation formula, tensor by tensor (Korthikanti et al. 2022, section 4.1)."""

import numpy as np
import pytest

import memmath as mm


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

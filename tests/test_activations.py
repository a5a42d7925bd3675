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
    assert mm.activations.korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=h, n_heads=a) == int(expected)


@pytest.mark.parametrize("s, b, h, a", SHAPES)
def test_fused_attention_drops_the_s_squared_term(s, b, h, a):
    # Korthikanti et al., section 5 (selective recomputation / fused attention): the 5*a*s^2*b term
    # of scores, softmax and its dropout goes; measured (torch 2.13 CPU, validation/measure.py): fused kernels keep a 4-byte log-sum-exp
    # per row and head instead (4*a*s*b).
    got = mm.activations.korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=h, n_heads=a, attention="sdpa")
    assert got == 34 * s * b * h + 4 * a * s * b


@pytest.mark.parametrize("s, b, h, a", SHAPES)
def test_without_dropout(s, b, h, a):
    # Korthikanti's per-layer terms (section 4.1): attention 11sbh + 5as^2b, MLP 19sbh, norms 4sbh.
    # Without dropout three things go: the two 1-byte masks after attention and MLP (2sbh), the
    # softmax's dropout mask (as^2b) and the dropout output (2as^2b; the PV product then reuses the
    # softmax output, already stored): 32sbh + 2as^2b.
    got = mm.activations.korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=h, n_heads=a, dropout=False)
    assert got == 32 * s * b * h + 2 * a * s * s * b


# The textbook model as Korthikanti et al. 2022 count it: eager attention with dropout masks. Named here,
# since memmath's default for a model with a config is the exact (transformers) model with SDPA.
TEXTBOOK = dict(activations="textbook", attention="eager", dropout=True)

def test_fp32_activations_and_cpu_masks():
    s, b, h, a = 512, 2, 768, 12
    # fp32 (e = 4) with 1-byte masks: every 2-byte term doubles, masks stay: 66sbh + 9as^2b.
    assert mm.activations.korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=h, n_heads=a, element_bytes=4) == (
        66 * s * b * h + 9 * a * s * s * b)
    # Measured (torch 2.13 CPU, validation/measure.py): on the CPU PyTorch's dropout mask has the element size: bf16 masks of
    # 2 bytes give sbh*(32 + 4) + as^2b*(2 + 2 + 2).
    m = mm.training_memory("gpt2", batch_size=b, seq_len=s, device="cpu", **TEXTBOOK)
    assert m.activation_detail.per_layer == 36 * s * b * h + 6 * a * s * s * b


def test_full_recomputation_keeps_each_blocks_input():
    # Korthikanti et al., section 5: full recomputation keeps 2*s*b*h per layer (the block input at
    # 16 bit), plus one block's full set while it is recomputed during backward.
    s, b, h, a, L, V = 1024, 4, 768, 12, 12, 50257
    m = mm.training_memory("gpt2", batch_size=b, seq_len=s, checkpointing=True, **TEXTBOOK)
    full_layer = 34 * s * b * h + 5 * a * s * s * b
    assert m.activation_detail.per_layer == 2 * s * b * h
    assert m.activations == L * 2 * s * b * h + full_layer + 5 * s * b * h + 4 * s * b * V


def test_the_loss_term_dominates_small_models():
    # Measured (torch 2.13 CPU, validation/measure.py): the fp32 log-softmax over the vocabulary stores 4*b*s*V bytes; for GPT-2 small
    # at s = 1024 that is 4 x 1024 x 50257 = 205,852,672 bytes per sequence, more than any block.
    detail = mm.training_memory("gpt2", batch_size=1, seq_len=1024, activations="textbook",
                                attention="sdpa").activation_detail
    assert detail.loss == 4 * 1024 * 50257 and detail.loss > detail.per_layer


def test_bert_classifier_loss_is_per_sequence():
    # A sequence classifier's logits are b x num_labels in fp32; the pooler reads the first token (b x h).
    shape = mm.models.bert_model(n_layers=12, hidden_size=768, n_heads=12, num_labels=2)
    detail = mm.training_memory(shape, batch_size=8, seq_len=128, **TEXTBOOK).activation_detail
    assert detail.loss == 4 * 8 * 2
    assert detail.outside_layers == 2 * 8 * 768 + 128 * 8 * 768  # pooler input + embedding dropout mask


def test_batch_and_length_arrays_broadcast():
    s = np.array([128, 256, 512])[:, None]
    b = np.array([1, 2, 4, 8])[None, :]
    grid = mm.activations.korthikanti_per_layer(seq_len=s, batch_size=b, hidden_size=768, n_heads=12)
    assert grid.shape == (3, 4)
    for i, si in enumerate((128, 256, 512)):
        for j, bj in enumerate((1, 2, 4, 8)):
            assert grid[i, j] == mm.activations.korthikanti_per_layer(seq_len=si, batch_size=bj, hidden_size=768, n_heads=12)


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
    terms = mm.activations.korthikanti_terms(seq_len=1, batch_size=1, hidden_size=1, n_heads=1)
    assert _coefficients(terms, "s*b*h") == 34
    assert _coefficients(terms, "a*s*s*b") == 5
    by_block = {block: sum(t.coefficient for t in terms if t.block == block and t.unit == "s*b*h")
                for block in ("attention", "mlp", "norms")}
    assert by_block == {"attention": 11, "mlp": 19, "norms": 4}


def test_gpt2_layer_by_hand():
    # GPT-2 small, s=1024, b=1, h=768, a=12: sbh*(34 + 5*a*s/h) = 786,432 * (34 + 80) = 89,653,248 B.
    terms = mm.activations.korthikanti_terms(seq_len=1024, batch_size=1, hidden_size=768, n_heads=12)
    assert sum(t.bytes for t in terms) == 89_653_248


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("dropout", [True, False])
@pytest.mark.parametrize("element_bytes", [2, 4])
def test_terms_sum_to_per_layer(attention, dropout, element_bytes):
    kw = dict(seq_len=777, batch_size=3, hidden_size=1600, n_heads=25, element_bytes=element_bytes,
              dropout=dropout, attention=attention)
    assert sum(t.bytes for t in mm.activations.korthikanti_terms(**kw)) == mm.activations.korthikanti_per_layer(**kw)


def test_fused_attention_keeps_no_square_term():
    # FlashAttention keeps one fp32 log-sum-exp per row and head: 4*a*s*b (s=2048, b=2, a=16: 262,144 B).
    terms = mm.activations.korthikanti_terms(seq_len=2048, batch_size=2, hidden_size=1024, n_heads=16, attention="sdpa")
    assert not [t for t in terms if t.unit == "a*s*s*b"]
    assert [t.bytes for t in terms if t.unit == "a*s*b"] == [4 * 16 * 2048 * 2]


def test_no_dropout_drops_masks():
    # Without dropout: 16e sbh (32 at e=2) and only the softmax output, 2 as^2b.
    terms = mm.activations.korthikanti_terms(seq_len=1, batch_size=1, hidden_size=1, n_heads=1, dropout=False)
    assert _coefficients(terms, "s*b*h") == 32
    assert _coefficients(terms, "a*s*s*b") == 2


def test_terms_broadcast_over_arrays():
    seqs = np.array([128, 256])
    terms = mm.activations.korthikanti_terms(seq_len=seqs, batch_size=1, hidden_size=64, n_heads=2)
    total = sum(t.bytes for t in terms)
    expected = seqs * 64 * (34 + 5 * 2 * seqs / 64)
    np.testing.assert_array_equal(total, expected.astype(np.int64))


def test_sweep_past_int64_raises_instead_of_wrapping():
    # 128 layers x 5*a*s^2*b at a=128, s=2**22, b=2**10 is 5 * 2**68 B: an int64 sweep would wrap.
    model = mm.models.gpt2_model(n_layers=128, hidden_size=8192, n_heads=128)
    with pytest.raises(ValueError, match="seq_len and batch_size"):
        mm.training_memory(model, seq_len=np.array([2**20, 2**22]), batch_size=2**10, **TEXTBOOK)
    # The same point as a scalar stays an exact Python int.
    scalar = mm.training_memory(model, seq_len=2**22, batch_size=2**10, **TEXTBOOK).activations
    assert scalar > 5 * 2**68


# ---- the exact model for the model types read from config.json, by hand from transformers 5.24's source ---
def _exact(config, **kw):
    shape = mm.from_hf_config(config)
    run = dict(precision="bf16", batch_size=1, seq_len=1024, activations="transformers", device="cpu")
    run.update(kw)
    return shape, mm.training_memory(shape, **run).activation_detail


def test_gemma_block_by_hand():
    from validation.published_configs import PUBLISHED_CONFIGS

    shape, detail = _exact(PUBLISHED_CONFIGS["gemma-7b"])
    e, t, h, a, kv, d, inner = 2, 1024, shape.hidden_size, shape.n_heads, shape.n_kv_heads, shape.head_dim, \
        shape.intermediate_size
    # modeling_gemma.py, one block trained with SDPA and no dropout. GemmaRMSNorm computes
    # x.float() * rsqrt(mean(x^2) + eps) * (1.0 + weight.float()) in fp32: it keeps x in fp32 (4th),
    # rsqrt (4t), the fp32 normalized x (4th, for the weight's gradient) and the fresh fp32 (1 + w)
    # vector (4h); two of them per block.
    norms = 2 * (8 * t * h + 4 * t + 4 * h)
    # q/k/v read the first norm's bf16 output (one storage); SDPA (CPU FlashAttention) keeps q, k, v,
    # its output (which o_proj reads through a view) and a fp32 log-sum-exp per row and head.
    attention = e * t * h + e * t * (2 * a * d + 2 * kv * d) + 4 * a * t
    # gate/up read the second norm's output; gelu_pytorch_tanh(gate) * up keeps gate, up and the GELU
    # output; down_proj keeps its input: 4 tensors t x I.
    mlp = e * t * h + 4 * e * t * inner
    assert detail.per_layer == norms + attention + mlp


def test_gemma_2_softcapped_eager_block_by_hand():
    from validation.published_configs import PUBLISHED_CONFIGS

    shape, detail = _exact(PUBLISHED_CONFIGS["gemma-2-2b"], attention="eager", dropout=False)
    e, s, t, h, a, d, inner = 2, 1024, 1024, shape.hidden_size, shape.n_heads, shape.head_dim, \
        shape.intermediate_size
    norms = 4 * (8 * t * h + 4 * t + 4 * h)  # four GemmaRMSNorms (sandwich), as in the Gemma test
    # Eager: matmul keeps copies of q and k^T (k repeated to a heads), the scores' tanh output
    # (attn_logit_softcapping: / cap, tanh, * cap; tanh keeps its output), the fp32 softmax output,
    # its bf16 copy (read by probs @ v), the repeated v, and the merged heads o_proj reads.
    attention = e * t * h + 4 * e * t * a * d + (e + 4 + e) * a * s * s
    mlp = e * t * h + 4 * e * t * inner
    assert detail.per_layer == norms + attention + mlp
    # final_logit_softcapping: the tanh over the logits keeps its bf16 output, t x V, outside the blocks.
    without = mm.training_memory(mm.from_hf_config(dict(PUBLISHED_CONFIGS["gemma-2-2b"], final_logit_softcapping=None)),
                                 precision="bf16", batch_size=1, seq_len=1024, attention="eager",
                                 activations="transformers", device="cpu").activation_detail
    assert detail.outside_layers - without.outside_layers == e * t * shape.vocab_size


def test_mixtral_moe_block_by_hand():
    from validation.published_configs import PUBLISHED_CONFIGS

    shape, detail = _exact(PUBLISHED_CONFIGS["Mixtral-8x7B-v0.1"], seq_len=512)
    e, t, h, a, kv, d = 2, 512, shape.hidden_size, shape.n_heads, shape.n_kv_heads, shape.head_dim
    n_exp, k, width = shape.n_experts, shape.experts_per_tok, shape.expert_intermediate_size
    rows = t * k  # every token goes through k experts: t x k rows in all, whatever the routing
    # LlamaRMSNorm (x2): fp32 input, rsqrt, the bf16 normalized x (weight gradient) and its output.
    norms = 2 * (4 * t * h + 4 * t + 2 * e * t * h)
    attention = e * t * (2 * a * d + 2 * kv * d) + 4 * a * t  # SDPA: q, k, v, output, log-sum-exp
    # MixtralTopKRouter: softmax(fp32) output t x E, topk's int64 indices, and the in-place division by
    # the top-k sum keeps the sum and autograd's copy of the weights before it (fp32, t x k).
    router = 4 * t * n_exp + 8 * rows + 4 * t + 4 * rows
    # grouped_mm_experts_forward (integrations/moe.py): the gathers' int64 indices (token index, sort
    # permutation, inverse permutation), the int32 offsets, the gathered input S x h, gate_up's output
    # S x 2I (SiLU and the product read its halves), the SiLU output and the product S x I each, the
    # down output S x h and the sorted fp32 routing weights.
    experts = 3 * 8 * rows + 4 * n_exp + e * rows * (h + 2 * width + 2 * width + h) + 4 * rows
    assert detail.per_layer == norms + attention + router + experts


def test_gpt_neox_parallel_residual_saves_the_block_input_once():
    from validation.published_configs import PUBLISHED_CONFIGS

    config = PUBLISHED_CONFIGS["pythia-160m"]
    shape, parallel = _exact(config)
    _, serial = _exact(dict(config, use_parallel_residual=False))
    # Both LayerNorms read the block input in the parallel layout (one storage, saved once); the serial
    # layout's second LayerNorm reads attention output + input, a new t x h tensor.
    assert serial.per_layer - parallel.per_layer == 2 * 1024 * shape.hidden_size
    # rotary_pct 0.25: the cos and sin tables are a quarter of a head wide (s x d/4 each, bf16).
    _, full_rotary = _exact(dict(config, rotary_pct=1.0))
    assert full_rotary.outside_layers - parallel.outside_layers == 2 * 1024 * 2 * (shape.head_dim * 3 // 4)


def test_use_cache_swaps_the_fused_qkv_storage_for_the_caches_copies():
    # With config use_cache (true in every config.json save_pretrained writes) and no checkpointing,
    # transformers builds a DynamicCache in the training forward; attention reads k and v back from
    # cache.update(), torch.cat copies (cache_utils.py:136-137). By hand, bf16 (e = 2), t = 1,024 tokens:
    from validation.published_configs import PUBLISHED_CONFIGS

    e, t = 2, 1024
    # GPT-NeoX (pythia-160m): SDPA kept v, a chunk of query_key_value's 3 x t x h output, so that whole storage;
    # with the cache it keeps v's own t x h copy (q and k were new tensors from the rotary torch.cat anyway).
    pythia = PUBLISHED_CONFIGS["pythia-160m"]
    shape, without = _exact(dict(pythia, use_cache=False))
    cached_shape, cached = _exact(dict(pythia, use_cache=True))
    assert cached_shape.use_cache and not shape.use_cache and not mm.from_hf_config(pythia).use_cache  # absent: off
    h = shape.hidden_size
    assert without.per_layer - cached.per_layer == 3 * e * t * h - e * t * h
    # Phi-3-mini (32 query and 32 key/value heads of 128): qkv_proj's t x (a + 2k) x d storage against v's
    # t x k x d copy, in SDPA and, at b = 1, in eager attention too (probs @ v keeps the view's storage).
    phi3 = PUBLISHED_CONFIGS["Phi-3-mini-4k-instruct"]
    shape, without = _exact(dict(phi3, use_cache=False))
    _, cached = _exact(dict(phi3, use_cache=True))
    a, kv, d = shape.n_heads, shape.n_kv_heads, shape.head_dim
    assert without.per_layer - cached.per_layer == e * t * (a + 2 * kv) * d - e * t * kv * d
    _, eager = _exact(dict(phi3, use_cache=False), attention="eager")
    _, eager_cached = _exact(dict(phi3, use_cache=True), attention="eager")
    assert eager.per_layer - eager_cached.per_layer == e * t * (a + 2 * kv) * d - e * t * kv * d
    # GPT-2 (no dropout, so the CPU runs its fused SDPA): q stays a view of c_attn's output, whose storage
    # SDPA kept for q, k and v alike; the cache adds k's and v's own t x h copies.
    gpt2 = dict(PUBLISHED_CONFIGS["gpt2"], attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    shape, without = _exact(dict(gpt2, use_cache=False))
    _, cached = _exact(dict(gpt2, use_cache=True))
    assert cached.per_layer - without.per_layer == 2 * e * t * shape.hidden_size
    # LLaMA's k and v come from their own projections: the copies replace tensors of the same size.
    llama = PUBLISHED_CONFIGS["Meta-Llama-3-8B"]
    assert _exact(dict(llama, use_cache=True))[1].per_layer == _exact(dict(llama, use_cache=False))[1].per_layer
    # Gradient checkpointing turns the cache off (GradientCheckpointingLayer, merge_with_config_defaults).
    assert (_exact(dict(pythia, use_cache=True), checkpointing=True)[1].total
            == _exact(dict(pythia, use_cache=False), checkpointing=True)[1].total)


def test_autocast_is_a_dtype_rule_of_the_one_tracer():
    """Under torch.autocast an nn.Linear on an fp32 input computes in bf16: it keeps a bf16 copy of its input (for
    the weight's gradient) and of its weight (for the input's gradient) and returns bf16; without autocast it keeps
    the input itself. By hand: t = 6 rows of 8 values into 16."""
    from memmath.trace import Trace

    amp = Trace(e=4, device="cpu", b=2, s=3, autocast=2)
    out = amp.linear(amp.new(6 * 8, 4, True), 6 * 16, True, None, "fc")
    assert out.elem == 2
    assert amp.bytes_in("outside") == 6 * 8 * 2 + 8 * 16 * 2  # input copy 96 B, weight copy 256 B
    plain = Trace(e=4, device="cpu", b=2, s=3)
    assert plain.linear(plain.new(6 * 8, 4, True), 6 * 16, True, None, "fc").elem == 4
    assert plain.bytes_in("outside") == 6 * 8 * 4  # the fp32 input itself, 192 B
    # a residual sum of the fp32 stream and a bf16 output promotes to fp32; without autocast it stays e
    assert amp.add(amp.new(10, 4), amp.new(10, 2)).elem == 4

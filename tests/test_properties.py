"""Properties over the public functions (hypothesis): totals add up, more training never costs less,
formatting round-trips, sweeps equal scalar calls, and nothing but ValueError/TypeError escapes."""

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import memmath as mm
from memmath_lessons.reference.measured import measured_qlora

PRECISIONS = list(mm.RECIPES)
OPTIMIZERS = list(mm.OPTIMIZERS)


# ---- strategies -------------------------------------------------------------------------------------
@st.composite
def shapes(draw):
    """Small and published model shapes of every family."""
    kind = draw(st.sampled_from(["preset", "gpt2", "llama", "bert", "uniform"]))
    layers = draw(st.integers(1, 6))
    if kind == "preset":
        return mm.PRESETS[draw(st.sampled_from(sorted(mm.PRESETS)))]
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    hidden = heads * draw(st.integers(1, 24))
    if kind == "gpt2":
        return mm.models.gpt2_model(n_layers=layers, hidden_size=hidden, n_heads=heads, vocab_size=draw(st.integers(1, 500)),
                             max_positions=draw(st.integers(1, 64)), tied_embeddings=draw(st.booleans()))
    if kind == "llama":
        kv = draw(st.sampled_from([d for d in (1, 2, 4, 8) if heads % d == 0]))
        return mm.models.llama_model(n_layers=layers, hidden_size=hidden, n_heads=heads, n_kv_heads=kv,
                              head_dim=draw(st.none() | st.integers(1, 32)), intermediate_size=draw(st.integers(1, 200)),
                              vocab_size=draw(st.integers(1, 500)), tied_embeddings=draw(st.booleans()),
                              attention_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()))
    if kind == "bert":
        return mm.models.bert_model(n_layers=layers, hidden_size=hidden, n_heads=heads, vocab_size=draw(st.integers(1, 500)),
                             max_positions=draw(st.integers(1, 64)), num_labels=draw(st.integers(0, 5)))
    widths = draw(st.booleans())
    return mm.uniform_model(draw(st.integers(layers, 10**12)), layers, hidden_size=hidden if widths else None,
                            n_heads=heads if widths else None, vocab_size=draw(st.none() | st.integers(1, 500)))


def lora_targets(shape):
    """Non-empty tuples of the LoRA targets this shape's family has."""
    available = [t for t in mm.models.LORA_TARGETS if _has_target(shape, t)]
    return st.lists(st.sampled_from(available), min_size=1, max_size=len(available), unique=True).map(tuple)


def _has_target(shape, target):
    try:  # in some block (a model whose blocks differ adapts it where it is)
        mm.LoRA(rank=1, targets=(target,)).trainable_params(shape)
        return True
    except ValueError:
        return False


@st.composite
def methods(draw, shape):
    """A method that applies to `shape`."""
    options = ["full", "freeze"]
    if shape.hidden_size is not None:
        options.append("adapters")
    if shape.family != "uniform":
        options += ["lora", "qlora"]
    kind = draw(st.sampled_from(options))
    if kind == "full":
        return mm.Full()
    if kind == "freeze":
        k = draw(st.integers(0, shape.n_layers))
        flags = dict(train_embeddings=draw(st.booleans()), train_final_norm=draw(st.booleans()),
                     train_head=draw(st.booleans()))
        return mm.Freeze(trainable_layers=k, **flags) if draw(st.booleans()) else mm.Freeze(
            frozen_layers=shape.n_layers - k, **flags)
    if kind == "adapters":
        return mm.Adapters(bottleneck=draw(st.integers(1, 64)), train_norms=draw(st.booleans()),
                           train_head=draw(st.booleans()), adapter_format=draw(st.sampled_from([None, "fp32", "bf16"])))
    fmt = draw(st.sampled_from([None, "fp32", "bf16", "fp16"]))
    if kind == "lora":
        return mm.LoRA(rank=draw(st.integers(1, 64)), targets=draw(lora_targets(shape)), adapter_format=fmt)
    return mm.QLoRA(rank=draw(st.integers(1, 64)), targets=draw(lora_targets(shape)), adapter_format=fmt,
                    double_quant=draw(st.booleans()))


@st.composite
def settings_for(draw, shape):
    return dict(
        precision=draw(st.sampled_from(PRECISIONS)), optimizer=draw(st.sampled_from(OPTIMIZERS)),
        batch_size=draw(st.integers(1, 64)), seq_len=draw(st.none() | st.integers(1, 4096)),
        checkpointing=draw(st.booleans()), attention=draw(st.sampled_from(["eager", "sdpa"])),
        dropout=draw(st.booleans()), device=draw(st.sampled_from(["cuda", "cpu"])),
        n_gpus=draw(st.integers(1, 64)), zero_stage=draw(st.integers(0, 3)),
    )


@st.composite
def training_cases(draw):
    shape = draw(shapes())
    return shape, draw(methods(shape)), draw(settings_for(shape))


# ---- parts add up -------------------------------------------------------------------------------------
@given(training_cases())
def test_parts_add_up_to_the_total(case):
    shape, method, kwargs = case
    m = mm.training_memory(shape, method=method, **kwargs)
    parts = m.parts()
    assert list(parts) == list(mm.training.PARTS)
    for name, value in parts.items():
        assert isinstance(value, int) and value >= 0, name
    assert m.without_activations == m.total - m.activations
    assert 0 <= m.trainable_params <= m.total_params + m.adapter_params
    assert int(m.to_frame()["bytes"].sum()) == m.total


@given(shapes(), st.sampled_from(["bf16", "fp32", "int8", "int4", "nf4", "fp8"]), st.integers(1, 16),
       st.integers(1, 8192))
def test_inference_parts_add_up(shape, fmt, batch, context):
    m = mm.inference_memory(shape, weights_format=fmt, batch_size=batch, context_len=context)
    assert all(isinstance(v, int) and v >= 0 for v in m.parts().values())
    assert m.rule_of_thumb >= 1.2 * (m.weights + m.quantization_constants)


@given(shapes())
def test_breakdowns_add_up(shape):
    assert sum(shape.component_params().values()) == shape.n_params
    assert int(shape.breakdown()["total"].sum()) == shape.n_params


# ---- more training never costs less ----------------------------------------------------------------------
def _assert_no_less(smaller, larger, *, tensors_grow=False):
    # 8-bit Adam is the one exception, when tensors grow (a higher LoRA rank, a wider adapter): a tensor that grows past
    # bitsandbytes' 4,096 elements trades fp32 states for 8-bit ones (tests/test_training.py shows a rank
    # where that saves memory). Adding tensors, layers, batch or tokens never lowers it.
    eight_bit = tensors_grow and larger.optimizer.name == "adam8bit"
    for part in ("gradients", "gradient_accumulation", "master_weights", "optimizer_states", "activations"):
        if not (eight_bit and part == "optimizer_states"):
            assert getattr(larger, part) >= getattr(smaller, part), part
    assert eight_bit or larger.total >= smaller.total
    assert larger.trainable_params >= smaller.trainable_params


@given(st.data())
def test_a_higher_lora_rank_never_needs_less(data):
    shape = data.draw(shapes().filter(lambda s: s.family != "uniform"))
    kwargs = data.draw(settings_for(shape))
    targets = data.draw(lora_targets(shape))
    cls = data.draw(st.sampled_from([mm.LoRA, mm.QLoRA]))
    r1, r2 = sorted(data.draw(st.lists(st.integers(1, 256), min_size=2, max_size=2)))
    low = mm.training_memory(shape, method=cls(rank=r1, targets=targets), **kwargs)
    high = mm.training_memory(shape, method=cls(rank=r2, targets=targets), **kwargs)
    _assert_no_less(low, high, tensors_grow=True)
    assert high.weights >= low.weights


@given(st.data())
def test_morelora_targets_never_need_less(data):
    shape = data.draw(shapes().filter(lambda s: s.family != "uniform"))
    kwargs = data.draw(settings_for(shape))
    more = data.draw(lora_targets(shape))
    fewer = more[: data.draw(st.integers(1, len(more)))]
    rank = data.draw(st.integers(1, 64))
    _assert_no_less(mm.training_memory(shape, method=mm.LoRA(rank=rank, targets=fewer), **kwargs),
                    mm.training_memory(shape, method=mm.LoRA(rank=rank, targets=more), **kwargs))


@given(st.data())
def test_training_another_layer_never_needs_less_and_freezing_one_never_needs_more(data):
    shape = data.draw(shapes())
    kwargs = data.draw(settings_for(shape))
    flags = dict(train_embeddings=data.draw(st.booleans()), train_final_norm=data.draw(st.booleans()),
                 train_head=data.draw(st.booleans()))
    k = data.draw(st.integers(0, shape.n_layers - 1))
    fewer = mm.training_memory(shape, method=mm.Freeze(trainable_layers=k, **flags), **kwargs)
    more = mm.training_memory(shape, method=mm.Freeze(trainable_layers=k + 1, **flags), **kwargs)
    _assert_no_less(fewer, more)
    f = data.draw(st.integers(0, shape.n_layers - 1))
    frozen_more = mm.training_memory(shape, method=mm.Freeze(frozen_layers=f + 1, **flags), **kwargs)
    frozen_less = mm.training_memory(shape, method=mm.Freeze(frozen_layers=f, **flags), **kwargs)
    assert frozen_more.total <= frozen_less.total
    # Full finetuning is the most any freezing can need.
    assert mm.training_memory(shape, method=mm.Full(), **kwargs).total >= frozen_less.total


@given(st.data())
def test_a_wider_adapter_never_needs_less(data):
    shape = data.draw(shapes().filter(lambda s: s.hidden_size is not None))
    kwargs = data.draw(settings_for(shape))
    m1, m2 = sorted(data.draw(st.lists(st.integers(1, 512), min_size=2, max_size=2)))
    _assert_no_less(mm.training_memory(shape, method=mm.Adapters(bottleneck=m1), **kwargs),
                    mm.training_memory(shape, method=mm.Adapters(bottleneck=m2), **kwargs), tensors_grow=True)


@given(training_cases(), st.integers(1, 64), st.integers(1, 4096))
def test_bigger_batches_and_longer_sequences_never_need_less(case, extra_batch, extra_seq):
    shape, method, kwargs = case
    kwargs = dict(kwargs, seq_len=kwargs["seq_len"] or 128)
    small = mm.training_memory(shape, method=method, **kwargs)
    big = mm.training_memory(shape, method=method, **dict(kwargs, batch_size=kwargs["batch_size"] + extra_batch,
                                                               seq_len=kwargs["seq_len"] + extra_seq))
    assert big.activations >= small.activations and big.total >= small.total


@given(training_cases(), st.integers(2, 64))
def test_sharding_never_adds_memory_per_gpu(case, n_gpus):
    shape, method, kwargs = case
    kwargs = dict(kwargs, n_gpus=n_gpus)
    totals = [mm.training_memory(shape, method=method, **dict(kwargs, zero_stage=z)).total for z in range(4)]
    assert totals == sorted(totals, reverse=True)
    assert mm.training_memory(shape, method=method, **dict(kwargs, n_gpus=1, zero_stage=0)).total >= totals[0]


# ---- formatting round-trips ------------------------------------------------------------------------------
@given(st.integers(0, 10**18), st.sampled_from(list(mm.UNITS)), st.integers(0, 6))
def test_format_then_parse_round_trips(n, unit, digits):
    text = mm.format_bytes(n, unit, digits=digits)
    assert text.endswith(" " + unit)  # always labelled
    back = mm.parse_bytes(text)
    step = 1 if unit == "B" else mm.UNITS[unit] * 10.0**-digits
    assert abs(back - n) <= step / 2 + n * 1e-15 + 1


@given(st.integers(1, 10**15))
def test_parse_count_reads_what_format_would_print(n):
    assert mm.units.parse_count(f"{n:,}") == n and mm.units.parse_count(str(n)) == n


# ---- sweeps equal scalar calls ----------------------------------------------------------------------------
SWEEP = st.lists(st.integers(1, 4096), min_size=1, max_size=5)


@given(st.data())
def test_batch_and_sequence_sweeps_equal_scalar_calls(data):
    shape = data.draw(shapes().filter(lambda s: s.has_shape))
    method, kwargs = data.draw(methods(shape)), data.draw(settings_for(shape))
    batches = np.array(data.draw(st.lists(st.integers(1, 64), min_size=1, max_size=4)))[:, None]
    lengths = np.array(data.draw(SWEEP))[None, :]
    kwargs.pop("batch_size"), kwargs.pop("seq_len")
    points = {int(s): mm.training_memory(shape, method=method, batch_size=1, seq_len=int(s), **kwargs).activation_model
              for s in lengths[0]}
    if len(set(points.values())) > 1:  # single calls would answer with two activation models: refused by name
        with pytest.raises(ValueError, match="^seq_len: this sweep runs from"):
            mm.training_memory(shape, method=method, batch_size=batches, seq_len=lengths, **kwargs)
        return
    grid = mm.training_memory(shape, method=method, batch_size=batches, seq_len=lengths, **kwargs)
    for i, b in enumerate(batches[:, 0]):
        for j, s in enumerate(lengths[0]):
            point = mm.training_memory(shape, method=method, batch_size=int(b), seq_len=int(s), **kwargs)
            for part in mm.training.PARTS:
                assert np.broadcast_to(getattr(grid, part), (len(batches), lengths.shape[1]))[i, j] == getattr(point, part)
            assert np.asarray(grid.total)[i, j] == point.total


@given(st.data())
def test_rank_and_layer_sweeps_equal_scalar_calls(data):
    shape = data.draw(shapes().filter(lambda s: s.family != "uniform"))
    kwargs = data.draw(settings_for(shape))
    ranks = data.draw(st.lists(st.integers(1, 256), min_size=1, max_size=5))
    targets = data.draw(lora_targets(shape))
    swept = mm.training_memory(shape, method=mm.LoRA(rank=np.array(ranks), targets=targets), **kwargs)
    for i, r in enumerate(ranks):
        point = mm.training_memory(shape, method=mm.LoRA(rank=r, targets=targets), **kwargs)
        assert np.broadcast_to(swept.total, (len(ranks),))[i] == point.total
        assert np.broadcast_to(swept.trainable_params, (len(ranks),))[i] == point.trainable_params
    layers = data.draw(st.lists(st.integers(0, shape.n_layers), min_size=1, max_size=5))
    swept = mm.training_memory(shape, method=mm.Freeze(frozen_layers=np.array(layers)), **kwargs)
    for i, f in enumerate(layers):
        point = mm.training_memory(shape, method=mm.Freeze(frozen_layers=f), **kwargs)
        assert np.broadcast_to(swept.total, (len(layers),))[i] == point.total


@given(st.lists(st.integers(1, 10**13), min_size=1, max_size=5), st.sampled_from(PRECISIONS),
       st.sampled_from(OPTIMIZERS), st.integers(1, 10))
def test_parameter_count_sweeps_equal_scalar_calls(counts, precision, optimizer, frozen):
    layers = 10
    swept = mm.training_memory(mm.uniform_model(np.array(counts) * layers, layers), precision=precision,
                               optimizer=optimizer, method=mm.Freeze(frozen_layers=frozen))
    for i, n in enumerate(counts):
        point = mm.training_memory(mm.uniform_model(n * layers, layers), precision=precision, optimizer=optimizer,
                                   method=mm.Freeze(frozen_layers=frozen))
        for part in mm.training.PARTS:
            assert np.broadcast_to(getattr(swept, part), (len(counts),))[i] == getattr(point, part), part
        assert np.asarray(swept.trainable_params)[i] == point.trainable_params


@given(shapes().filter(lambda s: s.has_shape), SWEEP, st.lists(st.integers(1, 64), min_size=1, max_size=3),
       st.sampled_from(["bf16", "fp8", "fp32"]))
def test_kv_cache_sweeps_equal_scalar_calls(shape, lengths, batches, fmt):
    if mm.inference.quantized_cache_refusal(shape, fmt):  # a hybrid model's cache cannot be quantized: both refuse
        with pytest.raises(ValueError, match="kv_format"):
            mm.kv_cache_bytes(shape, context_len=np.array(lengths), kv_format=fmt)
        with pytest.raises(ValueError, match="kv_format"):
            mm.kv_cache_bytes(shape, context_len=lengths[0], kv_format=fmt)
        return
    grid = mm.kv_cache_bytes(shape, context_len=np.array(lengths)[:, None], batch_size=np.array(batches)[None, :],
                             kv_format=fmt)
    for i, s in enumerate(lengths):
        for j, b in enumerate(batches):
            assert grid[i, j] == mm.kv_cache_bytes(shape, context_len=s, batch_size=b, kv_format=fmt)


@given(hnp.arrays(np.float64, st.integers(1, 20), elements=st.floats(allow_nan=True, allow_infinity=True)),
       st.sampled_from(list(mm.FORMATS)))
def test_rounding_arrays_equal_scalars_and_rounding_is_idempotent(values, fmt):
    with np.errstate(all="ignore"):
        rounded = mm.formats.round_to_format(values, fmt)
        for x, r in zip(values, rounded):
            scalar = mm.formats.round_to_format(float(x), fmt)
            assert (scalar == r) or (math.isnan(scalar) and math.isnan(r))
        again = mm.formats.round_to_format(rounded, fmt)
    assert np.array_equal(again, rounded, equal_nan=True)


@given(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6), st.sampled_from(list(mm.FORMATS)))
def test_rounding_keeps_order(x, y, fmt):
    assume(x <= y)
    with np.errstate(all="ignore"):
        rx, ry = mm.formats.round_to_format(x, fmt), mm.formats.round_to_format(y, fmt)
    assume(not (math.isnan(rx) or math.isnan(ry)))
    assert rx <= ry


# ---- nothing but ValueError or TypeError escapes, and the message names the field -------------------------
RAGGED = st.sampled_from([[[1, 2], [3]], [1, [2, 3]], [[1], 2.5], ([1, 2], [3])])
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(), st.text(max_size=12),
    st.sampled_from(["", "7B", "bf16", "all", "gpt2", "24 GiB", "nan", "-1", "1e400", "{}", "[]", "q"]),
    st.lists(st.integers(-5, 5), max_size=3), st.tuples(st.text(max_size=3)), RAGGED,
    hnp.arrays(st.sampled_from([np.int64, np.float64, np.bool_]), hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)),
    st.just(object()), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    st.sampled_from([np.nan, np.inf, -np.inf, np.int64(7), np.float32(2.5), np.array(3)]),
    st.integers(4301, 4400).map(lambda digits: 10**digits),  # longer than Python will print
)


class Arg:
    """A valid value (or strategy) that the fuzz test replaces by junk about a quarter of the time."""

    def __init__(self, valid):
        self.valid = valid if isinstance(valid, st.SearchStrategy) else st.just(valid)


def maybe(valid):
    return Arg(valid)


def junky(valid):
    """Inside a dict (a config): a valid value most of the time, anything at all otherwise."""
    return st.one_of(valid if isinstance(valid, st.SearchStrategy) else st.just(valid), JUNK)


TINY_LLAMA_SHAPE = mm.models.llama_model(n_layers=2, hidden_size=64, n_heads=4, intermediate_size=128, vocab_size=100)
CONFIG = st.fixed_dictionaries({
    "model_type": junky(st.sampled_from(["gpt2", "llama", "mistral", "bert"])), "n_layer": junky(2),
    "n_embd": junky(64), "n_head": junky(4), "vocab_size": junky(10), "n_positions": junky(8),
    "hidden_size": junky(64), "num_attention_heads": junky(4), "num_hidden_layers": junky(2),
    "intermediate_size": junky(128), "max_position_embeddings": junky(8), "num_key_value_heads": junky(2),
    "tie_word_embeddings": junky(False), "head_dim": junky(16), "id2label": junky({"0": "a"}),
    "architectures": junky(["BertForSequenceClassification"]), "_name_or_path": junky("org/model")})


def _config_text(config):
    """The config as pasted JSON text; an integer too long for Python to print stays in, as digits."""
    import json

    try:
        return json.dumps(config, default=str)
    except ValueError:
        return '{"model_type": "gpt2", "n_layer": ' + "9" * 4400 + "}"


SHAPE_FIELDS = ("family", "n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "intermediate_size",
                "vocab_size", "max_positions", "tied_embeddings", "type_vocab_size", "num_labels",
                "attention_bias", "mlp_bias", "uniform_params", "n_params", "parameters", "name")
TRAIN = dict(precision=maybe("bf16"), optimizer=maybe("adamw"), batch_size=maybe(2), seq_len=maybe(64),
             checkpointing=maybe(False), attention=maybe("sdpa"), dropout=maybe(True))
MEMORY = mm.inference_memory("gpt2")
FORMAT_FIELDS = dict(name=maybe("x"), bits=maybe(8), kind=maybe("float"), exponent_bits=maybe(4), mantissa_bits=maybe(3),
                     max_value=maybe(448.0), epsilon=maybe(0.125), smallest_normal=maybe(2.0**-6),
                     has_inf=maybe(False), description=maybe(""))

CALLS = {
    "training_memory": (mm.training_memory, dict(
        model=maybe(st.sampled_from(["gpt2", "llama-2-7b", 7e9])), **TRAIN, n_gpus=maybe(2), zero_stage=maybe(1),
        activations=maybe("textbook"), device=maybe("cuda"), method=maybe(mm.Full()))),
    "peak_memory": (mm.peak_memory, dict(model=maybe(TINY_LLAMA_SHAPE), **TRAIN, method=maybe(mm.LoRA()),
                                         device=maybe("cpu"))),
    "step_timeline": (mm.step_timeline, dict(model=maybe(TINY_LLAMA_SHAPE), **TRAIN, method=maybe(mm.LoRA()),
                                             device=maybe("cpu"), step=maybe("first"))),
    "inference_memory": (mm.inference_memory, dict(
        model=maybe("mistral-7b"), weights_format=maybe("nf4"), kv_format=maybe("fp8"), batch_size=maybe(2),
        context_len=maybe(100), attention=maybe("eager"))),
    "rule_of_thumb_context_limit": (mm.inference.rule_of_thumb_context_limit, dict(
        model=maybe(TINY_LLAMA_SHAPE), weights_format=maybe("int8"), kv_format=maybe("bf16"), batch_size=maybe(1),
        attention=maybe("sdpa"), max_context=maybe(4096))),
    "kv_cache_bytes": (mm.kv_cache_bytes, dict(model=maybe("gpt2"), context_len=maybe(10), batch_size=maybe(1),
                                               kv_format=maybe("bf16"))),
    "working_set_bytes": (mm.inference.working_set_bytes, dict(shape=maybe("gpt2"), context_len=maybe(10), batch_size=maybe(1),
                                                     element_bits=maybe(16), attention=maybe("sdpa"))),
    "decode_tokens_per_second": (mm.inference.decode_tokens_per_second, dict(memory=maybe(MEMORY), gpu=maybe("H200"))),
    "InferenceMemory": (mm.inference.InferenceMemory, dict(
        weights=maybe(10), quantization_constants=maybe(0), kv_cache=maybe(5), working_set=maybe(1),
        weights_format=maybe("bf16"), kv_format=maybe("bf16"), notes=maybe(()))),
    "uniform_model": (mm.uniform_model, dict(n_params=maybe(10**6), n_layers=maybe(4), hidden_size=maybe(None),
                                             n_heads=maybe(None), vocab_size=maybe(None))),
    "gpt2_model": (mm.models.gpt2_model, dict(n_layers=maybe(2), hidden_size=maybe(64), n_heads=maybe(4), vocab_size=maybe(10),
                                       max_positions=maybe(8), intermediate_size=maybe(None), tied_embeddings=maybe(True))),
    "llama_model": (mm.models.llama_model, dict(n_layers=maybe(2), hidden_size=maybe(64), n_heads=maybe(4),
                                         intermediate_size=maybe(100), vocab_size=maybe(10), n_kv_heads=maybe(2),
                                         head_dim=maybe(None), tied_embeddings=maybe(False), attention_bias=maybe(False))),
    "bert_model": (mm.models.bert_model, dict(n_layers=maybe(2), hidden_size=maybe(64), n_heads=maybe(4),
                                       num_labels=maybe(0), type_vocab_size=maybe(2))),
    "ModelShape": (mm.ModelShape, dict(family=maybe("gpt2"), n_layers=maybe(2), hidden_size=maybe(64), n_heads=maybe(4),
                                       intermediate_size=maybe(256), vocab_size=maybe(10), max_positions=maybe(8),
                                       tied_embeddings=maybe(True))),
    "from_hf_config": (mm.from_hf_config, dict(config=maybe(CONFIG))),
    "config_from_text": (mm.planner.config_from_text, dict(text=maybe(CONFIG.map(_config_text)))),
    "resolve_model": (mm.resolve_model, dict(model=JUNK)),
    "get_format": (mm.get_format, dict(name=JUNK)),
    "stored_format": (mm.checkpoints.stored_format, dict(quantization_config=maybe({"quant_method": "fp8",
                                                                         "weight_block_size": [128, 128]}))),
    "parameter_counts": (mm.parameter_counts, dict(model=maybe("mixtral-8x7b"))),
    "NumberFormat": (mm.formats.NumberFormat, FORMAT_FIELDS),
    "round_to_format": (mm.formats.round_to_format, dict(value=maybe(1.5), fmt=maybe("bf16"), scale=maybe(1.0))),
    "float_step": (mm.formats.float_step, dict(fmt=maybe("bf16"), value=maybe(300.0))),
    "absmax_scale": (mm.formats.absmax_scale, dict(fmt=maybe("int8"), absmax=maybe(2.0))),
    "format_bytes": (mm.format_bytes, dict(n_bytes=maybe(10**9), unit=maybe("GiB"), digits=maybe(2))),
    "to_unit": (mm.to_unit, dict(n_bytes=maybe(10**9), unit=maybe("GB"))),
    "parse_count": (mm.units.parse_count, dict(text=JUNK)),
    "parse_bytes": (mm.parse_bytes, dict(text=JUNK)),
    "bytes_per_parameter": (mm.recipes.bytes_per_parameter, dict(precision=maybe("mixed"), optimizer=maybe("adam"))),
    "get_recipe": (mm.recipes.get_recipe, dict(name=JUNK)),
    "get_optimizer": (mm.recipes.get_optimizer, dict(name=JUNK)),
    "get_gpu": (mm.get_gpu, dict(name=JUNK)),
    "GPU": (mm.gpus.GPU, dict(name=maybe("card"), memory_bytes=maybe(2**34), bandwidth_bytes_per_s=maybe(10**12),
                         bf16_tflops=maybe(100.0), kind=maybe("datacenter"), marketed=maybe("16 GB"), note=maybe(""))),
    "Fit": (mm.gpus.Fit, dict(gpu=maybe(mm.GPUS["T4"]), required_bytes=maybe(10), available_bytes=maybe(20))),
    "check_fit": (mm.check_fit, dict(required_bytes=maybe(10**9), gpu=maybe("T4"), reserved_bytes=maybe(0))),
    "cuda_context_bytes": (mm.cuda_context_bytes, dict(gpu=maybe("T4"), cuda_version=maybe((12, 8)),
                                                      module_loading=maybe("eager"))),
    "fit_table": (mm.gpus.fit_table, dict(required_bytes=maybe(10**9), reserved_bytes=maybe(0), unit=maybe("GiB"))),
    "suggest_changes": (mm.planner.suggest_changes, dict(model=maybe("gpt2"), gpu=maybe("T4"), reserved_bytes=maybe(0),
                                                 max_gpus=maybe(8), batch_size=maybe(4), seq_len=maybe(1024))),
    "path_to_fit": (mm.planner.path_to_fit, dict(model=maybe("gpt2"), gpu=maybe("RTX 3060"), reserved_bytes=maybe(0),
                                         max_gpus=maybe(8), max_steps=maybe(3), batch_size=maybe(64),
                                         seq_len=maybe(1024))),
    "suggestions_frame": (mm.planner.suggestions_frame, dict(suggestions=maybe([]), unit=maybe("GB"))),
    "korthikanti_per_layer": (mm.activations.korthikanti_per_layer, dict(
        seq_len=maybe(8), batch_size=maybe(1), hidden_size=maybe(64), n_heads=maybe(4), element_bytes=maybe(2),
        mask_bytes=maybe(1), dropout=maybe(True), attention=maybe("eager"))),
    "korthikanti_terms": (mm.activations.korthikanti_terms, dict(
        seq_len=maybe(8), batch_size=maybe(1), hidden_size=maybe(64), n_heads=maybe(4), element_bytes=maybe(2),
        mask_bytes=maybe(1), dropout=maybe(True), attention=maybe("eager"))),
    "quant_constant_bytes": (mm.methods.quant_constant_bytes, dict(n_elements=maybe(4096), block=maybe(64),
                                                           double_quant=maybe(True))),
    "Full": (mm.Full, {}),
    "fewest_gpus_that_fit": (mm.planner.fewest_gpus_that_fit, dict(model=maybe("gpt2"), gpu=maybe("T4"), seq_len=maybe(64),
                                                           zero_stage=maybe(3), max_gpus=maybe(8))),
    "largest_batch_that_fits": (mm.planner.largest_batch_that_fits, dict(model=maybe("gpt2"), gpu=maybe("T4"),
                                                                 seq_len=maybe(64), max_batch=maybe(8))),
    "longest_sequence_that_fits": (mm.planner.longest_sequence_that_fits, dict(model=maybe("gpt2"), gpu=maybe("T4"),
                                                                       max_seq_len=maybe(256))),
    "trained_context": (mm.planner.trained_context, dict(model=maybe("llama-2-7b"))),
    "recipe_warning": (mm.gpus.recipe_warning, dict(precision=maybe("bf16"), gpu=maybe("T4"))),
    "RecipeWarning": (mm.gpus.RecipeWarning, dict(gpu=maybe(mm.GPUS["T4"]), precision=maybe("bf16"), needs=maybe("bf16"),
                                             instead=maybe("mixed"), message=maybe("no bf16 on a T4"))),
    "step_peak": (mm.planner.step_peak, dict(model=maybe("gpt2"), seq_len=maybe(64), batch_size=maybe(1))),
    "AdapterMethod": (mm.methods.AdapterMethod, {}),
    "Note": (mm.notes.Note, dict(kind=maybe("note_kind"), text=maybe("a note"))),
    "OptimizerStates": (mm.training.OptimizerStates, dict(moments=maybe(8), step_counters=maybe(4), block_constants=maybe(0))),
    "bits_per_weight": (mm.methods.bits_per_weight, dict(fmt=maybe("nf4"), block=maybe(64), double_quant=maybe(True))),
    "quant_constant_bits": (mm.methods.quant_constant_bits, dict(block=maybe(64), double_quant=maybe(True))),
    "Method": (mm.methods.Method, {}),
    "TrainingMemory": (mm.training.TrainingMemory, dict(
        weights=maybe(10), quantization_constants=maybe(0), gradients=maybe(10), gradient_accumulation=maybe(0),
        master_weights=maybe(0), optimizer_states=maybe(20), activations=maybe(np.array([1, 2])),
        trainable_params=maybe(5), total_params=maybe(5), adapter_params=maybe(0), recipe=maybe(mm.RECIPES["bf16"]),
        optimizer=maybe(mm.OPTIMIZERS["adamw"]), method=maybe(mm.Full()), model_name=maybe("m"), n_gpus=maybe(1),
        zero_stage=maybe(0), activations_estimated=maybe(True), activation_detail=maybe(None), notes=maybe(()))),
    "PeakEstimate": (mm.peak.PeakEstimate, dict(forward=maybe(3), backward=maybe(4), optimizer_step=maybe(2),
                                           resident=maybe(1), moments=maybe(()), notes=maybe(()))),
    "ActivationEstimate": (mm.activations.ActivationEstimate, dict(
        per_layer=maybe(10), layers_storing=maybe(2), recompute_peak=maybe(0), outside_layers=maybe(3), loss=maybe(4),
        model=maybe("textbook"), first_layer=maybe(None), frozen_per_layer=maybe(0), frozen_layers_storing=maybe(0),
        terms=maybe(()))),
    "ActivationTerm": (mm.activations.ActivationTerm, dict(block=maybe("mlp"), tensor=maybe("x"), unit=maybe("s*b*h"),
                                               coefficient=maybe(2), bytes=maybe(64))),
    "Suggestion": (mm.planner.Suggestion, dict(change=maybe("x"), run=maybe(mm.Run("gpt2")), total=maybe(5), saved=maybe(1),
                                       fits=maybe(True), cost=maybe(""))),
    "plan_serving": (mm.plan_serving, dict(model=maybe("llama-2-7b"), gpu=maybe("RTX 4090"), reserved_bytes=maybe(0),
                                           context_len=maybe(4096), batch_size=maybe(2), weights_format=maybe("bf16"))),
    "serving_changes": (mm.serving.serving_changes, dict(model=maybe("llama-2-13b"), gpu=maybe("RTX 4090"),
                                                 reserved_bytes=maybe(0), context_len=maybe(8192), batch_size=maybe(2))),
    "longest_context_that_fits": (mm.serving.longest_context_that_fits, dict(model=maybe("llama-2-7b"), gpu=maybe("T4"),
                                                                     reserved_bytes=maybe(0), kv_format=maybe("fp8"))),
    "ServingChange": (mm.serving.ServingChange, dict(change=maybe("x"), settings=maybe({}), total=maybe(5), saved=maybe(1),
                                             fits=maybe(True), headroom_bytes=maybe(0), cost=maybe(""))),
    "ServingPlan": (mm.serving.ServingPlan, dict(memory=maybe(MEMORY), settings=maybe({}))),
    "Serve": (mm.Serve, dict(model=maybe(st.sampled_from(["gpt2", "llama-2-7b", 7e9])), context_len=maybe(4096),
                             batch_size=maybe(2), weights_format=maybe("nf4"), kv_format=maybe("fp8"),
                             attention=maybe("eager"))),
    "Run": (mm.Run, dict(model=maybe(st.sampled_from(["gpt2", "llama-2-7b", 7e9])), **TRAIN, n_gpus=maybe(2),
                         zero_stage=maybe(1), activations=maybe("textbook"), device=maybe("cuda"),
                         method=maybe(mm.Full()), sharding=maybe("even"), rank=maybe(0))),
    "requirement": (mm.requirement, dict(model=maybe("gpt2"), **TRAIN, method=maybe(mm.LoRA()))),
    "Requirement": (mm.decision.Requirement, dict(bytes=maybe(5), basis=maybe("peak"), reason=maybe(""), memory=maybe(None),
                                         peak=maybe(None), run=maybe(mm.Run("gpt2")))),
    "plan_training": (mm.plan_training, dict(model=maybe("gpt2"), gpu=maybe("T4"), reserved_bytes=maybe(0),
                                             max_gpus=maybe(4), seq_len=maybe(256), batch_size=maybe(8))),
    "TrainingPlan": (mm.planner.TrainingPlan, dict(run=maybe(mm.Run("gpt2")), requirement=maybe(mm.requirement("gpt2")))),
    "FieldError": (mm.validate.FieldError, dict(field=maybe("batch_size"), message=maybe("batch_size must be ..."))),
    "Freeze": (mm.Freeze, dict(trainable_layers=maybe(1), train_embeddings=maybe(False), train_head=maybe(True))),
    "LoRA": (mm.LoRA, dict(rank=maybe(8), targets=maybe(("q", "v")), adapter_format=maybe("fp32"))),
    "DPO": (mm.DPO, dict(base=maybe(mm.LoRA()), reference=maybe("adapters_off"), beta=maybe(0.1))),
    "QLoRA": (mm.QLoRA, dict(rank=maybe(8), targets=maybe("all"), double_quant=maybe(True), quant_block=maybe(64),
                             quant_type=maybe("nf4"), layout=maybe("bitsandbytes"))),
    "measured_qlora": (measured_qlora, dict(quant_type=maybe("int8"), max_cases=maybe(1))),
    "Adapters": (mm.Adapters, dict(bottleneck=maybe(16), train_norms=maybe(False), adapter_format=maybe(None))),
    "parallel_memory": (mm.parallel.parallel_memory, dict(model=maybe("gpt2"), n_gpus=maybe(4), tp=maybe(2), pp=maybe(2),
                                                 micro_batches=maybe(2), seq_len=maybe(64), rank=maybe(3))),
    "worst_rank": (mm.parallel.worst_rank, dict(run=maybe(mm.Run("gpt2", n_gpus=2, tp=2, seq_len=64)))),
    "plan_layout": (mm.planner.plan_layout, dict(model=maybe("gpt2"), gpu=maybe("T4"), max_gpus=maybe(4), max_tp=maybe(2),
                                         seq_len=maybe(64))),
}
# What a message may call a field besides its own name: the words each function's checks use for it.
FIELD_WORDS = {
    "model": ("model", "parameter count", "n_params", "preset"), "shape": ("model", "parameter count", "n_params"),
    "weights_format": ("format",), "kv_format": ("format",), "fmt": ("format",), "adapter_format": ("format",),
    "text": ("parameter count", "size", "config"), "config": ("config",) + SHAPE_FIELDS,
    "memory": ("InferenceMemory",), "gpu": ("gpu",), "targets": ("LoRA target",),
    "trainable_layers": ("trainable_layers",), "suggestions": ("Suggestion",),
    "name": ("name", "format", "precision", "optimizer", "gpu"),
    "run": ("model", "parameter count", "n_params", "Run"),
}
NOT_FUZZED: set = set()  # every public callable is fuzzed


def test_every_public_callable_is_fuzzed():
    """Every callable memmath.__all__ names is fuzzed; CALLS fuzzes more, importable from their modules."""
    callables = {name for name in mm.__all__ if callable(getattr(mm, name))}
    assert callables - NOT_FUZZED <= set(CALLS), sorted(callables - NOT_FUZZED - set(CALLS))


def _words(key):
    return (key,) + FIELD_WORDS.get(key, ())


def _fuzz(function, arguments, data):
    kwargs, junk = {}, []
    for key, spec in arguments.items():
        if isinstance(spec, Arg):
            bad = data.draw(st.integers(0, 3), label=f"{key} is junk") == 0
            kwargs[key] = data.draw(JUNK if bad else spec.valid, label=key)
        else:
            bad, kwargs[key] = True, data.draw(spec, label=key)
        if bad:
            junk.append(key)
    try:
        with np.errstate(all="ignore"):
            result = function(**kwargs)
            total = getattr(result, "total", None)  # properties compute on access
    except (ValueError, TypeError) as error:
        message = str(error)
        named = [word for key in (junk or list(arguments)) for word in _words(key)]
        assert any(word in message for word in named), f"{message!r} names none of {named}"
        return None
    if total is not None:
        assert np.all(np.asarray(total) >= 0)
    return result


@pytest.mark.parametrize("name", CALLS)
@given(data=st.data())
def test_bad_input_gets_a_value_or_type_error_that_names_the_field(name, data):
    _fuzz(*CALLS[name], data)


def _case_row():
    from memmath_lessons.reference import load_measured

    return dict(load_measured().iloc[0])


REPLAY = ("predict_case", "predict_peak_case", "predicted_saved_per_layer", "case_model", "case_method",
          "case_arguments")


@pytest.mark.parametrize("name", REPLAY)
@given(data=st.data())
def test_replay_functions_name_the_column_of_a_bad_row(name, data):
    from memmath_lessons.reference import measured

    row = _case_row()
    bad = data.draw(st.sampled_from(sorted(row)))
    change = data.draw(st.sampled_from(["drop", "junk"]))
    if change == "drop":
        del row[bad]
    else:
        row[bad] = data.draw(JUNK)
    try:
        getattr(measured, name)(row)
    except (ValueError, TypeError) as error:
        assert bad in str(error), str(error)
    try:
        getattr(measured, name)(data.draw(JUNK))
    except (ValueError, TypeError) as error:
        assert "row" in str(error), str(error)


@given(st.one_of(JUNK, st.sampled_from(["nope.json", "", "../data/measured_cpu.json", "/etc/passwd", "."])))
def test_only_shipped_data_files_are_read(name):
    from memmath_lessons.reference import load_measured, measured_metadata

    for function in (load_measured, measured_metadata):
        with pytest.raises((ValueError, TypeError), match="shipped data file"):
            function(name)


@given(st.data())
def test_methods_with_junk_inside_training_memory(data):
    method = data.draw(st.one_of(
        st.builds(mm.LoRA, rank=st.integers(1, 64), targets=st.sampled_from(["all", ("q", "v"), ("gate",), ("o", "down")])),
        st.builds(mm.Freeze, trainable_layers=st.integers(0, 200)),
        st.builds(mm.Adapters, bottleneck=st.integers(1, 10**6)),
        st.builds(mm.QLoRA, rank=st.integers(1, 64), quant_block=st.integers(1, 4096)),
    ))
    model = data.draw(st.sampled_from(["gpt2", "bert-base-uncased", "llama-3-8b", 10**9])
                      | st.builds(mm.uniform_model, st.integers(100, 10**12), st.integers(1, 100)))
    try:
        mm.training_memory(model, method=method, seq_len=data.draw(st.none() | st.integers(1, 2**22)),
                           batch_size=data.draw(st.integers(1, 2**20))).total
    except (ValueError, TypeError):
        pass


# ---- sweeps up to and across the int64 limit ----------------------------------------------------------------
# A sweep computes in int64; a scalar call in exact Python ints. Up to memmath.validate.SWEEP_LIMIT (2**59 bytes)
# they must agree to the byte; past it the sweep must refuse, naming the inputs, never wrap around.
from memmath.validate import MAX_BATCH, MAX_SEQ, SWEEP_LIMIT  # noqa: E402

LARGE_SEQ = st.one_of(st.integers(1, 64), st.integers(1, MAX_SEQ), st.integers(MAX_SEQ // 4, MAX_SEQ))
LARGE_BATCH = st.one_of(st.integers(1, 8), st.integers(1, MAX_BATCH), st.integers(MAX_BATCH // 4, MAX_BATCH))
BIG_MODELS = ["gpt2", "llama-3-70b", "bert-base-uncased", "mistral-7b", "gpt3-175b"]


def _sweep_or_refusal(call, scalar, value, batches, lengths):
    """Either every grid point equals the scalar call, or the sweep refused and its largest point is too big."""
    try:
        grid = call(batch_size=np.array(batches)[:, None], seq_len=np.array(lengths)[None, :])
    except ValueError as error:
        message = str(error)
        try:
            top = value(scalar(batch_size=max(batches), seq_len=max(lengths)))
        except ValueError as scalar_error:  # refused for a reason the scalar call shares (a sliding window)
            # The sweep is refused when the run is built; the peak's scalar call says it has no peak model there.
            shared = str(scalar_error) == message or all("sliding_window" in m for m in (message, str(scalar_error)))
            assert shared and "seq_len" in message, (message, str(scalar_error))
            return
        assert "seq_len" in message and "batch_size" in message and "int64" in message, message
        assert top > SWEEP_LIMIT, (top, message)
        return
    values = np.broadcast_to(value(grid), (len(batches), len(lengths)))
    assert values.dtype == np.int64
    for i, b in enumerate(batches):
        for j, s in enumerate(lengths):
            point = value(scalar(batch_size=b, seq_len=s))
            assert isinstance(point, int) and point >= 0
            assert int(values[i, j]) == point, (b, s)


@pytest.mark.parametrize("activations", ["textbook", "transformers"])
@given(model=st.sampled_from(BIG_MODELS), lengths=st.lists(LARGE_SEQ, min_size=1, max_size=2),
       batches=st.lists(LARGE_BATCH, min_size=1, max_size=2), checkpointing=st.booleans(),
       attention=st.sampled_from(["eager", "sdpa"]))
def test_activation_sweeps_equal_scalar_calls_up_to_and_across_the_int64_limit(
        activations, model, lengths, batches, checkpointing, attention):
    kwargs = dict(activations=activations, checkpointing=checkpointing, attention=attention)

    def call(**sizes):
        return mm.training_memory(model, **kwargs, **sizes)

    _sweep_or_refusal(call, call, lambda m: m.activations, batches, lengths)
    _sweep_or_refusal(call, call, lambda m: m.total, batches, lengths)  # the total holds the activations


@given(model=st.sampled_from(BIG_MODELS), lengths=st.lists(LARGE_SEQ, min_size=1, max_size=2),
       batches=st.lists(LARGE_BATCH, min_size=1, max_size=2), checkpointing=st.booleans(),
       method=st.sampled_from([mm.Full(), mm.LoRA(rank=8, targets="all"), mm.Freeze(trainable_layers=1)]))
def test_peak_sweeps_equal_scalar_calls_up_to_and_across_the_int64_limit(model, lengths, batches, checkpointing,
                                                                          method):
    def call(**sizes):
        return mm.peak_memory(model, method=method, checkpointing=checkpointing, device="cpu", **sizes)

    _sweep_or_refusal(call, call, lambda p: p.total, batches, lengths)


@given(model=st.sampled_from(BIG_MODELS), ranks=st.lists(st.integers(1, 2**16), min_size=1, max_size=3),
       seq_len=LARGE_SEQ, batch_size=LARGE_BATCH, activations=st.sampled_from(["textbook", "transformers"]))
def test_rank_sweeps_equal_scalar_calls_or_refuse_across_the_int64_limit(model, ranks, seq_len, batch_size,
                                                                         activations):
    kwargs = dict(seq_len=seq_len, batch_size=batch_size, activations=activations)
    try:
        swept = mm.training_memory(model, method=mm.LoRA(rank=np.array(ranks), targets="all"), **kwargs)
    except ValueError as error:
        try:
            top = mm.training_memory(model, method=mm.LoRA(rank=max(ranks), targets="all"), **kwargs).activations
        except ValueError as scalar_error:  # refused for a reason the scalar call shares (a sliding window)
            assert str(scalar_error) == str(error)
            return
        assert "int64" in str(error)
        assert top > SWEEP_LIMIT
        return
    for i, r in enumerate(ranks):
        point = mm.training_memory(model, method=mm.LoRA(rank=r, targets="all"), **kwargs)
        assert int(np.broadcast_to(swept.total, (len(ranks),))[i]) == point.total

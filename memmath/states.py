"""Caches and recurrent states, layer by layer, as transformers 5.24 keeps them in a DynamicCache.

A model describes its decoder layers as a list of the records below and `cache_bytes` sums them:

    layers = [Mamba2(heads=128, head_dim=64, state_size=128, n_groups=1, conv_kernel=4)] * 3 \\
             + [FullAttention(kv_heads=8, head_dim=128)]
    cache_bytes(layers, tokens=32_768, batch=1, dtype="bf16")

or, from a config's own layer_types, `layers_from_layer_types(config["layer_types"], full=..., linear=...)`.

What each kind holds (transformers 5.24, cache_utils.py: DYNAMIC_LAYER_TYPE_MAPPING picks a cache layer per
entry of config.layer_types; measured on the CPU on tiny configs in tests/test_states.py):

- full attention (DynamicLayer): keys and values of every token, 2 x kv_heads x head_dim values a token;
- sliding and chunked attention (DynamicSlidingWindowLayer, both: "chunked_attention" maps to the sliding layer
  with sliding_window = attention_chunk_size): a view of the last window - 1 tokens of torch.cat(old, new), whose
  storage holds min(tokens, window) tokens once decoding, and the whole prompt right after the prefill;
- multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): the normed compressed key/value (kv_lora_rank) as the
  "keys" and the rotary key (qk_rope_head_dim) as the "values" of one head, expanded to every head after the read
  (releases up to 5.14 cached the expanded heads: decompressed_latent_attention_bytes);
- Mamba-2 and gated DeltaNet (LinearAttentionLayer): a conv state of conv_kernel columns in the model's dtype and a
  recurrent state in fp32 (the PyTorch paths compute it in fp32 and the cache keeps zeros_like of it), a fixed size
  per sequence whatever the context;
- LFM2's gated short convolution (LinearAttentionLayer for layer type "conv"): a conv state alone, conv_kernel
  columns of hidden_size channels in the model's dtype;
- a layer that reuses an earlier layer's keys and values (Gemma 3n's last num_kv_shared_layers, which read them
  from the forward pass's KVSharingDict) or has no attention (Nemotron-H's MLP layers) is a DummyLayer and holds
  nothing.

Bytes follow memmath.inference: ceil(values x bits / 8), one format name per dtype ("bf16", "fp32", "fp8").
Every function takes Python ints and returns an exact Python int.
"""

from __future__ import annotations

from . import validate
# The recurrent mixers (memmath/recurrent.py, which a ModelShape needs without the caches), re-exported as layer kinds.
from .recurrent import (RECURRENT_STATE_FORMAT, GatedDeltaNet, Mamba2, ShortConv, _bytes, _check_dims, _dim,  # noqa: F401
                        gated_deltanet_state_bytes, mamba2_state_bytes, short_conv_state_bytes, values_bytes)  # noqa: F401
from .values import frozen

TRANSFORMERS_VERSION = "5.24"  # the release whose cache_utils.py and modeling files these layouts follow


def _tokens(tokens, batch):
    return (validate.count("tokens", tokens, high=validate.MAX_SEQ, scalar=True),
            validate.count("batch", batch, high=validate.MAX_BATCH, scalar=True))


def full_attention_bytes(*, kv_heads, head_dim, tokens, batch=1, dtype="bf16", value_head_dim=None) -> int:
    """Keys and values of every token: (head_dim + value_head_dim) x kv_heads x tokens x batch values.

    transformers' DynamicLayer concatenates each step's keys and values onto the cache (torch.cat), so after any
    step its storage holds exactly the tokens seen. value_head_dim: when values are narrower than keys (None: equal).
    """
    tokens, batch = _tokens(tokens, batch)
    kv_heads, head_dim = _dim("kv_heads", kv_heads), _dim("head_dim", head_dim)
    value_head_dim = head_dim if value_head_dim is None else _dim("value_head_dim", value_head_dim)
    return _bytes(kv_heads * (head_dim + value_head_dim) * tokens * batch, dtype)


def window_tokens(window, tokens, *, after_prefill=False) -> int:
    """Tokens a sliding or chunked layer's storage holds after `tokens` tokens of context.

    DynamicSlidingWindowLayer.update (cache_utils.py) keeps full[:, :, -window + 1:], a view: the cache shows
    window - 1 tokens but holds the storage of torch.cat(old, new). Decoding one token at a time, that storage is
    min(tokens, window) tokens; right after the prefill (after_prefill=True) it is the whole prompt.
    """
    window = _dim("window", window)
    tokens = validate.count("tokens", tokens, high=validate.MAX_SEQ, scalar=True)
    return tokens if validate.flag("after_prefill", after_prefill) else min(tokens, window)


def sliding_attention_bytes(*, kv_heads, head_dim, window, tokens, batch=1, dtype="bf16", after_prefill=False) -> int:
    """A sliding-window layer (gpt-oss's alternating 128-token windows, Gemma 3's local layers): 2 x kv_heads x
    head_dim values for each of window_tokens(window, tokens) tokens of every sequence."""
    kept = window_tokens(window, tokens, after_prefill=after_prefill)
    return full_attention_bytes(kv_heads=kv_heads, head_dim=head_dim, tokens=kept, batch=batch, dtype=dtype)


def chunked_attention_bytes(*, kv_heads, head_dim, chunk, tokens, batch=1, dtype="bf16", after_prefill=False) -> int:
    """A chunked-attention layer (Llama 4's attention_chunk_size, 8,192): transformers caches it exactly as a
    sliding window of `chunk` tokens (DYNAMIC_LAYER_TYPE_MAPPING maps "chunked_attention" to
    DynamicSlidingWindowLayer with sliding_window = attention_chunk_size), so it holds min(tokens, chunk) tokens."""
    return sliding_attention_bytes(kv_heads=kv_heads, head_dim=head_dim, window=chunk, tokens=tokens, batch=batch,
                                   dtype=dtype, after_prefill=after_prefill)


def latent_attention_bytes(*, kv_lora_rank, rope_head_dim, tokens, batch=1, dtype="bf16") -> int:
    """Multi-head latent attention (DeepSeek-V2, Liu et al. 2024, section 2.1): (kv_lora_rank + rope_head_dim) values a
    token, shared by every head.

    transformers 5.24's DeepseekV2Attention and DeepseekV3Attention call cache.update(kv_nope, k_pe) with the
    compressed key/value [batch, 1, tokens, kv_lora_rank] and the rotary key [batch, 1, tokens, qk_rope_head_dim],
    and expand them to every head after the read (expand_kv). DeepSeek-V2-Lite (27 layers, kv_lora_rank 512,
    qk_rope_head_dim 64) at 32,768 tokens in bf16: 27 x 32,768 x 576 x 2 B = 1.02 GB.
    """
    tokens, batch = _tokens(tokens, batch)
    values = _dim("kv_lora_rank", kv_lora_rank) + _dim("rope_head_dim", rope_head_dim)
    return _bytes(values * tokens * batch, dtype)


def decompressed_latent_attention_bytes(*, heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, tokens, batch=1,
                                        dtype="bf16") -> int:
    """What releases of transformers up to 5.14 cached for the same layer: the decompressed keys
    (qk_nope_head_dim + qk_rope_head_dim per head) and values (v_head_dim per head) of every head, before the cache
    update moved ahead of the expansion (huggingface/transformers pull request 47761 for DeepseekV3Attention, whose
    thread says the latents are cached "since #47761"). DeepSeek-V2-Lite
    (16 heads, 128 + 64 and 128) at 32,768 tokens in bf16: 27 x 32,768 x 16 x 320 x 2 B = 9.06 GB."""
    tokens, batch = _tokens(tokens, batch)
    key = _dim("qk_nope_head_dim", qk_nope_head_dim) + _dim("qk_rope_head_dim", qk_rope_head_dim)
    return _bytes(_dim("heads", heads) * (key + _dim("v_head_dim", v_head_dim)) * tokens * batch, dtype)


# Layer records: one per decoder layer, so a model lists its layers and cache_bytes sums them.


@frozen
class FullAttention:
    """A full-attention layer: every token's keys and values."""

    kv_heads: int
    head_dim: int
    value_head_dim: int | None = None
    kind = "full_attention"

    def __post_init__(self):
        _check_dims(self, ("kv_heads", "head_dim"), optional=("value_head_dim",))

    def nbytes(self, *, tokens, batch=1, dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT, after_prefill=False):
        return full_attention_bytes(kv_heads=self.kv_heads, head_dim=self.head_dim, value_head_dim=self.value_head_dim,
                                    tokens=tokens, batch=batch, dtype=dtype)


@frozen
class SlidingAttention:
    """A sliding-window layer of `window` tokens (config.sliding_window)."""

    kv_heads: int
    head_dim: int
    window: int
    kind = "sliding_attention"

    def __post_init__(self):
        _check_dims(self, ("kv_heads", "head_dim", "window"))

    def nbytes(self, *, tokens, batch=1, dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT, after_prefill=False):
        return sliding_attention_bytes(kv_heads=self.kv_heads, head_dim=self.head_dim, window=self.window,
                                       tokens=tokens, batch=batch, dtype=dtype, after_prefill=after_prefill)


@frozen
class ChunkedAttention:
    """A chunked-attention layer of `chunk` tokens (Llama 4's config.attention_chunk_size)."""

    kv_heads: int
    head_dim: int
    chunk: int
    kind = "chunked_attention"

    def __post_init__(self):
        _check_dims(self, ("kv_heads", "head_dim", "chunk"))

    def nbytes(self, *, tokens, batch=1, dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT, after_prefill=False):
        return chunked_attention_bytes(kv_heads=self.kv_heads, head_dim=self.head_dim, chunk=self.chunk,
                                       tokens=tokens, batch=batch, dtype=dtype, after_prefill=after_prefill)


@frozen
class LatentAttention:
    """A multi-head latent attention layer (config.kv_lora_rank, config.qk_rope_head_dim)."""

    kv_lora_rank: int
    rope_head_dim: int
    kind = "latent_attention"

    def __post_init__(self):
        _check_dims(self, ("kv_lora_rank", "rope_head_dim"))

    def nbytes(self, *, tokens, batch=1, dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT, after_prefill=False):
        return latent_attention_bytes(kv_lora_rank=self.kv_lora_rank, rope_head_dim=self.rope_head_dim,
                                      tokens=tokens, batch=batch, dtype=dtype)


@frozen
class NoCache:
    """A layer that stores nothing: it reuses an earlier layer's keys and values (Gemma 3n's last
    num_kv_shared_layers, kv_sharing_modes "reuse") or has no attention (an MLP or MoE layer); a DummyLayer."""

    reason: str = "no attention"
    kind = "no_cache"

    def __post_init__(self):
        validate.text_field("reason", self.reason)

    def nbytes(self, *, tokens, batch=1, dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT, after_prefill=False):
        _tokens(tokens, batch)
        return 0


LAYER_KINDS = (FullAttention, SlidingAttention, ChunkedAttention, LatentAttention, Mamba2, GatedDeltaNet, ShortConv,
               NoCache)


@frozen
class Hybrid:
    """A layer that runs a state-space mixer beside attention and caches both (Falcon-H1's "hybrid" layers:
    LinearAttentionAndFullAttentionLayer)."""

    parts: tuple
    kind = "hybrid"

    def __post_init__(self):
        if not isinstance(self.parts, tuple) or not self.parts:
            raise ValueError(f"parts must be a non-empty tuple of layer records; got {validate.describe(self.parts)}")
        for part in self.parts:
            if not isinstance(part, LAYER_KINDS):
                raise TypeError(f"parts must hold layer records ({', '.join(k.__name__ for k in LAYER_KINDS)}); "
                                f"got {validate.describe(part)}")

    def nbytes(self, *, tokens, batch=1, dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT, after_prefill=False):
        return sum(part.nbytes(tokens=tokens, batch=batch, dtype=dtype, state_dtype=state_dtype,
                               after_prefill=after_prefill) for part in self.parts)


# transformers 5.24's layer_types names (cache_utils.py DYNAMIC_LAYER_TYPE_MAPPING; configuration_utils.py
# _LEGACY_LAYER_TYPE_REMAP turns "mamba" into "linear_attention" and "attention" into "full_attention").
_ATTENTION_TYPES = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding",
                    "chunked_attention": "chunked"}
_STATE_TYPES = ("linear_attention", "mamba", "conv")
_NO_CACHE_TYPES = ("moe", "mlp", "dummy")
_HYBRID_TYPES = {"hybrid": "full", "hybrid_sliding": "sliding"}


def layers_from_layer_types(layer_types, *, full=None, sliding=None, chunked=None, linear=None,
                            kv_sharing_modes=None) -> list:
    """The layer records for a config's layer_types, picked as transformers 5.24 picks each cache layer
    (cache_utils.get_layer_types_and_kwargs): full (a FullAttention or LatentAttention) for "full_attention",
    sliding for "sliding_attention", chunked for "chunked_attention", linear (a Mamba2, GatedDeltaNet or ShortConv) for
    "linear_attention", both in one layer for "hybrid" (linear + full) and "hybrid_sliding" (linear + sliding), and
    NoCache for "moe", "mlp" and every layer whose kv_sharing_modes entry is "reuse" (Gemma 3n's shared layers).

        layers_from_layer_types(config["layer_types"], full=FullAttention(8, 64),
                                sliding=SlidingAttention(8, 64, window=128))     # gpt-oss-20b
    """
    if isinstance(layer_types, (str, bytes)) or not hasattr(layer_types, "__iter__"):
        raise TypeError(f"layer_types must be a list of layer type names; got {validate.describe(layer_types)}")
    layer_types = list(layer_types)
    if not layer_types:
        raise ValueError("layer_types must name at least one layer")
    if kv_sharing_modes is not None:
        kv_sharing_modes = list(kv_sharing_modes)
        if len(kv_sharing_modes) != len(layer_types):
            raise ValueError(f"kv_sharing_modes must have one entry per layer ({len(layer_types)}); "
                             f"got {len(kv_sharing_modes)}")
    records = {"full": full, "sliding": sliding, "chunked": chunked, "linear": linear}
    for name, record in records.items():
        if record is not None and not isinstance(record, LAYER_KINDS):
            raise TypeError(f"{name} must be a layer record ({', '.join(k.__name__ for k in LAYER_KINDS)}); "
                            f"got {validate.describe(record)}")

    def needed(name, layer_type):
        if records[name] is None:
            raise ValueError(f"layer_types has {layer_type!r}: pass {name}= with its layer record")
        return records[name]

    layers = []
    for index, layer_type in enumerate(layer_types):
        if kv_sharing_modes is not None and kv_sharing_modes[index] == "reuse":
            layers.append(NoCache("reuses an earlier layer's keys and values"))
        elif layer_type in _ATTENTION_TYPES:
            layers.append(needed(_ATTENTION_TYPES[layer_type], layer_type))
        elif layer_type in _STATE_TYPES:
            layers.append(needed("linear", layer_type))
        elif layer_type in _HYBRID_TYPES:
            layers.append(Hybrid((needed("linear", layer_type), needed(_HYBRID_TYPES[layer_type], layer_type))))
        elif layer_type in _NO_CACHE_TYPES:
            layers.append(NoCache("no attention"))
        else:
            known = sorted({*_ATTENTION_TYPES, *_STATE_TYPES, *_HYBRID_TYPES, *_NO_CACHE_TYPES})
            raise ValueError(f"layer_types[{index}] is {validate.describe(layer_type)}, whose cache is not modelled "
                             f"(DeepSeek-V3.2's indexed attention is not, for one); the modelled types are "
                             f"{', '.join(known)}")
    return layers


def cache_parts(layers, *, tokens, batch=1, dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT,
                after_prefill=False) -> dict[str, int]:
    """Bytes of a model's cache by layer kind ("full_attention", "mamba2", ...; a hybrid layer's parts apart), for
    `tokens` tokens of context in each of `batch` sequences. Kinds absent from `layers` are left out."""
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
        raise TypeError(f"layers must be a list of layer records; got {validate.describe(layers)}")
    layers = list(layers)
    if not layers:
        raise ValueError("layers must hold at least one layer record")
    parts: dict[str, int] = {}
    for layer in layers:
        if not isinstance(layer, LAYER_KINDS + (Hybrid,)):
            raise TypeError(f"layers must hold layer records ({', '.join(k.__name__ for k in LAYER_KINDS)}, "
                            f"Hybrid); got {validate.describe(layer)}")
        for part in layer.parts if isinstance(layer, Hybrid) else (layer,):
            nbytes = part.nbytes(tokens=tokens, batch=batch, dtype=dtype, state_dtype=state_dtype,
                                 after_prefill=after_prefill)
            parts[part.kind] = parts.get(part.kind, 0) + nbytes
    return parts


def cache_bytes(layers, *, tokens, batch=1, dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT,
                after_prefill=False) -> int:
    """Bytes of a model's whole cache: the sum over its layers (see cache_parts)."""
    return sum(cache_parts(layers, tokens=tokens, batch=batch, dtype=dtype, state_dtype=state_dtype,
                           after_prefill=after_prefill).values())

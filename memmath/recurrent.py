"""The recurrent mixers a ModelShape may hold (its linear_attention widths) and the state each keeps per sequence.

Mamba-2, gated DeltaNet and LFM2's gated short convolution keep a fixed-size state whatever the context, as
transformers 5.24 keeps it in a DynamicCache's LinearAttentionLayer (memmath/states.py lists every layer kind of a
cache, these three included). Apart from the attention caches because a ModelShape checks its linear_attention
against these classes: a training question needs them, never the caches.

Bytes follow memmath.inference: ceil(values x bits / 8), one format name per dtype ("bf16", "fp32", "fp8").
Every function takes Python ints and returns an exact Python int.
"""

from __future__ import annotations

from . import validate
from .formats import get_format
from .values import frozen

RECURRENT_STATE_FORMAT = "fp32"  # Mamba-2's and gated DeltaNet's recurrent state on transformers' PyTorch paths


def _bytes(values: int, dtype) -> int:
    """ceil(values x bits / 8) for a format name ("bf16", "fp32", "fp8")."""
    return validate.ceil_div(values * get_format(dtype).bits, 8)


def values_bytes(values, dtype):
    """ceil(values x bits / 8) for Python ints and int64 arrays alike: a model record's states in their format (the
    conv state in the model's dtype, the recurrent state in RECURRENT_STATE_FORMAT)."""
    return _bytes(values, dtype)


def _dim(name, value, low=1):
    return validate.count(name, value, low=low, high=validate.MAX_DIM, scalar=True)


def _check_dims(record, names, optional=()):
    """Each named field a whole number from 1 to MAX_DIM (an optional one may be None), stored as a Python int."""
    for name in names + optional:
        value = getattr(record, name)
        if value is None and name in optional:
            continue
        object.__setattr__(record, name, _dim(name, value))


def mamba2_state_bytes(*, heads, head_dim, state_size, n_groups, conv_kernel, batch=1, dtype="bf16",
                       state_dtype=RECURRENT_STATE_FORMAT) -> int:
    """One Mamba-2 mixer's cache (Bamba, GraniteMoeHybrid, Falcon-H1, Nemotron-H, Zamba2), whatever the context.

    conv state: batch x (heads x head_dim + 2 x n_groups x state_size) x conv_kernel values in dtype, the input of
    the causal convolution (x, B and C) over the last conv_kernel tokens (LinearAttentionLayer.update_conv_state
    pads or cuts it to conv_kernel = mamba_d_conv columns, not conv_kernel - 1);
    recurrent (SSM) state: batch x heads x head_dim x state_size values in state_dtype (fp32 from transformers'
    PyTorch mamba2_chunk_scan, which computes in fp32). The mixer's inner width is heads x head_dim
    (mamba_expand x hidden_size, or Falcon-H1's mamba_d_ssm).
    """
    batch = validate.count("batch", batch, high=validate.MAX_BATCH, scalar=True)
    heads, head_dim, state_size = _dim("heads", heads), _dim("head_dim", head_dim), _dim("state_size", state_size)
    conv_channels = heads * head_dim + 2 * _dim("n_groups", n_groups) * state_size
    conv = _bytes(batch * conv_channels * _dim("conv_kernel", conv_kernel), dtype)
    return conv + _bytes(batch * heads * head_dim * state_size, state_dtype)


def gated_deltanet_state_bytes(*, key_heads, value_heads, key_head_dim, value_head_dim, conv_kernel, batch=1,
                               dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT) -> int:
    """One gated DeltaNet layer's cache (Qwen3-Next's and Qwen3.5's linear attention), whatever the context.

    conv state: batch x (2 x key_heads x key_head_dim + value_heads x value_head_dim) x conv_kernel values in dtype
    (queries, keys and values before their causal convolution, modeling_qwen3_next.py's conv_dim);
    recurrent state: batch x value_heads x key_head_dim x value_head_dim values in state_dtype (fp32: the PyTorch
    torch_chunk_gated_delta_rule computes it in fp32).
    """
    batch = validate.count("batch", batch, high=validate.MAX_BATCH, scalar=True)
    key_heads, value_heads = _dim("key_heads", key_heads), _dim("value_heads", value_heads)
    key_head_dim, value_head_dim = _dim("key_head_dim", key_head_dim), _dim("value_head_dim", value_head_dim)
    conv_channels = 2 * key_heads * key_head_dim + value_heads * value_head_dim
    conv = _bytes(batch * conv_channels * _dim("conv_kernel", conv_kernel), dtype)
    return conv + _bytes(batch * value_heads * key_head_dim * value_head_dim, state_dtype)


def short_conv_state_bytes(*, channels, conv_kernel, batch=1, dtype="bf16") -> int:
    """One gated short-convolution layer's cache (LFM2's and LFM2-MoE's "conv" layers), whatever the context.

    Lfm2ShortConv.forward hands cache.update_conv_state the convolution's input B * x, batch x hidden_size x tokens
    in the model's dtype, with conv_kernel_size = conv_L_cache; LinearAttentionLayer.lazy_initialization allocates
    zeros of batch x hidden_size x conv_kernel (the last dimension replaced by the kernel width) and every update
    copies the last conv_kernel columns into it: batch x channels x conv_kernel values, no recurrent state.
    LFM2-1.2B (2,048 channels, conv_L_cache 3) in bf16: 2,048 x 3 x 2 B = 12,288 B a sequence and layer.
    """
    batch = validate.count("batch", batch, high=validate.MAX_BATCH, scalar=True)
    return _bytes(batch * _dim("channels", channels) * _dim("conv_kernel", conv_kernel), dtype)


@frozen
class Mamba2:
    """A Mamba-2 mixer (config.mamba_n_heads, mamba_d_head, mamba_d_state, mamba_n_groups, mamba_d_conv)."""

    heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    kind = "mamba2"

    def __post_init__(self):
        _check_dims(self, ("heads", "head_dim", "state_size", "n_groups", "conv_kernel"))

    def nbytes(self, *, tokens, batch=1, dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT, after_prefill=False):
        validate.count("tokens", tokens, high=validate.MAX_SEQ, scalar=True)
        return mamba2_state_bytes(heads=self.heads, head_dim=self.head_dim, state_size=self.state_size,
                                  n_groups=self.n_groups, conv_kernel=self.conv_kernel, batch=batch, dtype=dtype,
                                  state_dtype=state_dtype)


@frozen
class GatedDeltaNet:
    """A gated DeltaNet layer (config.linear_num_key_heads, linear_num_value_heads, linear_key_head_dim,
    linear_value_head_dim, linear_conv_kernel_dim)."""

    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    kind = "gated_deltanet"

    def __post_init__(self):
        _check_dims(self, ("key_heads", "value_heads", "key_head_dim", "value_head_dim", "conv_kernel"))

    def nbytes(self, *, tokens, batch=1, dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT, after_prefill=False):
        validate.count("tokens", tokens, high=validate.MAX_SEQ, scalar=True)
        return gated_deltanet_state_bytes(
            key_heads=self.key_heads, value_heads=self.value_heads, key_head_dim=self.key_head_dim,
            value_head_dim=self.value_head_dim, conv_kernel=self.conv_kernel, batch=batch, dtype=dtype,
            state_dtype=state_dtype)


@frozen
class ShortConv:
    """A gated short-convolution layer (LFM2's "conv" layers: config.hidden_size channels, conv_L_cache columns)."""

    channels: int
    conv_kernel: int
    kind = "short_conv"

    def __post_init__(self):
        _check_dims(self, ("channels", "conv_kernel"))

    def nbytes(self, *, tokens, batch=1, dtype="bf16", state_dtype=RECURRENT_STATE_FORMAT, after_prefill=False):
        validate.count("tokens", tokens, high=validate.MAX_SEQ, scalar=True)
        return short_conv_state_bytes(channels=self.channels, conv_kernel=self.conv_kernel, batch=batch, dtype=dtype)

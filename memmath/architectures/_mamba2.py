"""The Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", the state space duality layer) as transformers 5.24
stores it in its hybrid models (modeling_granitemoehybrid.py GraniteMoeHybridMambaLayer, modeling_nemotron_h.py
NemotronHMamba2Mixer, modeling_falcon_h1.py FalconH1Mixer): its parameter tensors and its fixed-size cache.

A Mamba-2 mixer of `heads` heads of `head_dim` channels (its inner width heads x head_dim) and `n_groups` groups of B
and C of `state_size` values each holds:
- in_proj (h -> 2 inner + 2 n_groups state_size + heads): the gate z, the convolution's input (x, B and C) and the
  time step dt of each head, with a bias where the config asks (mamba_proj_bias, use_bias);
- conv1d, a depthwise causal convolution over conv_dim = inner + 2 n_groups state_size channels (conv_dim x 1 x
  conv_kernel, and conv_dim biases where the config asks: mamba_conv_bias, use_conv_bias);
- dt_bias, A_log and D, one value a head;
- a gated RMSNorm over the inner width (norm.weight; normalized in n_groups groups, which changes no tensor), which
  Falcon-H1 holds only where mamba_rms_norm says;
- out_proj (inner -> h, its bias as in_proj's; Falcon-H1's where projectors_bias says).

Its cache (transformers' LinearAttentionLayer in a DynamicCache) is a conv state of conv_dim x conv_kernel values in
the model's dtype and an fp32 SSM state of heads x head_dim x state_size values, the same size at any context
(memmath/states.py, mamba2_state_bytes).

Saved activations: the records that use it are textbook-only (traced=False), since the mixer runs the mamba_ssm and
causal_conv1d kernels on CUDA and transformers' PyTorch fallback (torch_forward) elsewhere. The textbook estimate
leaves the mixer's own tensors out: two held-out CPU steps of tiny Granite 4.0, Nemotron-H and Falcon-H1 models
(batch 2 x 64 tokens, AdamW, fp32 full and bf16 LoRA) saved 1.5 to 3.2 times its bytes with a 64-token chunk size,
and 12 to 14 times with Granite's 256 (the fallback pads each sequence to whole chunks).
"""

from __future__ import annotations


from ..recurrent import RECURRENT_STATE_FORMAT, Mamba2, values_bytes
from ._parts import ParamTensor, linear
from .record import Architecture
from ..values import frozen

LINEAR = "linear_attention"  # ModelShape.block_kind of a Mamba-2 block: transformers' layer_types name for it


@frozen
class Mamba2Mixer(Mamba2):
    """A Mamba-2 mixer's widths (memmath.states.Mamba2, whose cache it has) and its biases: conv_bias on the
    convolution, proj_bias on in_proj, out_bias on out_proj (Falcon-H1's projectors_bias; proj_bias elsewhere), and
    gated_norm: whether it holds the gated RMSNorm (Falcon-H1's mamba_rms_norm; always elsewhere)."""

    conv_bias: bool = True
    proj_bias: bool = False
    out_bias: bool | None = None  # None: proj_bias
    gated_norm: bool = True

    def __post_init__(self):
        super().__post_init__()
        if self.out_bias is None:
            object.__setattr__(self, "out_bias", self.proj_bias)
        for name in ("conv_bias", "proj_bias", "out_bias", "gated_norm"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Mamba-2 {name} must be true or false; got {getattr(self, name)!r:.50}")

    @property
    def inner(self) -> int:
        """The mixer's inner width: heads x head_dim."""
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """The convolution's channels: x, B and C (inner + 2 n_groups state_size)."""
        return self.inner + 2 * self.n_groups * self.state_size


def tensors(prefix: str, hidden_size: int, dims: Mamba2Mixer) -> list:
    """The mixer's parameters in parameters() order: its own (dt_bias, A_log, D) before its submodules (conv1d,
    in_proj, norm, out_proj), as GraniteMoeHybridMambaLayer and NemotronHMamba2Mixer register them."""
    h, heads, inner = hidden_size, dims.heads, dims.inner
    conv = [ParamTensor(f"{prefix}.conv1d.weight", "attention", (dims.conv_dim, 1, dims.conv_kernel))]
    if dims.conv_bias:
        conv.append(ParamTensor(f"{prefix}.conv1d.bias", "attention", (dims.conv_dim,)))
    return ([ParamTensor(f"{prefix}.{name}", "attention", (heads,)) for name in ("dt_bias", "A_log", "D")] + conv
            + linear(f"{prefix}.in_proj", "attention", h, inner + dims.conv_dim + heads, dims.proj_bias)
            + ([ParamTensor(f"{prefix}.norm.weight", "norms", (inner,))] if dims.gated_norm else [])
            + linear(f"{prefix}.out_proj", "attention", inner, h, dims.out_bias))


def mixer_state_bytes(dims: Mamba2Mixer, batch_size, dtype):
    """One mixer's cache: its conv state, batch x conv_dim x conv_kernel values in dtype (the model's: the cache
    allocates it like the convolution's input, and LinearAttentionLayer pads or cuts it to conv_kernel columns), and
    its SSM state, batch x heads x head_dim x state_size values in fp32 (transformers' PyTorch torch_forward computes
    and returns it in fp32)."""
    conv = batch_size * dims.conv_dim * dims.conv_kernel
    return values_bytes(conv, dtype) + values_bytes(batch_size * dims.heads * dims.head_dim * dims.state_size,
                                                    RECURRENT_STATE_FORMAT)


def kv_cache_values(shape, *, context_len, batch_size, after_prefill):
    """Keys and values of every attention block (block_kind "": every token), in the cache's format; nothing for a
    block of another kind (a Mamba-2 block's states are state_bytes'; Nemotron-H's MLP and MoE blocks hold none)."""
    blocks = sum(len(b) for layout, b in shape.layouts() if not layout.block_kind)
    return blocks * 2 * shape.n_kv_heads * shape.head_dim * context_len * batch_size


def state_bytes(shape, *, batch_size, dtype):
    """Each Mamba-2 block's conv state in dtype (the model's) and SSM state in fp32 (mixer_state_bytes)."""
    blocks = sum(len(b) for layout, b in shape.layouts() if layout.block_kind == LINEAR)
    return blocks * mixer_state_bytes(shape.linear_attention, batch_size, dtype)


def all_linear_refusal(owner: str) -> str:
    """Why LoRA 'all' cannot be counted in a Mamba-2 block: peft's all-linear adapts in_proj and out_proj, which
    memmath's target names do not cover."""
    return (f"peft's all-linear also adapts each Mamba-2 block's in_proj and out_proj ({owner}), which memmath's "
            "target names do not cover yet; name the targets instead")


@frozen
class BlockOrderArchitecture(Architecture):
    """A record whose blocks register their modules in another order than LlamaDecoderLayer (Granite 4.0's MLP
    before its mixer, Nemotron-H's one mixer a block): lora_order lists a block's adapted modules in parameters()
    order."""

    def adapter_order(self, shape) -> tuple:
        return self.lora_order

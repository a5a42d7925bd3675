"""The pieces every record's tensor list is made of: a parameter tensor, a LoRA adapter entry, a linear layer's and
a norm's tensors. Below the records and memmath/models.py (which re-exports ParamTensor, LoraAdapter and
factored_size)."""

from __future__ import annotations

from collections import namedtuple

from ..values import frozen


def factored_size(dims) -> int:
    """Adafactor's second-moment elements for a tensor of shape `dims` (torch.optim.Adafactor: row_var [..., r, 1]
    and col_var [..., 1, c] for two or more dimensions, the leading ones kept; a full-size variance for a vector)."""
    if len(dims) < 2:
        return dims[0] if dims else 1
    leading = 1
    for dim in dims[:-2]:
        leading = leading * dim
    return leading * (dims[-2] + dims[-1])


@frozen
class ParamTensor:
    """One parameter tensor: its path key, the component it belongs to, its shape.

    linear: a weight matrix of a linear layer (what bitsandbytes quantizes to 4 bit in QLoRA); trainable: False for a
    Parameter built with requires_grad=False, which parameters() counts but no optimizer updates.
    """

    name: str
    component: str
    shape: tuple
    linear: bool = False
    trainable: bool = True

    @property
    def numel(self):
        """Number of elements: the product of the shape."""
        result = 1
        for dim in self.shape:
            result = result * dim
        return result

    @property
    def factored_size(self):
        """Adafactor's second-moment size: rows + cols for a matrix, numel for a vector (Shazeer & Stern 2018).

        torch.optim.Adafactor factors every tensor of two or more dimensions over its last two, keeping the
        leading ones (torch/optim/_adafactor.py: row_var of shape [..., r, 1], col_var of shape [..., 1, c]):
        a 3-D experts tensor E x r x c keeps E x (r + c).
        """
        return factored_size(self.shape)


# typing.NamedTuple builds its class with this same collections.namedtuple; importing typing costs every start.
LoraAdapter = namedtuple("LoraAdapter", ("module", "d_in", "d_out", "rank_factor"), defaults=(1,))
LoraAdapter.__doc__ = """
One tensor a block adapts with LoRA: peft adds A, (rank_factor * r) x d_in, and B, d_out x (rank_factor * r).

rank_factor is 1 for a linear layer and for the router's 2-D weight. A routed experts' 3-D tensor (peft 0.21's
ParamWrapper, peft/tuners/lora/layer.py) gets A = nn.Linear(d_in, r * num_experts) and B = nn.Linear(r *
num_experts, d_out), one rank-r pair per expert: rank_factor = num_experts, and 2 * num_experts for
gate_up_proj, whose rank peft doubles because the gate and up matrices are fused there (the rank_pattern of
utils/transformers_weight_conversion.py: r * 2 for the fused w1 + w3 or gate_proj + up_proj).
"""


def linear(name, component, d_in, d_out, bias):
    """A linear layer's weight (d_out x d_in, as nn.Linear stores it) and optional bias."""
    tensors = [ParamTensor(f"{name}.weight", component, (d_out, d_in), linear=True)]
    if bias:
        tensors.append(ParamTensor(f"{name}.bias", component, (d_out,)))
    return tensors


def norm(name, h, bias):
    """A norm's weight (and LayerNorm's bias)."""
    tensors = [ParamTensor(f"{name}.weight", "norms", (h,))]
    if bias:
        tensors.append(ParamTensor(f"{name}.bias", "norms", (h,)))
    return tensors

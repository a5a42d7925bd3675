"""A reference Houlsby adapter for the measurements (Houlsby et al. 2019, "Parameter-Efficient
Transfer Learning for NLP", section 2.1 and figure 2): a bottleneck down-projection (h -> m), a
nonlinearity, an up-projection (m -> h) and a skip connection, inserted twice in every block:
after the attention's output projection and after the MLP's, before the residual sum and layer
norm. Only the adapters train. torch is imported here only; memmath counts the same tensors in
memmath.methods.Adapters (2 x (2*m*h + m + h) per block).
"""

from __future__ import annotations

from collections import OrderedDict


def adapter(hidden_size: int, bottleneck: int, dtype):
    """One adapter: x + up(gelu(down(x))), up initialised to zero so the block starts unchanged."""
    import torch
    from torch import nn

    class HoulsbyAdapter(nn.Module):
        def __init__(self):
            super().__init__()
            self.down = nn.Linear(hidden_size, bottleneck, dtype=dtype)
            self.up = nn.Linear(bottleneck, hidden_size, dtype=dtype)
            nn.init.zeros_(self.up.weight)
            nn.init.zeros_(self.up.bias)

        def forward(self, x):
            return x + self.up(torch.nn.functional.gelu(self.down(x)))

    return HoulsbyAdapter()


# Where the two adapters go: the module whose output is the attention's / the MLP's projection. Every
# decoder of transformers' LLaMA layout (mistral, qwen2/3, gemma, phi3, olmo2, ...) names them as LLaMA does.
PLACES = {
    "bert": ("attention.output.dense", "output.dense"),
    "llama": ("self_attn.o_proj", "mlp.down_proj"),
}
DECODER_PLACES = PLACES["llama"]


def insert(model, blocks, family: str, hidden_size: int, bottleneck: int, dtype):
    """Freeze `model` and wrap each block's two projections as Sequential(base, houlsby) (`family`: a key of PLACES,
    or a decoder's model_type, placed as LLaMA's)."""
    from torch import nn

    for p in model.parameters():
        p.requires_grad_(False)
    for block in blocks:
        for path in PLACES.get(family, DECODER_PLACES):
            parent_path, _, name = path.rpartition(".")
            parent = block.get_submodule(parent_path)
            base = getattr(parent, name)
            setattr(parent, name, nn.Sequential(OrderedDict(base=base,
                                                            houlsby=adapter(hidden_size, bottleneck, dtype))))
    return model

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


# Where the two adapters go: the module whose output is the attention's / the MLP's projection.
PLACES = {
    "bert": ("attention.output.dense", "output.dense"),
    "llama": ("self_attn.o_proj", "mlp.down_proj"),
}


def insert(model, blocks, family: str, hidden_size: int, bottleneck: int, dtype):
    """Freeze `model` and wrap each block's two projections as Sequential(base, houlsby)."""
    from torch import nn

    for p in model.parameters():
        p.requires_grad_(False)
    for block in blocks:
        for path in PLACES[family]:
            parent_path, _, name = path.rpartition(".")
            parent = block.get_submodule(parent_path)
            base = getattr(parent, name)
            setattr(parent, name, nn.Sequential(OrderedDict(base=base,
                                                            houlsby=adapter(hidden_size, bottleneck, dtype))))
    return model


# ---- held-out cases: measured after memmath's activation and peak model of these adapters was written ----
def held_out_grid():
    """Houlsby adapters at other widths, sizes, attention kinds, dropout and checkpointing (held out)."""
    from .measure import Case

    class HeldOutAdapterCase(Case):
        @property
        def held_out(self) -> bool:
            return True  # recorded after hf_activations traced Adapters(...) (issue 11)

    cases = []
    for i, shape in enumerate(("bert", "llama-mha", "llama-gqa", "bert-wide", "llama-wide")):
        for j, (bottleneck, attention, dropout, ckpt, b, s) in enumerate((
                (16, "eager", True, False, 1, 48), (64, "sdpa", False, True, 3, 32), (4, "sdpa", False, False, 4, 16))):
            cases.append(HeldOutAdapterCase(shape, precision=("fp32", "bf16")[(i + j) % 2],
                                            optimizer=("adamw", "sgd_momentum")[j % 2], method="houlsby",
                                            bottleneck=bottleneck, attention=attention, dropout=dropout,
                                            checkpointing=ckpt, batch_size=b, seq_len=s, group="Houlsby adapters"))
    return cases


def main():
    """python -m validation.houlsby: measure the held-out adapter cases, append them to adapter_cases."""
    import json
    import logging
    import warnings

    from . import measure
    from .quantized import append

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    have = {r["config"]["case_id"] for r in json.loads(measure.DEFAULT_OUT.read_text()).get("adapter_cases", [])}
    records = measure.run([c for c in held_out_grid() if c.case_id not in have])
    print(f"appended {append(records, 'adapter_cases')} cases")


if __name__ == "__main__":
    main()

"""The exact activation model under PyTorch AMP: fp32 weights, the forward pass in torch.autocast(bfloat16).

hf_activations replays a transformers forward pass storage by storage; under AMP it runs the same tracer with
autocast's dtype rule (memmath/trace.py: Trace(autocast=AUTOCAST_BYTES), its docstring lists the rule, measured on
the CPU by validation/amp.py). This module says where that trace applies: modelled for SDPA without dropout (the
fused kernel) and eager attention, Full/Freeze/LoRA, on the model types measured under autocast; SDPA with dropout
(the CPU's math kernel), Houlsby adapters and quantized bases under AMP are refused by name.
"""

from __future__ import annotations

from .architectures import ARCHITECTURES, known
from .methods import Adapters, QLoRA
from .trace import MATH_REFUSAL

AUTOCAST_BYTES = 2  # bf16, the dtype torch.autocast("cpu") and transformers' Trainer(bf16=True) use


def amp_refusal(method, kind=None, shape=None) -> str | None:
    """Why the AMP trace does not model this run (None when it does)."""
    # The model types the AMP cases measured (validation/amp.py): each record's amp_measured.
    if shape is not None and not (known(shape) and shape.architecture.amp_measured):
        measured = ", ".join(sorted(t for t, record in ARCHITECTURES.items() if record.amp_measured))
        return f"models AMP for the model types measured under autocast ({measured}); got {shape.arch!r}"
    if isinstance(method, (Adapters, QLoRA)):
        return f"models AMP for Full(), Freeze(...) and LoRA(...); got {type(method).__name__}"
    if kind == "math":
        return MATH_REFUSAL
    return None

"""What a method may train on a stored (pre-quantized) checkpoint, and which methods peft's
prepare_model_for_kbit_training applies to: Run's checks over memmath/checkpoints.py's formats and the methods."""

from __future__ import annotations

from . import validate
from .methods import Full, QLoRA
from .preference import DPO


# ---- training on a stored format --------------------------------------------------------------------------
def check_trainable(shape, method) -> None:
    """Refuse by name a run that trains on a quantized checkpoint memmath cannot price, with the bf16 alternative.

    transformers 5.24 trains no purely quantized model (Trainer refuses it), MXFP4 and fbgemm FP8 not even with
    adapters (Mxfp4HfQuantizer/FbgemmFp8HfQuantizer.is_trainable is False), and memmath models adapters on a
    bitsandbytes 4/8-bit base as QLoRA(...) only.
    """
    fmt = getattr(shape, "stored_format", None)
    if fmt is None:
        return
    base = method.base if isinstance(method, DPO) else method
    bf16 = shape.n_params * 2
    alternative = (f"load it dequantized in bf16 ({bf16 / 1e9:,.2f} GB of weights: from_hf_config on the "
                   "config without its quantization_config)")
    if not fmt.trainable:
        hint = "Mxfp4Config(dequantize=True)" if fmt.name == "mxfp4" else "a dequantized copy"
        raise validate.FieldError("method", f"the checkpoint stores its weights as {fmt.name} ({fmt.label}), which "
                                  f"transformers cannot train, not even with adapters (its quantizer is not "
                                  f"trainable); {alternative}, e.g. with {hint}")
    if isinstance(base, Full):
        raise validate.FieldError("method", f"the checkpoint stores its weights as {fmt.name}, and transformers "
                                  f"cannot fully finetune a quantized model; train adapters (QLoRA(...) on a "
                                  f"bitsandbytes base) or {alternative}")
    if fmt.quant_method == "bitsandbytes" and isinstance(base, QLoRA):
        want = "int8" if fmt.scheme == "row" else fmt.name.removeprefix("bnb_")
        if base.quant_type != want or (want != "int8" and base.double_quant != fmt.double_quant):
            raise validate.FieldError("method", f"the checkpoint stores {fmt.label}: pass QLoRA(quant_type="
                                      f"{want!r}" + ("" if want == "int8" else f", double_quant={fmt.double_quant}")
                                      + ") to match it")
        return
    raise validate.FieldError("method", f"adapters on a {fmt.name} base ({fmt.label}) are not modelled yet "
                              f"(memmath models QLoRA on a bitsandbytes base); {alternative}")


def check_kbit_prep(kbit_prep: bool, method) -> bool:
    """kbit_prep as given, refused by name unless the method trains adapters on a quantized base (QLoRA)."""
    base = method.base if isinstance(method, DPO) else method
    if kbit_prep and not isinstance(base, QLoRA):
        raise validate.FieldError("kbit_prep", "kbit_prep=True is peft's prepare_model_for_kbit_training, which "
                                  "prepares a quantized base: it applies to QLoRA(...) (or DPO(base=QLoRA(...))); got "
                                  f"{type(base).__name__}")
    return kbit_prep

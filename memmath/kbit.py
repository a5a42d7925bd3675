"""What a checkpoint stored in a quantized format lets a run train, and what peft's
prepare_model_for_kbit_training adds to a QLoRA base (the formats themselves: memmath/checkpoints.py).

transformers cannot train an MXFP4 or fbgemm-FP8 base (its quantizers report is_trainable False), peft adapts a
bitsandbytes base as QLoRA, and nothing fully finetunes a quantized checkpoint; each refusal names the field and
prices the dequantized alternative.
"""

from __future__ import annotations

from . import validate
from .checkpoints import GROUPS
from .methods import Freeze, Full, QLoRA, kept_fp32_extra_bytes
from .notes import Note
from .preference import DPO


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
    bf16 = shape.n_params * 2 + kept_fp32_extra_bytes(shape, "bf16")  # the router and such kept in fp32 by the load
    alternative = (f"load it dequantized in bf16 ({bf16 / 1e9:,.2f} GB of weights: from_hf_config on the "
                   "config without its quantization_config)")
    if not fmt.trainable:
        hint = "Mxfp4Config(dequantize=True)" if fmt.name == "mxfp4" else "a dequantized copy"
        raise validate.FieldError("method", f"the checkpoint stores its weights as {fmt.name} ({fmt.label}), which "
                                  f"transformers cannot train, not even with adapters (its quantizer is not "
                                  f"trainable); {alternative}, e.g. with {hint}")
    if isinstance(base, (Full, Freeze)):  # both train the model's own weights
        what = "fully finetune" if isinstance(base, Full) else "train the weights of the last blocks of"
        raise validate.FieldError("method", f"the checkpoint stores its weights as {fmt.name}, and transformers "
                                  f"cannot {what} a quantized model; train adapters (QLoRA(...) on a "
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


def kbit_prep_bytes(shape, recipe) -> int:
    """Bytes prepare_model_for_kbit_training adds to a QLoRA base's weights.

    peft 0.21 (utils/other.py) casts every parameter whose dtype is float16 or bfloat16 and whose class is not
    Params4bit to float32: on a bitsandbytes base every tensor QLoRA leaves unquantized (embeddings, norms, biases,
    the output head, a router, 3-D expert tensors, a vision tower), each from recipe.weight_bits to 32 bits. A base
    already in fp32 gains nothing.
    """
    if recipe.weight_bits >= 32 or not shape.tensor_count_known:
        return 0
    kept = sum((repeat * t.numel for _, t, repeat in shape.tensor_copies(GROUPS) if not t.linear), 0)
    return validate.ceil_div(kept * (32 - recipe.weight_bits), 8)


def kbit_prep_note(shape, recipe, applied: bool) -> Note:
    """Which QLoRA base is assumed: prepared by prepare_model_for_kbit_training (fp32 casts) or as loaded."""
    extra = kbit_prep_bytes(shape, recipe)
    if applied:
        return Note("kbit_prep", f"weights: peft's prepare_model_for_kbit_training cast the base's unquantized "
                    f"parameters (embeddings, norms, head, biases) to fp32, {extra:,} B more than as loaded. "
                    "Activations are counted as the base's own dtypes make them: after these casts the fp32 "
                    "embeddings and norms carry the residual stream in fp32, which is not counted yet")
    return Note("kbit_prep_not_applied", f"weights: the quantized base as loaded, its unquantized parameters "
                f"(embeddings, norms, head, biases) in {recipe.weight_bits}-bit; peft's "
                f"prepare_model_for_kbit_training would cast them to fp32, {extra:,} B more (kbit_prep=True, "
                "--kbit-prep)")

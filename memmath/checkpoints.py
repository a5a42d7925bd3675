"""Weights as pre-quantized checkpoints store them: MXFP4, FP8 with block or channel scales, bitsandbytes, GPTQ, AWQ.

A config.json's `quantization_config` names how the checkpoint's tensors are stored; `stored_format` reads it
into a StoredFormat and `stored_weight_bytes` prices a model's tensors as stored: the quantized values, their
scales (and zeros), and every tensor the quantizer leaves alone in 16 bits. Each layout is the one transformers
5.24 loads (its integrations/*.py) and the packers write:

- mxfp4 (gpt-oss; OCP Microscaling spec v1.0): e2m1 values, two per byte, and one e8m0 scale (1 B) per 32
  values: 4 + 8/32 = 4.25 bits a weight. transformers' integrations/mxfp4.py converts only a mixture of
  experts' expert tensors (Mxfp4GptOssExperts: `*_blocks` uint8 (E, out, in/32, 16), `*_scales` uint8
  (E, out, in/32)); attention, router, embeddings and head stay bf16 (gpt-oss's `modules_to_not_convert`).
- fp8 (DeepSeek-V3's `weight_block_size` [128, 128]; integrations/finegrained_fp8.py FP8Linear): e4m3 values
  (1 B) and one fp32 `weight_scale_inv` per 128 x 128 block, ceil(out/128) x ceil(in/128) of them; every
  nn.Linear and expert tensor converted, the embeddings and the output head (get_keys_to_not_convert) not.
  Without a block size one fp32 scale per tensor.
- fbgemm_fp8 (integrations/fbgemm_fp8.py FbgemmFp8Linear): e4m3 values and one fp32 `weight_scale` per output
  channel (out x 1).
- bitsandbytes 4-bit (Linear4bit, QLoRA): nf4/fp4 values and one absmax per 64 (double-quantized: 8-bit absmax
  plus one fp32 per 256 of them); 8-bit (Linear8bitLt, LLM.int8): int8 values and one fp32 scale per row.
- gptq (auto-gptq/gptqmodel QuantLinear): `qweight` int32 (in x bits / 32, out), `qzeros` int32
  (ceil(in/g), out x bits / 32), `scales` fp16 (ceil(in/g), out) and `g_idx` int32 (in).
- awq (AutoAWQ WQLinear_GEMM): `qweight` int32 (in, out x bits / 32), `qzeros` int32 (ceil(in/g),
  out x bits / 32), `scales` fp16 (ceil(in/g), out).

GPTQ, AWQ and bitsandbytes replace nn.Linear layers only, so a mixture of experts' 3-D expert tensors stay in
16 bits under them (as the head, embeddings and norms do under every format).
"""

from __future__ import annotations

import fnmatch
from dataclasses import replace

from . import validate
from .formats import get_format
from .formats import quant_constant_bytes
from .values import frozen

SCHEMES = ("mx", "block", "channel", "tensor", "absmax", "row", "gptq", "awq")
OTHER_BITS = 16  # what the quantizers leave alone is stored in the checkpoint's 16-bit dtype (bf16 or fp16)
# that load keeps a record's fp32_modules in fp32 (modeling_utils.py _get_dtype_plan: in bf16 as in fp16)
OTHER_DTYPE = "bf16"
MX_BLOCK = 32  # OCP Microscaling v1.0: one shared e8m0 scale per 32 elements
GROUPS = ("embeddings", "layer", "final_norm", "head", "vision")


@frozen
class StoredFormat:
    """How a checkpoint stores its weights (see the module docstring for each scheme's tensors).

    bits: bits per quantized value; block: the scheme's grouping (mx: (32,), block: (rows, cols), absmax:
    (64,), gptq/awq: (group_size,) with -1 for one group per row); trainable: whether transformers 5.24's
    quantizer lets adapters train on it (HfQuantizer.is_trainable); not_converted: the module names the
    checkpoint's `modules_to_not_convert` keeps in 16 bits, besides what the scheme never converts.
    """

    name: str
    quant_method: str
    scheme: str
    bits: int
    block: tuple = ()
    double_quant: bool = False
    trainable: bool = True
    not_converted: tuple = ()
    label: str = ""

    def __post_init__(self):
        validate.choice("scheme", self.scheme, SCHEMES)
        validate.count("bits", self.bits, high=8, scalar=True)

    def converts(self, tensor) -> bool:
        """Whether this format stores the tensor quantized (else it stays in 16 bits)."""
        expert = "experts" in tensor.name and len(tensor.shape) == 3  # a mixture of experts' stacked weights
        if self.scheme == "mx":
            converted = expert
        elif self.scheme in ("block", "channel", "tensor"):
            converted = tensor.linear or expert
        else:  # bitsandbytes, GPTQ and AWQ replace nn.Linear layers only
            converted = tensor.linear
        return converted and not any(_matches(pattern, tensor.name) for pattern in self.not_converted)

    def tensor_bytes(self, tensor) -> tuple:
        """(value bytes, scale-and-zero bytes) of one tensor as stored."""
        n = tensor.numel
        if not self.converts(tensor):
            return validate.ceil_div(n * OTHER_BITS, 8), 0
        *lead, out, inp = tensor.shape
        copies = 1
        for dim in lead:  # an expert tensor: one matrix per expert
            copies = copies * dim
        values = validate.ceil_div(n * self.bits, 8)
        if self.scheme == "mx":  # one e8m0 byte per 32 values of each row
            return values, copies * out * validate.ceil_div(inp, MX_BLOCK)
        if self.scheme == "block":  # one fp32 per block_rows x block_cols block
            rows, cols = self.block
            return values, 4 * copies * validate.ceil_div(out, rows) * validate.ceil_div(inp, cols)
        if self.scheme == "channel":
            return values, 4 * copies * out
        if self.scheme == "tensor":
            return values, 4 * copies
        if self.scheme == "absmax":
            return values, quant_constant_bytes(n, block=self.block[0], double_quant=self.double_quant)
        if self.scheme == "row":  # LLM.int8: one fp32 scale per output row
            return values, 4 * copies * out
        group = inp if self.block[0] == -1 else self.block[0]
        groups = validate.ceil_div(inp, group)
        packed_out = 4 * validate.ceil_div(out * self.bits, 32)  # int32 words across the output columns
        if self.scheme == "gptq":  # qweight packs along the input rows: ceil(in x bits / 32) int32 rows
            qweight = 4 * validate.ceil_div(inp * self.bits, 32) * out
            return qweight, groups * packed_out + 2 * groups * out + 4 * inp  # qzeros, fp16 scales, g_idx
        qweight = inp * packed_out  # awq packs along the output columns
        return qweight, groups * packed_out + 2 * groups * out  # qzeros, fp16 scales

    @property
    def bits_per_weight(self) -> float:
        """Bits a converted weight costs with its scales when it fills whole blocks (mxfp4: 4.25)."""
        per_value = {"mx": 8 / MX_BLOCK, "tensor": 0.0, "channel": 0.0, "row": 0.0}
        if self.scheme == "block":
            return self.bits + 32 / (self.block[0] * self.block[1])
        if self.scheme == "absmax":
            extra = 8 / self.block[0] + 32 / (self.block[0] * 256) if self.double_quant else 32 / self.block[0]
            return self.bits + extra
        if self.scheme in ("gptq", "awq") and self.block[0] != -1:  # an fp16 scale and a packed zero per group
            return self.bits + (16 + self.bits) / self.block[0]
        return self.bits + per_value.get(self.scheme, 0.0)


def _matches(pattern: str, name: str) -> bool:
    """A modules_to_not_convert entry (e.g. 'model.layers.*.self_attn', 'lm_head') against a tensor's name
    inside its block or at the top ('self_attn.q_proj.weight', 'lm_head.weight', 'embed_tokens')."""
    key = pattern.removeprefix("model.")
    for prefix in ("layers.*.", "language_model."):
        key = key.removeprefix(prefix)
    if key.startswith("layers.") and key.split(".")[1].isdigit():
        key = key.split(".", 2)[2] if key.count(".") >= 2 else ""
    if not key:
        return False
    return name == key or name.startswith(key + ".") or fnmatch.fnmatch(name, key) or fnmatch.fnmatch(name, key + ".*")


def stored_weight_bytes(shape, fmt: StoredFormat) -> tuple:
    """(weight bytes, scale bytes) of the model's tensors as `fmt` stores them, tensor by tensor."""
    if not shape.tensor_count_known:
        raise ValueError(f"{fmt.name} weights need the model's tensors: use a preset, from_hf_config or a "
                         "ModelShape (a uniform model has none)")
    weights, constants = 0, 0
    for _, tensor, repeat in shape.tensor_copies(GROUPS):
        values, scales = fmt.tensor_bytes(tensor)
        if not fmt.converts(tensor) and shape.kept_in_fp32(tensor, OTHER_DTYPE):
            values = 4 * tensor.numel
        weights, constants = weights + repeat * values, constants + repeat * scales
    return weights, constants


def stored_layout(shape, fmt: StoredFormat) -> str:
    """In words, what `fmt` stores quantized and what it keeps in 16 bits for this model."""
    converted, kept, wide = set(), set(), set()
    for _, tensor, _ in shape.tensor_copies(GROUPS):
        if fmt.converts(tensor):
            converted.add(_kind(tensor))
        else:
            (wide if shape.kept_in_fp32(tensor, OTHER_DTYPE) else kept).add(_kind(tensor))
    text = f"{fmt.label} ({fmt.bits_per_weight:g} bits a weight with its scales)"
    if converted:
        text += f"; quantized: {', '.join(sorted(converted))}"
    text += f"; kept in 16 bits: {', '.join(sorted(kept))}" if kept else ""
    return text + (f"; kept in fp32 by the load: {', '.join(sorted(wide))}" if wide else "")


def _kind(tensor) -> str:
    if "experts" in tensor.name and len(tensor.shape) == 3:
        return "routed experts"
    if tensor.name == "mlp.gate.weight" or ".router" in tensor.name:
        return "router"
    if tensor.name.endswith("bias") or tensor.component == "norms":
        return "norms and biases"
    return {"head": "output head", "embeddings": "embeddings", "vision_tower": "vision tower",
            "projector": "projector"}.get(tensor.component, f"{tensor.component} linears")


# ---- the formats as their quantization_config names them ---------------------------------------------------
MXFP4 = StoredFormat("mxfp4", "mxfp4", "mx", 4, (MX_BLOCK,), trainable=False,
                     label="MXFP4: e2m1 values with an e8m0 scale per 32")
# DeepSeek-V3's config.json: "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
# "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
FP8_BLOCK = StoredFormat("fp8_block", "fp8", "block", 8, (128, 128),
                         label="FP8 e4m3 with an fp32 scale per 128 x 128 block")
FP8_CHANNEL = StoredFormat("fp8_channel", "fbgemm_fp8", "channel", 8, trainable=False,
                           label="FP8 e4m3 with an fp32 scale per output channel")
NF4 = StoredFormat("bnb_nf4", "bitsandbytes", "absmax", 4, (64,), double_quant=True,
                   label="bitsandbytes NF4 with an absmax per 64 values, double-quantized")
INT8 = StoredFormat("bnb_int8", "bitsandbytes", "row", 8, label="bitsandbytes LLM.int8 with an fp32 scale per row")
GPTQ = StoredFormat("gptq", "gptq", "gptq", 4, (128,), label="GPTQ 4-bit, groups of 128")
AWQ = StoredFormat("awq", "awq", "awq", 4, (128,), label="AWQ 4-bit (GEMM), groups of 128")
STORED_FORMATS = {f.name: f for f in (MXFP4, FP8_BLOCK, FP8_CHANNEL, NF4, INT8, GPTQ, AWQ)}
QUANT_METHODS = ("mxfp4", "fp8", "fbgemm_fp8", "bitsandbytes", "gptq", "awq")


def get_stored_format(name) -> StoredFormat:
    """A StoredFormat by name (one of STORED_FORMATS); a StoredFormat passes through."""
    if isinstance(name, StoredFormat):
        return name
    key = validate.choice("weights_format", name.strip().lower() if isinstance(name, str) else name,
                          tuple(STORED_FORMATS))
    return STORED_FORMATS[key]


def stored_format(quantization_config) -> StoredFormat | None:
    """The StoredFormat a config.json's `quantization_config` describes (None: a dequantized load, bf16).

    Reads what transformers 5.24's quantization configs read: mxfp4 (`modules_to_not_convert`, `dequantize`),
    fp8 (`weight_block_size`, `fmt`), fbgemm_fp8, bitsandbytes (`load_in_4bit`/`load_in_8bit`,
    `bnb_4bit_quant_type`, `bnb_4bit_use_double_quant`, `llm_int8_skip_modules`), gptq and awq (`bits`,
    `group_size`; AWQ's `version` "gemm"). Anything else raises ValueError naming the field.
    """
    qc = quantization_config
    if not isinstance(qc, dict):
        raise ValueError(f"config field 'quantization_config' must be an object; got {validate.describe(qc)}")
    method = qc.get("quant_method")
    if method is None and (qc.get("load_in_4bit") or qc.get("load_in_8bit")):
        method = "bitsandbytes"  # BitsAndBytesConfig.to_dict writes quant_method; older files may not
    if method not in QUANT_METHODS:
        raise ValueError(f"config field 'quantization_config.quant_method' is {validate.describe(method)}; memmath "
                         f"reads {', '.join(QUANT_METHODS)} (a checkpoint in another format: load it dequantized "
                         "and remove quantization_config)")
    skip = _names(qc, "llm_int8_skip_modules" if method == "bitsandbytes" else "modules_to_not_convert")
    if method == "mxfp4":
        if qc.get("dequantize"):
            return None  # Mxfp4Config(dequantize=True): loaded in bf16
        return _with(MXFP4, not_converted=skip)
    if method == "fp8":
        if qc.get("fmt", "e4m3") != "e4m3":
            raise ValueError(f"config field 'quantization_config.fmt' is {validate.describe(qc.get('fmt'))}; "
                             "transformers' FP8 loads 'e4m3'")
        block = qc.get("weight_block_size")
        if block is None:
            return _with(FP8_BLOCK, name="fp8_tensor", scheme="tensor", block=(), not_converted=skip,
                         label="FP8 e4m3 with one fp32 scale per tensor")
        if (not isinstance(block, list) or len(block) != 2
                or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in block)):
            raise ValueError("config field 'quantization_config.weight_block_size' must be two positive whole "
                             f"numbers such as [128, 128]; got {validate.describe(block)}")
        return _with(FP8_BLOCK, block=tuple(block), not_converted=skip,
                     label=f"FP8 e4m3 with an fp32 scale per {block[0]} x {block[1]} block")
    if method == "fbgemm_fp8":
        return _with(FP8_CHANNEL, not_converted=skip)
    if method == "bitsandbytes":
        if qc.get("load_in_8bit"):
            return _with(INT8, not_converted=skip)
        if not qc.get("load_in_4bit"):
            raise ValueError("config field 'quantization_config' names bitsandbytes with neither load_in_4bit "
                             "nor load_in_8bit true")
        kind = qc.get("bnb_4bit_quant_type", "fp4")  # BitsAndBytesConfig's default is fp4
        if kind not in ("nf4", "fp4"):
            raise ValueError(f"config field 'quantization_config.bnb_4bit_quant_type' is {validate.describe(kind)}; "
                             "bitsandbytes has nf4 and fp4")
        double = bool(qc.get("bnb_4bit_use_double_quant", False))
        return _with(NF4, name=f"bnb_{kind}", double_quant=double, not_converted=skip,
                     label=f"bitsandbytes {kind.upper()} with an absmax per 64 values"
                           + (", double-quantized" if double else ""))
    bits = qc.get("bits", 4)
    if isinstance(bits, bool) or bits not in (2, 3, 4, 8) or (method == "awq" and bits != 4):
        raise ValueError(f"config field 'quantization_config.bits' is {validate.describe(bits)}; {method} stores "
                         + ("4" if method == "awq" else "2, 3, 4 or 8") + " bits")
    group = qc.get("group_size", 128)
    if isinstance(group, bool) or not isinstance(group, int) or not (group == -1 or group >= 1):
        raise ValueError(f"config field 'quantization_config.group_size' must be -1 or a positive whole number; "
                         f"got {validate.describe(group)}")
    if method == "awq" and str(qc.get("version", "gemm")).lower() != "gemm":
        raise ValueError(f"config field 'quantization_config.version' is {validate.describe(qc.get('version'))}; "
                         "memmath reads AWQ's 'gemm' packing")
    base = GPTQ if method == "gptq" else AWQ
    groups = "one group per row" if group == -1 else f"groups of {group}"
    return _with(base, bits=bits, block=(group,), not_converted=skip,
                 label=f"{method.upper()} {bits}-bit" + (" (GEMM)" if method == "awq" else "") + f", {groups}")


def _names(qc: dict, key: str) -> tuple:
    value = qc.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"config field 'quantization_config.{key}' must be a list of module names; "
                         f"got {validate.describe(value)}")
    return tuple(value)


def _with(base: StoredFormat, **changes) -> StoredFormat:
    return replace(base, **changes)


# ---- training on a stored format --------------------------------------------------------------------------

def serving_format(weights_format) -> StoredFormat | None:
    """The StoredFormat a serving weights_format names, None for a plain number format stored whole.

    A StoredFormat or one of STORED_FORMATS' names is itself; an FP8 number format ("fp8", "fp8_e4m3",
    "fp8_e5m2") is stored as FP8 checkpoints store it: linear and expert weights in 8 bits with an fp32 scale per
    output channel, the embeddings, norms and head in 16 bits (FP8_CHANNEL).
    """
    if isinstance(weights_format, StoredFormat):
        return weights_format
    if isinstance(weights_format, str):
        key = weights_format.strip().lower()
        if key in STORED_FORMATS:
            return STORED_FORMATS[key]
        if key in ("mx", "mxfp4_e2m1"):
            return MXFP4
        try:
            fmt = get_format(weights_format)
        except ValueError:
            return None
        if fmt.kind == "float" and fmt.bits == 8:
            return _with(FP8_CHANNEL, name=fmt.name, label=f"FP8 {fmt.name.split('_')[1]} with an fp32 scale per "
                                                           "output channel")
    return None


def get_weights_name(weights_format) -> str:
    """The name a serving weights_format is reported by: a StoredFormat's or the number format's."""
    stored = serving_format(weights_format)
    if stored is not None:
        return stored.name
    return get_format(weights_format).name


def compute_bits(weights_format) -> int:
    """Bits of the activations a prefill computes in with these weights: 16 for stored formats (they dequantize to
    bf16), the format's own bits between 16 and 32 otherwise."""
    if serving_format(weights_format) is not None:
        return 16
    return max(16, min(32, get_format(weights_format).bits))


def weight_bits(weights_format) -> int:
    """Bits of a serving weights_format's quantized values (a StoredFormat's, or the number format's)."""
    stored = serving_format(weights_format)
    return stored.bits if stored is not None else get_format(weights_format).bits


# ---- peft's prepare_model_for_kbit_training ----------------------------------------------------------------



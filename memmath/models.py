"""Model shapes with exact parameter counts, tensor by tensor.

A ModelShape lists every parameter tensor of a GPT-2, LLaMA (also Mistral) or BERT style model, or
of the generic "N parameters in L equal layers". Counts are exact: they match PyTorch's
`sum(p.numel() for p in model.parameters())` for the same transformers config (see tests).
Dimensions may be numpy arrays where a sweep needs them (the parameter count of a uniform model).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from . import validate

if TYPE_CHECKING:
    import pandas as pd


FAMILIES = ("gpt2", "llama", "bert", "uniform")
COMPONENTS = ("embeddings", "attention", "mlp", "norms", "head")
GROUPS = ("embeddings", "layer", "final_norm", "head")
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")


@dataclass(frozen=True)
class ParamTensor:
    """One parameter tensor: its path key, the component it belongs to, its shape.

    linear: a weight matrix of a linear layer (what bitsandbytes quantizes to 4 bit in QLoRA).
    """

    name: str
    component: str
    shape: tuple
    linear: bool = False

    @property
    def numel(self):
        """Number of elements: the product of the shape."""
        result = 1
        for dim in self.shape:
            result = result * dim
        return result

    @property
    def factored_size(self):
        """Adafactor's second-moment size: rows + cols for a matrix, numel for a vector (Shazeer & Stern 2018)."""
        if len(self.shape) == 2:
            return self.shape[0] + self.shape[1]
        return self.numel


@dataclass(frozen=True)
class ModelShape:
    """The shape of a transformer, enough to count every parameter and activation.

    Build one with `gpt2_model`, `llama_model`, `bert_model`, `uniform_model`, `from_hf_config` or
    take one from `PRESETS`. Fields that a family does not use are None.
    """

    family: str  # one of FAMILIES
    n_layers: int  # transformer blocks, all the same shape
    hidden_size: int | None = None  # h: the residual stream width
    n_heads: int | None = None  # a: attention heads
    n_kv_heads: int | None = None  # key/value heads (grouped-query attention when < n_heads)
    head_dim: int | None = None  # d: size of one head (h / a unless a config says otherwise)
    intermediate_size: int | None = None  # MLP width (4h in GPT-2 and BERT)
    vocab_size: int | None = None  # V: rows of the token embedding
    max_positions: int | None = None  # learned position embeddings (GPT-2, BERT)
    tied_embeddings: bool = False  # the output head reuses the token embedding matrix
    type_vocab_size: int = 0  # BERT's token-type (segment) embeddings
    num_labels: int = 0  # BERT: classifier outputs on top of the pooler (0 = no classifier)
    attention_bias: bool = False  # LLaMA configs may add biases to q, k, v, o
    mlp_bias: bool = False  # LLaMA configs may add biases to gate, up, down
    uniform_params: object = None  # uniform family: the total parameter count
    from_count: bool = False  # built by resolve_model from a bare parameter count (no layers to choose)
    name: str = ""  # a label for tables and charts
    notes: tuple = field(default=(), compare=False)

    # ---- counts -----------------------------------------------------------------------------
    @property
    def has_shape(self) -> bool:
        """True when width, heads and vocabulary are known (activations can be estimated)."""
        return self.hidden_size is not None and self.n_heads is not None

    @property
    def tensor_count_known(self) -> bool:
        """False for the uniform family, whose layers are a parameter count without tensors."""
        return self.family != "uniform"

    def tensors(self, group: str) -> list[ParamTensor]:
        """The parameter tensors of one group: 'embeddings', 'layer' (one block), 'final_norm', 'head'."""
        if group not in GROUPS:
            raise ValueError(f"group must be one of {', '.join(GROUPS)}; got {validate.describe(group)}")
        return _TENSOR_BUILDERS[self.family](self, group)

    def group_params(self, group: str):
        """Parameters in one group (for 'layer': in one block)."""
        return sum((t.numel for t in self.tensors(group)), 0)

    @property
    def params_per_layer(self):
        """Parameters in one transformer block."""
        return self.group_params("layer")

    @property
    def n_params(self):
        """Total parameters, each tied matrix counted once (as PyTorch's model.parameters() does)."""
        outside = sum(self.group_params(g) for g in ("embeddings", "final_norm", "head"))
        return outside + self.n_layers * self.params_per_layer

    def component_params(self) -> dict[str, object]:
        """Parameters per component (embeddings, attention, mlp, norms, head) over the whole model."""
        totals = {c: 0 for c in COMPONENTS}
        for group in GROUPS:
            repeat = self.n_layers if group == "layer" else 1
            for tensor in self.tensors(group):
                totals[tensor.component] = totals[tensor.component] + repeat * tensor.numel
        return totals

    def breakdown(self) -> pd.DataFrame:
        """One row per tensor: group, path key, component, shape, count per copy, copies, total."""
        import pandas as pd  # only here: `import memmath` stays numpy-only
        rows = []
        for group in GROUPS:
            repeat = self.n_layers if group == "layer" else 1
            for tensor in self.tensors(group):
                rows.append({
                    "group": group, "tensor": tensor.name, "component": tensor.component,
                    "shape": " x ".join(str(d) for d in tensor.shape), "params": tensor.numel,
                    "copies": repeat, "total": tensor.numel * repeat,
                })
        return pd.DataFrame(rows)

    # ---- LoRA -------------------------------------------------------------------------------
    def lora_matrices(self, targets) -> list[tuple[str, int, int]]:
        """(module, d_in, d_out) of each matrix one block adapts for LoRA targets such as ('q', 'v').

        Names map onto each family's modules: GPT-2's q, k and v live in one fused c_attn matrix,
        which is adapted once; BERT and GPT-2 have no gate matrix. "all" adapts every linear
        matrix the family has (peft's "all-linear"), so it skips gate where there is none.
        """
        targets = lora_targets(targets)
        table = _LORA_TABLES[self.family](self)
        every = set(targets) == set(LORA_TARGETS)  # "all": what exists in this family
        chosen: dict[str, tuple[int, int]] = {}
        for target in targets:
            if target not in table and every and table:
                continue
            if target not in table:
                available = ", ".join(t for t in LORA_TARGETS if t in table) or "none"
                raise ValueError(
                    f"LoRA target {target!r} does not exist in a {self.family} model; allowed: {available}"
                )
            module, d_in, d_out = table[target]
            chosen[module] = (d_in, d_out)
        return [(module, d_in, d_out) for module, (d_in, d_out) in chosen.items()]

    def with_changes(self, **changes) -> "ModelShape":
        """A copy with some fields changed, checked again.

        Values that were derived follow the change unless given: head_dim stays hidden_size / n_heads
        and n_kv_heads stays n_heads (multi-head attention) when they were so before. An explicit
        head size or a grouped-query kv count that differed from the default is kept.
        """
        if "head_dim" not in changes and ("hidden_size" in changes or "n_heads" in changes):
            if self.head_dim is not None and self.head_dim * self.n_heads == self.hidden_size:
                changes["head_dim"] = None
        if "n_kv_heads" not in changes and "n_heads" in changes and self.n_kv_heads == self.n_heads:
            changes["n_kv_heads"] = None
        return replace(self, **changes)

    # ---- checks -----------------------------------------------------------------------------
    def __post_init__(self):
        object.__setattr__(self, "family", validate.choice("family", self.family, FAMILIES))
        object.__setattr__(self, "n_layers", validate.count("n_layers", self.n_layers, high=validate.MAX_LAYERS))
        for name in ("tied_embeddings", "attention_bias", "mlp_bias"):
            validate.flag(name, getattr(self, name))
        object.__setattr__(self, "type_vocab_size", validate.count("type_vocab_size", self.type_vocab_size, low=0,
                                                                   scalar=True))
        object.__setattr__(self, "num_labels", validate.count("num_labels", self.num_labels, low=0, scalar=True))
        if self.family == "uniform":
            self._check_uniform()
        else:
            self._check_transformer()

    def _check_uniform(self):
        if self.uniform_params is None:
            raise ValueError("n_params (uniform_params) is required for the uniform family: a whole number of parameters")
        n = validate.count("n_params", self.uniform_params, high=validate.MAX_PARAMS)
        if np.any(n < self.n_layers):
            raise ValueError(f"n_params must be at least n_layers ({self.n_layers}) so every layer holds a parameter")
        object.__setattr__(self, "uniform_params", n)
        for name in ("hidden_size", "n_heads", "vocab_size"):
            value = getattr(self, name)
            if value is not None:
                # Single numbers: only n_params sweeps in the uniform family.
                object.__setattr__(self, name, validate.count(name, value, high=validate.MAX_VOCAB, scalar=True))
        if (self.hidden_size is None) != (self.n_heads is None):
            raise ValueError("hidden_size and n_heads must be given together (both or neither)")
        if self.has_shape:
            self._check_heads()

    def _check_transformer(self):
        required = ["hidden_size", "n_heads", "intermediate_size", "vocab_size"]
        if self.family in ("gpt2", "bert"):
            required.append("max_positions")
        for name in required:
            if getattr(self, name) is None:
                raise ValueError(f"{name} is required for a {self.family} model")
        limits = {"vocab_size": validate.MAX_VOCAB, "max_positions": validate.MAX_SEQ}
        for name in ("hidden_size", "n_heads", "n_kv_heads", "head_dim", "intermediate_size", "vocab_size", "max_positions"):
            value = getattr(self, name)
            if value is not None:
                checked = validate.count(name, value, high=limits.get(name, validate.MAX_DIM))
                if isinstance(checked, np.ndarray):
                    raise ValueError(f"{name} must be a single number in a {self.family} model (sweep the uniform family instead)")
                object.__setattr__(self, name, checked)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        self._check_heads()
        if self.family != "llama" and (self.attention_bias or self.mlp_bias):
            raise ValueError("attention_bias and mlp_bias are LLaMA options; GPT-2 and BERT always have biases")
        if self.family != "bert" and (self.type_vocab_size or self.num_labels):
            raise ValueError("type_vocab_size and num_labels apply to BERT models only")
        if self.family == "bert" and self.tied_embeddings:
            raise ValueError("tied_embeddings does not apply to BERT here: its pooler/classifier head has no vocabulary matrix")
        if np.any(self.n_params > validate.MAX_PARAMS):
            raise ValueError(f"the shape has {_describe_count(self.n_params)} parameters; at most "
                             f"{validate.MAX_PARAMS:,} are supported (check hidden_size, intermediate_size, "
                             "vocab_size and n_layers)")

    def _check_heads(self):
        h, a = self.hidden_size, self.n_heads
        if self.head_dim is None:
            if h % a:
                raise ValueError(f"n_heads ({a}) must divide hidden_size ({h}) when head_dim is not given")
            object.__setattr__(self, "head_dim", h // a)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", a)
        kv = self.n_kv_heads
        if kv > a or a % kv:
            raise ValueError(f"n_kv_heads ({kv}) must divide n_heads ({a})")
        if self.family in ("gpt2", "bert") and (kv != a or self.head_dim * a != h):
            raise ValueError(f"{self.family} models use n_kv_heads = n_heads and head_dim = hidden_size / n_heads")


def _describe_count(value) -> str:
    return f"{int(np.max(value)):,}" if isinstance(value, np.ndarray) else f"{value:,}"


def lora_targets(targets) -> tuple[str, ...]:
    if isinstance(targets, str):
        targets = (targets,)
    if isinstance(targets, (dict, bytes)) or (isinstance(targets, np.ndarray) and targets.dtype.kind != "U"):
        raise TypeError(f"targets must be names from {', '.join(LORA_TARGETS)}; got {validate.describe(targets)}")
    try:
        targets = tuple(str(t) if isinstance(t, np.str_) else t for t in targets)
    except TypeError:
        raise TypeError(f"targets must be names from {', '.join(LORA_TARGETS)}; got {validate.describe(targets)}") from None
    if not targets:
        raise ValueError(f"targets must name at least one matrix from {', '.join(LORA_TARGETS)}")
    for target in targets:
        if not isinstance(target, str):
            raise TypeError(f"targets must be names from {', '.join(LORA_TARGETS)}; got {validate.describe(target)}")
    if "all" in targets or "all-linear" in targets:
        return LORA_TARGETS
    for target in targets:
        if target not in LORA_TARGETS:
            raise ValueError(f"LoRA target must be one of {', '.join(LORA_TARGETS)} (or 'all'); got {validate.describe(target)}")
    return targets


# ---- tensors of each family ------------------------------------------------------------------
def _linear(name, component, d_in, d_out, bias):
    """A linear layer's weight (d_out x d_in, as nn.Linear stores it) and optional bias."""
    tensors = [ParamTensor(f"{name}.weight", component, (d_out, d_in), linear=True)]
    if bias:
        tensors.append(ParamTensor(f"{name}.bias", component, (d_out,)))
    return tensors


def _norm(name, h, bias):
    tensors = [ParamTensor(f"{name}.weight", "norms", (h,))]
    if bias:
        tensors.append(ParamTensor(f"{name}.bias", "norms", (h,)))
    return tensors


def _gpt2_tensors(m: ModelShape, group: str):
    # GPT-2 (Radford et al. 2019; transformers GPT2LMHeadModel): learned positions, LayerNorm with
    # bias, fused qkv, 4h MLP; per block 12h^2 + 13h parameters when the MLP is 4h wide.
    h, inner, vocab = m.hidden_size, m.intermediate_size, m.vocab_size
    if group == "embeddings":
        return [ParamTensor("wte", "embeddings", (vocab, h)), ParamTensor("wpe", "embeddings", (m.max_positions, h))]
    if group == "layer":
        return (_norm("ln_1", h, True) + _linear("attn.c_attn", "attention", h, 3 * h, True)
                + _linear("attn.c_proj", "attention", h, h, True) + _norm("ln_2", h, True)
                + _linear("mlp.c_fc", "mlp", h, inner, True) + _linear("mlp.c_proj", "mlp", inner, h, True))
    if group == "final_norm":
        return _norm("ln_f", h, True)
    return [] if m.tied_embeddings else [ParamTensor("lm_head.weight", "head", (vocab, h), linear=False)]


def _llama_tensors(m: ModelShape, group: str):
    # LLaMA (Touvron et al. 2023; transformers LlamaForCausalLM): RMSNorm without bias, SwiGLU MLP,
    # grouped-query attention, rotary positions (no parameters), optional untied head.
    h, a, kv, d, inner = m.hidden_size, m.n_heads, m.n_kv_heads, m.head_dim, m.intermediate_size
    if group == "embeddings":
        return [ParamTensor("embed_tokens", "embeddings", (m.vocab_size, h))]
    if group == "layer":
        ab, mb = m.attention_bias, m.mlp_bias
        return (_norm("input_layernorm", h, False)
                + _linear("self_attn.q_proj", "attention", h, a * d, ab)
                + _linear("self_attn.k_proj", "attention", h, kv * d, ab)
                + _linear("self_attn.v_proj", "attention", h, kv * d, ab)
                + _linear("self_attn.o_proj", "attention", a * d, h, ab)
                + _norm("post_attention_layernorm", h, False)
                + _linear("mlp.gate_proj", "mlp", h, inner, mb) + _linear("mlp.up_proj", "mlp", h, inner, mb)
                + _linear("mlp.down_proj", "mlp", inner, h, mb))
    if group == "final_norm":
        return _norm("norm", h, False)
    # transformers keeps lm_head out of 4-bit quantization, so it is not marked linear here.
    return [] if m.tied_embeddings else [ParamTensor("lm_head.weight", "head", (m.vocab_size, h))]


def _bert_tensors(m: ModelShape, group: str):
    # BERT (Devlin et al. 2019; transformers BertModel + optional classifier): word, position and
    # token-type embeddings with a LayerNorm, post-norm blocks, a tanh pooler.
    h, inner = m.hidden_size, m.intermediate_size
    if group == "embeddings":
        tensors = [ParamTensor("word_embeddings", "embeddings", (m.vocab_size, h)),
                   ParamTensor("position_embeddings", "embeddings", (m.max_positions, h))]
        if m.type_vocab_size:
            tensors.append(ParamTensor("token_type_embeddings", "embeddings", (m.type_vocab_size, h)))
        return tensors + _norm("embeddings.LayerNorm", h, True)
    if group == "layer":
        return (_linear("attention.self.query", "attention", h, h, True)
                + _linear("attention.self.key", "attention", h, h, True)
                + _linear("attention.self.value", "attention", h, h, True)
                + _linear("attention.output.dense", "attention", h, h, True)
                + _norm("attention.output.LayerNorm", h, True)
                + _linear("intermediate.dense", "mlp", h, inner, True)
                + _linear("output.dense", "mlp", inner, h, True) + _norm("output.LayerNorm", h, True))
    if group == "final_norm":
        return []
    head = [ParamTensor("pooler.dense.weight", "head", (h, h), linear=True), ParamTensor("pooler.dense.bias", "head", (h,))]
    if m.num_labels:
        head += [ParamTensor("classifier.weight", "head", (m.num_labels, h)), ParamTensor("classifier.bias", "head", (m.num_labels,))]
    return head


def _uniform_tensors(m: ModelShape, group: str):
    # "N parameters in L equal layers": each layer one block of N // L weights; the remainder of an
    # uneven split sits outside the layers, with the embeddings.
    n, layers = m.uniform_params, m.n_layers
    if group == "layer":
        return [ParamTensor("layer.weights", "attention", (n // layers,), linear=True)]
    if group == "embeddings":
        rest = n - layers * (n // layers)
        if isinstance(rest, np.ndarray) or rest:
            return [ParamTensor("rest", "embeddings", (rest,))]
    return []


_TENSOR_BUILDERS = {"gpt2": _gpt2_tensors, "llama": _llama_tensors, "bert": _bert_tensors, "uniform": _uniform_tensors}

_LORA_TABLES = {
    # target -> (module, d_in, d_out); peft adds A (r x d_in) and B (d_out x r) to each module once.
    "gpt2": lambda m: {
        "q": ("attn.c_attn", m.hidden_size, 3 * m.hidden_size),
        "k": ("attn.c_attn", m.hidden_size, 3 * m.hidden_size),
        "v": ("attn.c_attn", m.hidden_size, 3 * m.hidden_size),
        "o": ("attn.c_proj", m.hidden_size, m.hidden_size),
        "up": ("mlp.c_fc", m.hidden_size, m.intermediate_size),
        "down": ("mlp.c_proj", m.intermediate_size, m.hidden_size),
    },
    "llama": lambda m: {
        "q": ("q_proj", m.hidden_size, m.n_heads * m.head_dim),
        "k": ("k_proj", m.hidden_size, m.n_kv_heads * m.head_dim),
        "v": ("v_proj", m.hidden_size, m.n_kv_heads * m.head_dim),
        "o": ("o_proj", m.n_heads * m.head_dim, m.hidden_size),
        "gate": ("gate_proj", m.hidden_size, m.intermediate_size),
        "up": ("up_proj", m.hidden_size, m.intermediate_size),
        "down": ("down_proj", m.intermediate_size, m.hidden_size),
    },
    "bert": lambda m: {
        "q": ("query", m.hidden_size, m.hidden_size),
        "k": ("key", m.hidden_size, m.hidden_size),
        "v": ("value", m.hidden_size, m.hidden_size),
        "o": ("attention.output.dense", m.hidden_size, m.hidden_size),
        "up": ("intermediate.dense", m.hidden_size, m.intermediate_size),
        "down": ("output.dense", m.intermediate_size, m.hidden_size),
    },
    "uniform": lambda m: {},
}


# ---- constructors ----------------------------------------------------------------------------
def gpt2_model(*, n_layers, hidden_size, n_heads, vocab_size=50257, max_positions=1024,
               intermediate_size=None, tied_embeddings=True, name="") -> ModelShape:
    """A GPT-2 style shape (intermediate_size defaults to 4 x hidden_size, as GPT-2's n_inner=None).

    With a 4h MLP and the tied head: n_params = V*h + P*h + L*(12h^2 + 13h) + 2h (gpt2: 124,439,808);
    an untied head adds V*h.
    """
    inner = intermediate_size if intermediate_size is not None else 4 * validate.count("hidden_size", hidden_size)
    return ModelShape(family="gpt2", n_layers=n_layers, hidden_size=hidden_size, n_heads=n_heads,
                      intermediate_size=inner, vocab_size=vocab_size, max_positions=max_positions,
                      tied_embeddings=tied_embeddings, name=name)


def llama_model(*, n_layers, hidden_size, n_heads, intermediate_size, vocab_size, n_kv_heads=None,
                head_dim=None, tied_embeddings=False, attention_bias=False, mlp_bias=False, name="") -> ModelShape:
    """A LLaMA style shape (also Mistral): RMSNorm, SwiGLU, grouped-query attention, rotary positions.

    n_params = V*h*(1 if tied else 2) + h + L*(2*h*a*d + 2*h*kv*d + 3*h*I + 2*h), d = head_dim
    (hidden_size / n_heads unless given), kv = n_kv_heads (n_heads unless given); biases add
    (a + 2kv)*d + h per block for attention_bias and 2I + h for mlp_bias. Llama-2-7B: 6,738,415,616.
    """
    return ModelShape(family="llama", n_layers=n_layers, hidden_size=hidden_size, n_heads=n_heads,
                      n_kv_heads=n_kv_heads, head_dim=head_dim, intermediate_size=intermediate_size,
                      vocab_size=vocab_size, tied_embeddings=tied_embeddings, attention_bias=attention_bias,
                      mlp_bias=mlp_bias, name=name)


def bert_model(*, n_layers, hidden_size, n_heads, intermediate_size=None, vocab_size=30522,
               max_positions=512, type_vocab_size=2, num_labels=0, name="") -> ModelShape:
    """A BERT style encoder (transformers' BertModel) with its pooler; num_labels > 0 adds a classifier.

    n_params = (V + P + T)*h + 2h + L*(4h^2 + 2h*I + 9h + I) + h^2 + h, plus num_labels*(h + 1) for
    the classifier (T = type_vocab_size; I = 4h gives 12h^2 + 13h per block). bert-base-uncased:
    109,482,240. A masked-LM head is not counted.
    """
    inner = intermediate_size if intermediate_size is not None else 4 * validate.count("hidden_size", hidden_size)
    return ModelShape(family="bert", n_layers=n_layers, hidden_size=hidden_size, n_heads=n_heads,
                      intermediate_size=inner, vocab_size=vocab_size, max_positions=max_positions,
                      tied_embeddings=False, type_vocab_size=type_vocab_size, num_labels=num_labels, name=name)


def uniform_model(n_params, n_layers, *, hidden_size=None, n_heads=None, vocab_size=None, name="") -> ModelShape:
    """The article's generic model: n_params parameters in n_layers equal layers.

    n_params may be a numpy array (a sweep). Give hidden_size and n_heads (and vocab_size for the
    loss term) when activations should be estimated too. Each layer holds n_params // n_layers
    parameters; a remainder sits outside the layers (as "embeddings"). The layers have no named
    matrices, so component_params() reports them under "attention", Adam's per-tensor step
    counters are not counted and LoRA/QLoRA need a real shape.
    """
    if isinstance(n_params, str):
        from .units import parse_count

        try:
            n_params = parse_count(n_params)
        except ValueError as error:
            raise ValueError(f"n_params: {error}") from None
    return ModelShape(family="uniform", n_layers=n_layers, hidden_size=hidden_size, n_heads=n_heads,
                      vocab_size=vocab_size, uniform_params=n_params, name=name)


# ---- transformers config.json ----------------------------------------------------------------
SUPPORTED_MODEL_TYPES = ("gpt2", "llama", "mistral", "bert")


def from_hf_config(config) -> ModelShape:
    """A ModelShape from a transformers config: a dict, JSON text, or a path to config.json.

    Only JSON is read; nothing is executed. Supports model_type gpt2 (GPT2LMHeadModel), llama and
    mistral (LlamaForCausalLM/MistralForCausalLM) and bert (BertModel with its pooler, plus the
    classifier when architectures names a ...ForSequenceClassification; a masked-LM head is not
    counted). A missing field, a field of the wrong kind or an unsupported model_type raises
    ValueError naming it.
    """
    config = _load_config(config)
    model_type = config.get("model_type")
    if model_type is None:
        raise ValueError(f"config is missing the field 'model_type' (one of {', '.join(SUPPORTED_MODEL_TYPES)})")
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"config field 'model_type' {validate.describe(model_type)} is not supported; "
                         f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    get = _ConfigReader(config)
    name = _config_name(config, model_type)
    if model_type == "gpt2":
        return gpt2_model(
            n_layers=get("n_layer"), hidden_size=get("n_embd"), n_heads=get("n_head"),
            vocab_size=get("vocab_size"), max_positions=get("n_positions"),
            intermediate_size=get("n_inner", None), tied_embeddings=get.flag("tie_word_embeddings", True), name=name,
        )
    if model_type == "bert":
        # A sequence-classification checkpoint adds a classifier with one output per label.
        architectures = config.get("architectures") or []
        if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
            raise ValueError("config field 'architectures' must be a list of class names; "
                             f"got {validate.describe(architectures)}")
        classifier = any(a.endswith("ForSequenceClassification") for a in architectures)
        labels = len(config["id2label"]) if isinstance(config.get("id2label"), dict) else get("num_labels", 2)
        return bert_model(
            n_layers=get("num_hidden_layers"), hidden_size=get("hidden_size"), n_heads=get("num_attention_heads"),
            intermediate_size=get("intermediate_size"), vocab_size=get("vocab_size"),
            max_positions=get("max_position_embeddings"), type_vocab_size=get("type_vocab_size", 2),
            num_labels=labels if classifier else 0,
            name=name,
        )
    return llama_model(
        n_layers=get("num_hidden_layers"), hidden_size=get("hidden_size"), n_heads=get("num_attention_heads"),
        n_kv_heads=get("num_key_value_heads", None), head_dim=get("head_dim", None),
        intermediate_size=get("intermediate_size"), vocab_size=get("vocab_size"),
        tied_embeddings=get.flag("tie_word_embeddings", False),
        attention_bias=get.flag("attention_bias", False), mlp_bias=get.flag("mlp_bias", False), name=name,
    )


MAX_NAME = 200  # characters of _name_or_path kept as the model's label


def _config_name(config: dict, model_type: str) -> str:
    """The label from _name_or_path: a string (transformers writes one), cut to MAX_NAME characters."""
    name = config.get("_name_or_path") or model_type
    if not isinstance(name, str):
        raise ValueError(f"config field '_name_or_path' must be a string; got a {type(name).__name__}")
    return name if len(name) <= MAX_NAME else name[: MAX_NAME - 3] + "..."


# The range of each config field: the range of the ModelShape field it fills (others: 1 to MAX_DIM).
_CONFIG_LIMITS = {
    "n_layer": (1, validate.MAX_LAYERS), "num_hidden_layers": (1, validate.MAX_LAYERS),
    "vocab_size": (1, validate.MAX_VOCAB), "n_positions": (1, validate.MAX_SEQ),
    "max_position_embeddings": (1, validate.MAX_SEQ), "type_vocab_size": (0, validate.MAX_DIM),
    "num_labels": (0, validate.MAX_DIM),
}


class _ConfigReader:
    _MISSING = object()

    def __init__(self, config: dict):
        self.config = config

    def __call__(self, key, default=_MISSING):
        if key not in self.config or self.config[key] is None:
            if default is self._MISSING:
                raise ValueError(f"config is missing the field {key!r}")
            return default
        value = self.config[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"config field {key!r} must be a whole number; got {validate.describe(value)}")
        low, high = _CONFIG_LIMITS.get(key, (1, validate.MAX_DIM))
        return validate.count(f"config field {key!r}", value, low=low, high=high)

    def flag(self, key, default):
        value = self.config.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ValueError(f"config field {key!r} must be true or false; got {validate.describe(value)}")
        return value


MAX_CONFIG_BYTES = 4 * 2**20  # a real config.json is a few kB; a file larger than 4 MiB is not one


def _load_config(config) -> dict:
    if isinstance(config, dict):
        return config
    if isinstance(config, (str, os.PathLike)):
        if isinstance(config, str) and config.lstrip().startswith(("{", "[")):
            return parse_json_config(config, "config")
        path, text = _read_config_file(config)
        return parse_json_config(text, f"config file {validate.describe(path.name)}")
    raise TypeError(f"config must be a dict, JSON text or a path to config.json; got {type(config).__name__}")


def _read_config_file(config) -> tuple[Path, str]:
    """The text of a regular .json file (config.json inside a folder), at most MAX_CONFIG_BYTES.

    Symbolic links are refused rather than followed, and nothing but the file's name is quoted back.
    """
    hint = "(give a dict, JSON text, a config.json path or the folder that holds it)"
    try:
        path = Path(config)
        if path.is_dir() and not path.is_symlink():
            path = path / "config.json"
        info = os.lstat(path)
    except (OSError, ValueError) as error:  # missing, a name too long, a NUL byte, no permission
        raise ValueError(f"config path {validate.describe(str(config))} cannot be read "
                         f"({error.__class__.__name__}) {hint}") from None
    where = f"config path {validate.describe(str(path))}"
    if stat.S_ISLNK(info.st_mode):
        raise ValueError(f"{where} is a symbolic link, which is not followed; give the file itself {hint}")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{where} is not a regular file {hint}")
    if not path.name.endswith(".json"):
        raise ValueError(f"{where} must name a .json file such as config.json {hint}")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{where} holds {info.st_size:,} bytes; a config.json is a few kB and at most "
                         f"{MAX_CONFIG_BYTES:,} bytes (4 MiB) are read")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):  # swapped since lstat
                raise ValueError(f"{where} is not a regular file {hint}")
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise ValueError(f"{where} cannot be read ({error.__class__.__name__}) {hint}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{where} holds more than {MAX_CONFIG_BYTES:,} bytes (4 MiB), more than a config.json")
    return path, data.decode("utf-8", errors="replace")


def _json_hint(error: json.JSONDecodeError) -> str:
    """A likely cause for a JSON error, in words (Python's messages name the symptom, not the cause)."""
    text, pos = error.doc, error.pos
    if pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string"):
        return "the text ends early: paste the whole file, up to its closing '}'"
    if pos == len(text) - len(text.lstrip()) and not text.lstrip().startswith(("{", "[")):
        return "paste the file's contents, which start with '{', not a model name or a path"
    if error.msg.startswith("Expecting property name enclosed in double quotes"):
        return "names need double quotes, and no comma may follow the last entry"
    if error.msg.startswith("Extra data"):
        return "there is more text after the closing '}'"
    return ""


def parse_json_config(text: str, where: str) -> dict:
    if len(text) > MAX_CONFIG_BYTES:
        raise ValueError(f"{where} holds {len(text):,} characters; a config.json is a few kB and at most "
                         f"{MAX_CONFIG_BYTES:,} (4 MiB) are read")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        hint = _json_hint(error)
        raise ValueError(f"{where} is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}"
                         + (f" ({hint})" if hint else "")) from None
    except RecursionError:
        raise ValueError(f"{where} nests JSON too deeply to be a transformers config") from None
    except ValueError:  # Python refuses to read an integer of more than 4,300 digits
        raise ValueError(f"{where} holds a number too long to read (more than 4,300 digits); "
                         "a config's sizes are a few digits") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a JSON object ({{...}}), got a {type(data).__name__}")
    return data

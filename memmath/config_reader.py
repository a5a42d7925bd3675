"""Reading a transformers config.json into a ModelShape: one reader, the model type's record doing the rest.

Only JSON is read; nothing is executed. Each model type's fields, defaults and layout live in its record
(memmath/architectures/<model_type>.py); this module reads what every family shares, checks each field's kind
and range, and reads the file itself (bounded, following links only inside the Hugging Face cache).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from . import validate
from .architectures import ARCHITECTURES, READ_AS, SUPPORTED_MODEL_TYPES, TRACED_HINT, Architecture
from .architectures._refused import refusal
from .checkpoints import stored_format
from .files import NotARegularFile, read_bounded
from .hf_cache import LinkOutsideCache, cache_root_holding, follow_inside
from .models import LAYER_TYPES, ModelShape, bert_model, gpt2_model, llama_model
from .multimodal import MULTIMODAL_MODEL_TYPES, REFUSED_MODEL_TYPES, from_multimodal_config

# Every model_type a config.json may name: the text models' records, then the vision-language wrappers.
READABLE_MODEL_TYPES = SUPPORTED_MODEL_TYPES + MULTIMODAL_MODEL_TYPES

# Per model_type, the config fields that change a parameter tensor, a saved activation or the KV cache, and what
# memmath does with each (each record's `fields`, read from transformers 5.24's configuration_<type>.py and
# modeling_<type>.py). Fields not listed (token ids, eps, rope_theta/rope_parameters/rope_scaling,
# initializer_range, max_position_embeddings of rotary models) change no memory. A value outside what memmath
# models raises a ValueError naming the field; UNSUPPORTED_EXAMPLES gives one per field.
class _ConfigFields(Mapping):
    """model_type -> {field: what memmath does with it}, read from the record when asked (records load lazily)."""

    def __getitem__(self, model_type) -> dict[str, str]:
        return dict(ARCHITECTURES[model_type].fields)

    def __iter__(self):
        return iter(ARCHITECTURES)

    def __len__(self) -> int:
        return len(ARCHITECTURES)


CONFIG_FIELDS: Mapping[str, dict[str, str]] = _ConfigFields()

# One value per listed field that memmath does not model, for the tests.
UNSUPPORTED_EXAMPLES = {
    "torch_dtype": "float8_e4m3fn", "dtype": "int8", "quantization_config": {"quant_method": "hqq"},
    "activation_function": "relu", "hidden_act": "quick_gelu", "hidden_activation": "relu",
    "add_cross_attention": True, "scale_attn_by_inverse_layer_idx": True, "reorder_and_upcast_attn": True,
    "position_embedding_type": "relative_key", "is_decoder": True, "use_bidirectional_attention": True,
    "output_router_logits": True, "router_jitter_noise": 0.1, "decoder_sparse_step": 0, "mlp_only_layers": [10**6],
    "layer_types": ["chunked_attention"], "attention_dropout": 1.5, "resid_pdrop": -0.1, "use_cache": "yes",
}

_DTYPES = ("float32", "bfloat16", "float16")


def from_hf_config(config) -> ModelShape:
    """A ModelShape from a transformers config: a dict, JSON text, or a path to config.json (or its folder).

    Only JSON is read; nothing is executed. model_type may be any of SUPPORTED_MODEL_TYPES (one record each in
    memmath/architectures/): gpt2 (GPT2LMHeadModel), bert and roberta (BertModel/RobertaModel with the pooler,
    plus the classifier when architectures names a ...ForSequenceClassification; a masked-LM head is not
    counted), and the rotary decoders (their ...ForCausalLM); a vision-language config (gemma3, llava, mistral3,
    qwen2_vl, ...) is read by memmath/multimodal.py. CONFIG_FIELDS lists, per model_type, every field that
    changes memory and what memmath does with it; a value memmath does not model, a missing field, a field of
    the wrong kind or an unsupported model_type raises ValueError naming it.
    """
    config = _load_config(config)
    model_type = config.get("model_type")
    if model_type is None:
        raise ValueError(f"config is missing the field 'model_type' (one of {', '.join(READABLE_MODEL_TYPES)})")
    if isinstance(model_type, str) and model_type in READ_AS:  # remote code built as another type's class (Kimi-K2)
        config = dict(config, model_type=READ_AS[model_type], _name_or_path=_config_name(config, model_type))
        model_type = config["model_type"]
    if refusal(model_type):  # a type transformers builds that memmath refuses by name (architectures/_refused.py)
        raise ValueError(f"config field 'model_type' {model_type!r} is not supported: {refusal(model_type)}")
    if isinstance(model_type, str) and model_type not in ARCHITECTURES:
        # A vision-language config (gemma3, llava, mistral3, qwen2_vl, qwen2_5_vl): the language model from its
        # text_config, the vision tower and projector from the rest (memmath/multimodal.py); others refused by name.
        if (model_type in MULTIMODAL_MODEL_TYPES or model_type in REFUSED_MODEL_TYPES
                or isinstance(config.get("vision_config"), dict)):
            return from_multimodal_config(config, read_text=from_hf_config)
    if not isinstance(model_type, str) or model_type not in ARCHITECTURES:
        raise ValueError(f"config field 'model_type' {validate.describe(model_type)} is not supported: memmath reads "
                         f"{len(SUPPORTED_MODEL_TYPES)} text model types and {len(MULTIMODAL_MODEL_TYPES)} "
                         f"vision-language ones, which `memmath models` lists; {TRACED_HINT}")
    record = ARCHITECTURES[model_type]
    get = _ConfigReader(config, record.defaults)
    _check_common(config)
    for key in record.refused_flags:
        if get.flag(key, False):
            raise ValueError(f"config field {key!r} is true; memmath models only {key}=false")
    name = _config_name(config, model_type)
    reader = {"gpt2": _gpt2_from_config, "bert": _bert_from_config, "llama": _decoder_from_config}[record.family]
    return _as_stored(reader(config, get, record, name), config)


def _check_common(config):
    for key in ("torch_dtype", "dtype"):
        value = config.get(key)
        if value is not None and value not in _DTYPES:
            raise ValueError(f"config field {key!r} must be one of {', '.join(_DTYPES)}; got {validate.describe(value)}")
    if config.get("quantization_config") is not None:
        stored_format(config["quantization_config"])  # a format memmath does not read is refused before the rest


def _as_stored(shape: ModelShape, config: dict) -> ModelShape:
    """The shape with the checkpoint's storage when its config names a quantization_config (checkpoints.py)."""
    quantization = config.get("quantization_config")
    return shape if quantization is None else replace(shape, stored_format=stored_format(quantization))



def _activation(config, record: Architecture) -> str:
    """The MLP activation from the record's field, its first modelled activation when the field is absent."""
    key, allowed = record.activation_field, record.activations
    value = config.get(key)
    value = allowed[0] if value is None else value
    if value not in allowed:
        raise ValueError(f"config field {key!r} is {validate.describe(value)}; memmath models {', '.join(allowed)} "
                         f"for {record.model_type}")
    return value


def _dropout(get, fields: dict) -> float:
    """One dropout probability for every place the family has dropout: p = 0 everywhere or p > 0 everywhere."""
    values = {key: get.probability(key, default) for key, default in fields.items()}
    on = {key for key, p in values.items() if p > 0}
    if on and len(on) != len(values):
        off = ", ".join(sorted(set(values) - on))
        raise ValueError(f"config fields {', '.join(sorted(on))} are > 0 but {off} is 0; memmath models dropout in "
                         "every place the family has it or in none (set them alike)")
    return max(values.values(), default=0.0)  # a family without dropout (ERNIE 4.5) lists none



def _gpt2_from_config(config, get, record, name):
    act = _activation(config, record)
    return replace(gpt2_model(
        n_layers=get("n_layer"), hidden_size=get("n_embd"), n_heads=get("n_head"),
        vocab_size=get("vocab_size"), max_positions=get("n_positions"),
        intermediate_size=get("n_inner", None), tied_embeddings=get.flag("tie_word_embeddings", True), name=name,
    ), arch=record.model_type, hidden_act=act, use_cache=get.flag("use_cache", False),
        dropout_p=_dropout(get, record.dropout_fields))


def _bert_from_config(config, get, record, name):
    # A sequence-classification checkpoint adds a classifier with one output per label.
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ValueError("config field 'architectures' must be a list of class names; "
                         f"got {validate.describe(architectures)}")
    position = config.get("position_embedding_type") or "absolute"
    if position != "absolute":
        raise ValueError(f"config field 'position_embedding_type' is {validate.describe(position)}; memmath models 'absolute' only")
    act = _activation(config, record)
    classifier = any(a.endswith("ForSequenceClassification") for a in architectures)
    labels = len(config["id2label"]) if isinstance(config.get("id2label"), dict) else get("num_labels", 2)
    drops = dict(record.dropout_fields)
    if classifier:  # None falls back to hidden_dropout_prob (BertForSequenceClassification)
        drops["classifier_dropout"] = get.probability("hidden_dropout_prob", drops["hidden_dropout_prob"])
    shape = bert_model(
        n_layers=get("num_hidden_layers"), hidden_size=get("hidden_size"), n_heads=get("num_attention_heads"),
        intermediate_size=get("intermediate_size"), vocab_size=get("vocab_size"),
        max_positions=get("max_position_embeddings"), type_vocab_size=get("type_vocab_size"),
        num_labels=labels if classifier else 0, name=name,
    )
    return replace(shape, arch=record.model_type, hidden_act=act, dropout_p=_dropout(get, drops))


def _decoder_from_config(config, get, record, name):
    """Every rotary decoder (family 'llama') from its config: the fields they share here, the rest by its record."""
    layers = get("num_hidden_layers")
    act = _activation(config, record)
    act = record.activation_aliases.get(act, act)  # GemmaConfig.__post_init__: the legacy 'gelu' is the tanh form
    options = dict(arch=record.model_type, hidden_act=act)
    if record.read_options is not None:
        options.update(record.read_options(config, get))
    if "layer_types" not in options:  # a record that reads its own layout (Llama 4's chunked layers) keeps it
        window, types = _attention_layout(config, get, record, layers)
        options.update(sliding_window=window, layer_types=types)
    options["dropout_p"] = _dropout(get, record.dropout_fields)
    # As stated: save_pretrained writes it (true by default); a config without it is read as false, not as the
    # config classes' true, so that memmath's presets (their fields without it) are the recorded steps' setting.
    options["use_cache"] = get.flag("use_cache", False)
    options["trained_context"] = get.at_most("max_position_embeddings", _TRAINED_CONTEXT_LIMIT)  # the planner's note
    fields = record.fields
    shape = llama_model(
        n_layers=layers, hidden_size=get("hidden_size"), n_heads=get("num_attention_heads"),
        n_kv_heads=get("num_key_value_heads", None) if "num_key_value_heads" in fields else None,
        head_dim=get("head_dim", None) if "head_dim" in fields else None,  # GPT-NeoX: h / a
        # a record that reads per-block widths (Gemma 3n's intermediate_size list) gives the shape's own in its options
        intermediate_size=options.get("intermediate_size") or get(record.intermediate_field), vocab_size=get("vocab_size"),
        tied_embeddings=get.flag("tie_word_embeddings", False),
        attention_bias=get.flag("attention_bias", False) if "attention_bias" in fields else False,
        mlp_bias=get.flag("mlp_bias", False) if "mlp_bias" in fields else False, name=name,
    )
    return replace(shape, **options)


def _attention_layout(config, get, record, layers):
    """(sliding_window, layer_types) as transformers' config classes derive them."""
    if "sliding_window" not in record.fields:
        return None, None
    # An explicit null turns sliding off; a missing field takes the config class's default (the record's defaults).
    if record.sliding_needs_flag and not get.flag("use_sliding_window", False):
        window = None  # Qwen2Config.__post_init__: sliding_window only with use_sliding_window (Qwen2-MoE saves 0)
    else:
        window = None if config.get("sliding_window", 0) is None else get("sliding_window", None)
    given = config.get("layer_types")
    if given is not None:
        if not isinstance(given, list) or len(given) != layers or any(t not in LAYER_TYPES for t in given):
            raise ValueError(f"config field 'layer_types' must list one of {', '.join(LAYER_TYPES)} per block "
                             f"({layers}); got {validate.describe(given)}")
        if window is None:
            return None, None if "sliding_attention" not in given else _no_window(given)
        return window, tuple(given)
    if window is None:
        return None, None
    if record.derive_layer_types is not None:
        return window, record.derive_layer_types(get, layers)
    # mistral, mixtral, phi3, qwen3_moe: no layer_types, so transformers' cache slides every layer
    return window, ("sliding_attention",) * layers


def _no_window(types):
    raise ValueError("config field 'layer_types' names sliding_attention blocks but sliding_window is null")


MAX_NAME = 200  # characters of _name_or_path kept as the model's label


def _config_name(config: dict, model_type: str) -> str:
    """The label from _name_or_path: a string (transformers writes one), cut to MAX_NAME characters."""
    name = config.get("_name_or_path")
    if name is None or (isinstance(name, str) and not name):  # never `name or ...`: an array has no truth value
        name = model_type
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
# A rotary decoder's max_position_embeddings is only the context it was trained for (no tensor: ModelShape's
# trained_context), which may pass MAX_SEQ: Llama-4-Scout-17B-16E's config.json says 10,485,760.
_TRAINED_CONTEXT_LIMIT = 2**31


class _ConfigReader:
    _MISSING = object()

    def __init__(self, config: dict, defaults: dict | None = None):
        self.config = config
        self.defaults = defaults or {}  # the config class's own defaults, where they differ by family

    def __call__(self, key, default=_MISSING, low=1):
        if key not in self.config or self.config[key] is None:
            default = self.defaults.get(key, default)
            if default is self._MISSING:
                raise ValueError(f"config is missing the field {key!r}")
            return default
        value = self.config[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"config field {key!r} must be a whole number; got {validate.describe(value)}")
        limit_low, high = _CONFIG_LIMITS.get(key, (low, validate.MAX_DIM))
        return validate.count(f"config field {key!r}", value, low=min(low, limit_low), high=high)

    def at_most(self, key, high):
        """An optional whole number from 1 to high (None when absent)."""
        value = self.config.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"config field {key!r} must be a whole number; got {validate.describe(value)}")
        return validate.count(f"config field {key!r}", value, high=high)

    def probability(self, key, default):
        value = self.config.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"config field {key!r} must be a probability in [0, 1); got {validate.describe(value)}")
        return float(value)

    def flag(self, key, default):
        default = self.defaults.get(key, default)
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
        path, text = read_config_file(config)
        return parse_json_config(text, f"config file {validate.describe(path.name)}")
    raise TypeError(f"config must be a dict, JSON text or a path to config.json; got {type(config).__name__}")


def read_config_file(config) -> tuple[Path, str]:
    """The text of a regular .json file (config.json inside a folder), at most MAX_CONFIG_BYTES.

    One rule for symbolic links (hf_cache.py says why): inside the local Hugging Face cache a link is
    followed while its target stays inside the cache root (huggingface_hub's snapshots/<commit>/config.json
    links into blobs/); anywhere else a link given as the file or its folder is refused rather than
    followed. Nothing but the file's name is quoted back.
    """
    hint = "(give a dict, JSON text, a config.json path or the folder that holds it)"
    folder = None
    try:
        path = Path(config)
        root = cache_root_holding(path)
        if root is None:
            real = path
            if path.is_dir() and not path.is_symlink():
                folder, path = path, path / "config.json"
                real = path
        else:
            real = follow_inside(path, root)
            if real.is_dir():
                folder, path = path, path / "config.json"
                real = follow_inside(path, root)
        info = os.lstat(real)
    except LinkOutsideCache:
        raise
    except (OSError, ValueError) as error:  # missing, a name too long, a NUL byte, no permission
        if folder is not None and isinstance(error, FileNotFoundError):
            raise ValueError(f"the folder {validate.describe(str(folder))} holds no config.json {hint}") from None
        raise ValueError(f"config path {validate.describe(str(config))} cannot be read "
                         f"({error.__class__.__name__}) {hint}") from None
    where = f"config path {validate.describe(str(path))}"
    if stat.S_ISLNK(info.st_mode):
        raise ValueError(f"{where} is a symbolic link, which is not followed outside the Hugging Face cache; "
                         f"give the file itself {hint}")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{where} is not a regular file {hint}")
    if not path.name.endswith(".json"):
        raise ValueError(f"{where} must name a .json file such as config.json {hint}")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{where} holds {info.st_size:,} bytes; a config.json is a few kB and at most "
                         f"{MAX_CONFIG_BYTES:,} bytes (4 MiB) are read")
    try:
        data = read_bounded(real, MAX_CONFIG_BYTES)
    except NotARegularFile:  # swapped since lstat
        raise ValueError(f"{where} is not a regular file {hint}") from None
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

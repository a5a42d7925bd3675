"""Where a model comes from: a preset name, a parameter count, a config.json, a folder holding one, or a Hub
repo id in the local Hugging Face cache (never the network). Run's model and the command line's MODEL argument
read this; it sits above the records (presets, the config reader, the cache) and below everything that asks
about a run.

Every problem with a MODEL text is a FieldError on the field "model", with a message that says where memmath
looked (the cache's layout and its rule for symbolic links: memmath/hf_cache.py).
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
import os
import re
from pathlib import Path

from . import validate
from .arrays import is_bool, is_ndarray
from .config_reader import from_hf_config, parse_json_config, read_config_file
from .hf_cache import cached_repos, find_in_hf_cache, hf_cache_dir
from .models import ModelShape, uniform_model
from .presets import PRESET_SOURCES, PRESETS

__all__ = ["resolve_model", "is_plain_count", "resolve_source", "find_in_hf_cache", "hf_cache_dir", "cached_repos"]

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?(@[A-Za-z0-9._/-]+)?$")


def resolve_model(model) -> ModelShape:
    """A ModelShape from a shape, a preset name, or a plain parameter count (one layer, no widths)."""
    if isinstance(model, ModelShape):
        return model
    if isinstance(model, str):
        key = model.strip().lower()
        if key in PRESETS:
            return PRESETS[key]
        raise ValueError(f"model {validate.describe(model)} is not a preset; presets: {', '.join(PRESETS)} (or pass a parameter count)")
    if is_bool(model):
        raise ValueError("model must be a ModelShape, a preset name or a parameter count; got a boolean")
    if isinstance(model, (numbers.Real, list, tuple)) or is_ndarray(model):
        n = validate.count("model (parameter count)", model, high=validate.MAX_PARAMS)
        return dataclasses.replace(uniform_model(n, 1, name="plain parameter count"), from_count=True)
    raise TypeError(f"model must be a ModelShape, a preset name or a parameter count; got {type(model).__name__}")


def is_plain_count(shape: ModelShape) -> bool:
    """True for a model given only as a parameter count (no layers to freeze, no widths)."""
    return shape.from_count


def _did_you_mean(text: str, presets) -> str:
    """ "did you mean X" for a near-miss preset or cached repo id (difflib, case-insensitively), else ""."""
    names = {name.lower(): name for name in (*presets, *cached_repos()) if name != text}  # never the text itself
    close = difflib.get_close_matches(text.lower(), list(names), n=3, cutoff=0.7)
    return f"did you mean {' or '.join(names[match] for match in close)}?" if close else ""


def resolve_source(text: str):
    """(ModelShape, where it came from as a dict: given, source, config_path, from) for a MODEL text."""
    key = text.strip().lower()
    if key in PRESETS:
        return PRESETS[key], {"given": text, "source": "preset", "config_path": None,
                              "from": PRESET_SOURCES.get(key, "memmath's presets")}
    path = Path(text).expanduser()
    try:
        os.lstat(path)  # anything there (a link, a FIFO, a device) is judged by the one reader, not called missing
        exists = True
    except (OSError, ValueError):
        exists = False
    if exists:
        return _read_config(path, text, None)
    looks_like_path = text.endswith(".json") or text.startswith((".", "/", "~")) or os.sep + os.sep in text
    if not looks_like_path and _REPO_ID.match(text.strip()):
        repo = text.strip()
        config, folder = find_in_hf_cache(repo)
        if config is not None:
            shape, info = _read_config(config, text, "hugging face cache")
            return shape.with_changes(name=repo.partition("@")[0]), info
        cache, chosen = hf_cache_dir()
        name, _, revision = repo.partition("@")
        # a preset takes no revision: llama-2-7b@main means llama-2-7b
        guess = f"did you mean {PRESETS[name.lower()].name or name.lower()}?" if name.lower() in PRESETS else \
            _did_you_mean(name, PRESETS)
        if "/" not in name:  # no Hub id (owner/name): no download to advise
            raise validate.FieldError("model", (f"{guess} " if guess else "") + f"{text!r} is not a preset (memmath "
                                      "models lists them), a config.json, a folder holding one, or a Hub id "
                                      "(owner/name) in the local Hugging Face cache")
        # huggingface_hub 1.0 removed `huggingface-cli`; its command line is `hf` (`hf download --help`).
        command = f"hf download {name} config.json" + (f" --revision {revision}" if revision else "")
        raise validate.FieldError("model", (f"{guess} " if guess else "") + f"{text!r} is not in the local Hugging "
                                  f"Face cache (looked in {folder} for snapshots/*/config.json; cache from {chosen}). "
                                  f"memmath never uses the network: get the file with `{command}`, or pass a "
                                  "config.json path")
    guess = _did_you_mean(text.strip(), PRESETS)
    raise validate.FieldError("model", (f"{guess} " if guess else "") + f"no such file or folder: {text!r} (give a "
                              "preset, a config.json, a folder holding one, or a Hub repo id in the local cache)")


def _read_config(path: Path, given: str, source: str | None):
    """Read a config through models' one reader (its rule for links, FIFOs, devices and sizes); source None
    means a path the user gave: "config folder" when the reader looked inside it, else "config file"."""
    try:
        config_path, text = read_config_file(path)
    except (ValueError, TypeError) as error:
        raise validate.FieldError("model", str(error)) from None
    try:
        shape = from_hf_config(parse_json_config(text, f"config file {validate.describe(config_path.name)}"))
    except (ValueError, TypeError) as error:
        raise validate.FieldError("model", f"{config_path}: {error}") from None
    if source is None:
        source = "config file" if config_path == path else "config folder"
    return shape, {"given": given, "source": source, "config_path": str(config_path), "from": str(config_path)}

"""Where a model comes from: a preset name, a config.json, a folder holding one, or a Hub repo id in
the local Hugging Face cache (never the network). The command line's MODEL argument reads this.

Every problem is a FieldError on the field "model", with a message that says where memmath looked.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from . import validate

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?(@[A-Za-z0-9._/-]+)?$")


def hf_cache_dir() -> tuple[Path, str]:
    """The Hugging Face hub cache folder, and which setting chose it (huggingface_hub's own order)."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser(), f"${variable}"
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub", "$HF_HOME/hub"
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub", "$XDG_CACHE_HOME/huggingface/hub"
    return Path.home() / ".cache" / "huggingface" / "hub", "the default cache"


def find_in_hf_cache(repo_id: str) -> tuple[Path | None, Path]:
    """(config.json of the cached snapshot or None, the repo folder looked in), without the network.

    The layout huggingface_hub writes: models--owner--name/refs/<revision> holds a commit hash and
    snapshots/<hash>/config.json the file. An `@revision` tail picks refs/<revision> or a snapshot
    by its hash; otherwise refs/main, else the newest snapshot that holds a config.json.
    """
    name, _, revision = repo_id.partition("@")
    cache, _ = hf_cache_dir()
    folder = cache / ("models--" + name.replace("/", "--"))
    snapshots = folder / "snapshots"
    revision = revision or "main"
    ref = folder / "refs" / revision
    try:
        commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
        candidate = snapshots / commit / "config.json"
        if commit and "/" not in commit and candidate.is_file():
            return candidate, folder
        if revision == "main" and snapshots.is_dir():
            found = sorted((p for p in snapshots.glob("*/config.json") if p.is_file()),
                           key=lambda p: p.stat().st_mtime, reverse=True)
            if found:
                return found[0], folder
    except OSError:
        pass
    return None, folder


def resolve_source(text: str):
    """(ModelShape, where it came from as a dict: given, source, config_path, from) for a MODEL text."""
    from .presets import PRESET_SOURCES, PRESETS

    key = text.strip().lower()
    if key in PRESETS:
        return PRESETS[key], {"given": text, "source": "preset", "config_path": None,
                              "from": PRESET_SOURCES.get(key, "memmath's presets")}
    path = Path(text).expanduser()
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except (OSError, ValueError):
        is_dir = is_file = False
    if is_dir:
        config = path / "config.json"
        if not config.is_file():
            raise validate.FieldError("model", f"the folder {str(path)!r} holds no config.json")
        return _read_config(config, text, "config folder")
    if is_file:
        return _read_config(path, text, "config file")
    looks_like_path = text.endswith(".json") or text.startswith((".", "/", "~")) or os.sep + os.sep in text
    if not looks_like_path and _REPO_ID.match(text.strip()):
        repo = text.strip()
        config, folder = find_in_hf_cache(repo)
        if config is not None:
            shape, info = _read_config(config, text, "hugging face cache")
            return shape.with_changes(name=repo.partition("@")[0]), info
        cache, chosen = hf_cache_dir()
        raise validate.FieldError("model", f"{text!r} is not a preset, a file or a folder, and not in the local "
                                  f"Hugging Face cache (looked for {folder}/snapshots/*/config.json; cache from "
                                  f"{chosen}). memmath never uses the network: get the file with `huggingface-cli "
                                  f"download {repo.partition('@')[0]} config.json` (or `hf download`), or pass a "
                                  "config.json path. Presets: " + ", ".join(PRESETS))
    raise validate.FieldError("model", f"no such file or folder: {text!r} (give a preset, a config.json, a folder "
                              "holding one, or a Hub repo id in the local cache)")


def _read_config(path: Path, given: str, source: str):
    from .models import from_hf_config

    try:
        shape = from_hf_config(path)
    except (ValueError, TypeError) as error:
        raise validate.FieldError("model", f"{path}: {error}") from None
    return shape, {"given": given, "source": source, "config_path": str(path), "from": str(path)}

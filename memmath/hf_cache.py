"""The local Hugging Face cache, read as huggingface_hub lays it out, never the network.

(https://huggingface.co/docs/hub/local-cache and huggingface_hub's file_download.py): models--owner--name/blobs/<hash>
holds each file, snapshots/<commit>/config.json is a symbolic link to ../../blobs/<hash> (`_create_symlink`, relative
where it can be, else absolute), and refs/<revision> holds the commit hash alone
(`_cache_commit_hash_for_specific_revision`). One rule for symbolic links, in `follow_inside`, read by
config_reader.read_config_file for the API and the command line alike: inside the cache root a link is followed
while its target stays inside the root; elsewhere a link given as the config or its folder is refused.

Every problem with the cache is a FieldError on the field "model", with a message that says where memmath looked.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from . import validate
from .files import NotARegularFile, read_bounded

# huggingface_hub writes a ref as the commit hash alone, 40 lowercase hex digits (file_download.py:
# REGEX_COMMIT_HASH = r"[0-9a-f]{40}"); a shorter hex string (a hand-made cache) is read too, anything else
# is refused. A ref is read through at most MAX_REF_BYTES bytes, never whole.
_COMMIT = re.compile(r"[0-9a-f]{1,40}")
MAX_REF_BYTES = 64
MAX_CACHED_REPOS = 10_000  # how many models--* folders the "did you mean" lists (a cache holds tens)


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


class LinkOutsideCache(ValueError):
    """A path in the Hugging Face cache whose links lead outside the cache root."""


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def cache_root_holding(path) -> Path | None:
    """The Hugging Face cache root when `path` (as written, links not followed) lies inside it, else None."""
    cache, _ = hf_cache_dir()
    try:
        where = os.path.abspath(path)
        roots = {os.path.abspath(cache), os.path.realpath(cache)}
    except (OSError, ValueError):
        return None
    return cache if any(_inside(where, root) for root in roots) else None


def _named(relative: Path) -> str:
    """A path inside the cache as messages name it, unquoted and in parts that a shortened message keeps
    whole: "snapshots/<commit>/config.json of models--owner--name"."""
    parts = relative.parts
    return "/".join(parts[1:]) + f" of {parts[0]}" if len(parts) > 1 else (parts[0] if parts else "the root")


def follow_inside(path, root) -> Path:
    """The real location of `path`, following symbolic links only while each stays inside `root`.

    Walks `path` one part at a time from the cache root (its own real location, wherever a user put
    it); the first part whose real location leaves the root is refused by name (LinkOutsideCache,
    a ValueError).
    A part that does not exist is kept as written (the caller then finds nothing there).
    """
    real_root = os.path.realpath(root)
    where = os.path.abspath(path)
    for base in (os.path.abspath(root), real_root):
        if _inside(where, base):
            parts = Path(os.path.relpath(where, base)).parts if where != base else ()
            break
    else:
        raise ValueError(f"{validate.describe(str(path))} is not inside the Hugging Face cache {str(root)!r}")
    current, shown = real_root, Path(root)
    for part in parts:
        shown = shown / part
        current = os.path.realpath(os.path.join(current, part))
        if not _inside(current, real_root):
            raise LinkOutsideCache(f"{_named(shown.relative_to(root))} in the Hugging Face cache {root} is a "
                                   "symbolic link leading outside the cache; links are followed only while they "
                                   "stay inside it")
    return Path(current)


def _cache_error(message: str) -> validate.FieldError:
    return validate.FieldError("model", message)


def _read_ref(folder: Path, revision: str, cache: Path) -> str | None:
    """The commit hash refs/<revision> holds, or None where there is no such ref (the revision is then
    taken as a commit). At most MAX_REF_BYTES are read; a larger file or one that is not a hash is refused."""
    ref = folder / "refs" / revision
    where = _named(Path(folder.name, "refs", revision))
    try:
        real = follow_inside(ref, cache)
    except ValueError as error:
        raise _cache_error(str(error)) from None
    try:
        info = os.lstat(real)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise _cache_error(f"{where} in the Hugging Face cache cannot be read ({error.__class__.__name__})") from None
    if stat.S_ISDIR(info.st_mode):  # refs/refs/pr/1 makes refs/refs a folder: not a ref itself
        return None
    if not stat.S_ISREG(info.st_mode):
        raise _cache_error(f"{where} in the Hugging Face cache is not a regular file (a ref is a file holding a "
                           "commit hash)")
    too_big = (f"{where} in the Hugging Face cache holds {{}} bytes; a ref holds a 40-character commit hash, "
               f"and at most {MAX_REF_BYTES} bytes of one are read")
    if info.st_size > MAX_REF_BYTES:
        raise _cache_error(too_big.format(f"{info.st_size:,}"))
    try:
        data = read_bounded(real, MAX_REF_BYTES)
    except NotARegularFile:  # swapped since lstat
        raise _cache_error(f"{where} in the Hugging Face cache is not a regular file") from None
    except OSError as error:
        raise _cache_error(f"{where} in the Hugging Face cache cannot be read ({error.__class__.__name__})") from None
    if len(data) > MAX_REF_BYTES:
        raise _cache_error(too_big.format(f"more than {MAX_REF_BYTES}"))
    commit = data.decode("ascii", errors="replace").strip()
    if not _COMMIT.fullmatch(commit):
        raise _cache_error(f"{where} in the Hugging Face cache does not hold a commit hash (40 hex digits, as "
                           "huggingface_hub writes it); fetch the ref again with `hf download`")
    return commit


def find_in_hf_cache(repo_id: str) -> tuple[Path | None, Path]:
    """(config.json of the cached snapshot or None, the repo folder looked in), without the network.

    As huggingface_hub's try_to_load_from_cache (file_download.py) reads it: an `@revision` tail (else
    "main") names refs/<revision>, which holds a commit hash; without such a ref the revision is taken as
    the commit; snapshots/<commit>/config.json is the file. Without `@revision` and without refs/main,
    the newest snapshot that holds a config.json. A link that leaves the cache root (the repo folder, a
    snapshot folder, the config's link into blobs/, a ref) is refused by name: FieldError on "model".
    """
    name, _, revision = repo_id.partition("@")
    cache, _ = hf_cache_dir()
    folder = cache / ("models--" + name.replace("/", "--"))
    revision = revision or "main"
    if any(part in ("", ".", "..") for part in revision.split("/")):
        raise _cache_error(f"revision {validate.describe(revision)} in {validate.describe(repo_id)} is not a "
                           "branch, tag or commit name (a name may not be empty or '.' or '..')")

    def real(path: Path) -> Path:
        try:
            return follow_inside(path, cache)
        except ValueError as error:
            raise _cache_error(str(error)) from None

    if not real(folder).is_dir():
        return None, folder
    commit = _read_ref(folder, revision, cache)
    has_ref = commit is not None
    commit = commit or revision
    candidate = folder / "snapshots" / commit / "config.json"
    try:
        if real(candidate).is_file():
            return candidate, folder
        if (real(folder / ".no_exist" / commit / "config.json")).is_file():  # huggingface_hub's _CACHED_NO_EXIST
            record = _named(Path(folder.name, ".no_exist", commit, "config.json"))
            raise _cache_error(f"huggingface_hub recorded that {name} has no config.json at revision "
                               f"{validate.describe(revision)} ({record}): the repo is not a transformers model "
                               "there; give its config.json as a path")
        snapshots = folder / "snapshots"
        if revision == "main" and not has_ref and real(snapshots).is_dir():
            found = [path for path in (snapshots / entry / "config.json" for entry in sorted(os.listdir(snapshots)))
                     if real(path).is_file()]
            if found:
                return max(found, key=lambda path: real(path).stat().st_mtime), folder
    except OSError:
        pass
    return None, folder


def cached_repos(limit: int = MAX_CACHED_REPOS) -> list[str]:
    """The model repo ids present in the local Hugging Face cache (models--owner--name folders; the Hub
    forbids "--" inside a repo id, huggingface_hub's utils/_validators.py, so the name maps back)."""
    cache, _ = hf_cache_dir()
    repos = []
    try:
        with os.scandir(cache) as entries:
            for entry in entries:
                if entry.name.startswith("models--") and len(entry.name) > len("models--"):
                    repos.append(entry.name[len("models--"):].replace("--", "/"))
                    if len(repos) >= limit:
                        break
    except (OSError, ValueError):
        return []
    return sorted(repos)

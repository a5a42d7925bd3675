"""The local Hugging Face cache as huggingface_hub lays it out, with real symbolic links (memmath/sources.py).

The layout (https://huggingface.co/docs/hub/local-cache; huggingface_hub's file_download.py):
models--owner--name/blobs/<git blob sha1> holds config.json's bytes, snapshots/<commit>/config.json is a
symbolic link to ../../blobs/<sha1> (`_create_symlink`), refs/<revision> holds the 40-hex commit alone
(`_cache_commit_hash_for_specific_revision`), .no_exist/<commit>/config.json records a file the repo lacks.
Each cache here is built by hand as huggingface_hub writes it, and where huggingface_hub is installed it
reads the same cache as its own (try_to_load_from_cache, scan_cache_dir, hf_hub_download offline), and
builds one with its own functions. Every refusal is a FieldError on "model" through the API and one stderr
line with exit 2 on the command line.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import memmath as mm
from memmath import sources
from memmath.validate import FieldError

REPO = Path(__file__).resolve().parent.parent
# openai-community/gpt2's config.json (the fields GPT2Config reads); GPT2LMHeadModel has 124,439,808
# parameters (the figure Hugging Face and the GPT-2 paper's "124M" name; wte 50257x768 + wpe 1024x768 +
# 12 blocks x 7,087,872 + ln_f 1,536, the LM head tied).
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
        "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-05, "_name_or_path": "openai-community/gpt2"}
GPT2_PARAMS = 124_439_808
# The same with 2 blocks: 39,383,808 embeddings + 2 x 7,087,872 + 1,536 = 53,561,088 (by hand, as above).
GPT2_2_LAYERS = dict(GPT2, n_layer=2)
GPT2_2_LAYERS_PARAMS = 53_561_088
REPO_ID = "openai-community/gpt2"
COMMIT = "607a30d783dfa663caf39e06633721c8d4cfcd7e"  # 40 hex digits, the form of a Hub commit
COMMIT_2 = "11c5a3d5811f50298f278a704980280950aedb10"


def git_blob_sha1(data: bytes) -> str:
    """The name huggingface_hub gives a non-LFS file's blob: its etag, git's blob hash."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def add_snapshot(cache: Path, repo_id: str, commit: str, config: dict, ref: str | None = "main") -> Path:
    """One snapshot written as huggingface_hub writes it; returns snapshots/<commit>/config.json (a link)."""
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    data = json.dumps(config, indent=2).encode()
    blob = folder / "blobs" / git_blob_sha1(data)
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    pointer = folder / "snapshots" / commit / "config.json"
    pointer.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.join("..", "..", "blobs", blob.name), pointer)
    if ref is not None:
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / ref).write_text(commit)  # the hash alone, no newline, as huggingface_hub writes it
    return pointer


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty cache chosen by $HF_HUB_CACHE, with nothing else in the environment choosing one."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def run(*args, cache: Path):
    environment = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "memmath", *args], capture_output=True, text=True,
                          env=environment, cwd=REPO, timeout=120)


def refused(done) -> str:
    """The one stderr line of a refusal on the command line (exit 2, nothing on stdout, no traceback)."""
    assert done.returncode == 2, (done.returncode, done.stdout[-1000:], done.stderr)
    assert done.stdout == "" and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "MODEL" in lines[0], done.stderr
    return lines[0]


def refused_by_api(text: str, *expected: str) -> str:
    with pytest.raises(FieldError) as caught:
        sources.resolve_source(text)
    assert caught.value.field == "model"
    for part in expected:
        assert part in str(caught.value), str(caught.value)
    return str(caught.value)


# ---- the layout huggingface_hub writes and reads ----------------------------------------------------------
def test_huggingface_hub_reads_the_hand_built_cache_as_its_own(hub, require):
    huggingface_hub = require("huggingface_hub")
    pointer = add_snapshot(hub, REPO_ID, COMMIT, GPT2)
    assert huggingface_hub.try_to_load_from_cache(REPO_ID, "config.json", cache_dir=hub) == str(pointer)
    info = huggingface_hub.scan_cache_dir(hub)
    assert not info.warnings, info.warnings
    (repo,) = info.repos
    assert repo.repo_id == REPO_ID and repo.repo_type == "model" and set(repo.refs) == {"main"}
    (revision,) = repo.revisions
    assert revision.commit_hash == COMMIT and {f.file_name for f in revision.files} == {"config.json"}
    offline = huggingface_hub.hf_hub_download(REPO_ID, "config.json", cache_dir=hub, local_files_only=True)
    assert offline == str(pointer)
    # memmath reads the same file through the same link.
    shape, info = sources.resolve_source(REPO_ID)
    assert shape.n_params == GPT2_PARAMS and shape.name == REPO_ID
    assert info["source"] == "hugging face cache" and info["config_path"] == str(pointer)


def test_a_cache_built_by_huggingface_hubs_own_functions_is_read(hub, require):
    require("huggingface_hub")
    from huggingface_hub import file_download

    needed = ("repo_folder_name", "_get_pointer_path", "_create_symlink", "_cache_commit_hash_for_specific_revision")
    for name in needed:
        if not hasattr(file_download, name):
            pytest.skip(f"huggingface_hub.file_download has no {name} in this version")
    storage = hub / file_download.repo_folder_name(repo_id=REPO_ID, repo_type="model")
    data = json.dumps(GPT2).encode()
    blob = storage / "blobs" / git_blob_sha1(data)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(data)
    pointer = Path(file_download._get_pointer_path(str(storage), COMMIT, "config.json"))
    pointer.parent.mkdir(parents=True)
    file_download._create_symlink(str(blob), str(pointer), new_blob=False)
    file_download._cache_commit_hash_for_specific_revision(str(storage), "main", COMMIT)
    # The link is the one add_snapshot writes by hand: relative, into blobs/.
    assert pointer.is_symlink() and os.readlink(pointer) == os.path.join("..", "..", "blobs", blob.name)
    assert (storage / "refs" / "main").read_text() == COMMIT
    assert sources.find_in_hf_cache(REPO_ID) == (pointer, storage)
    assert sources.resolve_source(REPO_ID)[0].n_params == GPT2_PARAMS


def test_a_no_exist_record_is_named_as_huggingface_hub_records_it(hub, require):
    huggingface_hub = require("huggingface_hub")
    folder = hub / ("models--" + REPO_ID.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)
    (folder / "snapshots" / COMMIT).mkdir(parents=True)
    (folder / ".no_exist" / COMMIT).mkdir(parents=True)
    (folder / ".no_exist" / COMMIT / "config.json").touch()
    cached = huggingface_hub.try_to_load_from_cache(REPO_ID, "config.json", cache_dir=hub)
    assert cached is huggingface_hub.file_download._CACHED_NO_EXIST
    refused_by_api(REPO_ID, "has no config.json", ".no_exist")


# ---- links inside the cache root are followed, links leaving it are refused by name ------------------------
def test_the_snapshot_link_into_blobs_is_followed_by_the_api_and_the_command_line(hub):
    pointer = add_snapshot(hub, REPO_ID, COMMIT, GPT2)
    assert pointer.is_symlink()
    assert sources.resolve_source(REPO_ID)[0].n_params == GPT2_PARAMS
    # The snapshot's path given itself, and its folder: inside the cache, the same rule.
    assert mm.from_hf_config(pointer).n_params == GPT2_PARAMS
    assert mm.from_hf_config(pointer.parent).n_params == GPT2_PARAMS
    assert sources.resolve_source(str(pointer.parent))[1]["source"] == "config folder"
    for model in (REPO_ID, str(pointer)):
        done = run("train", model, "--seq", "64", "--json", cache=hub)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        report = json.loads(done.stdout)
        assert report["model"]["total_params"] == GPT2_PARAMS
        assert report["model"]["config_path"] == str(pointer)


def test_links_are_followed_inside_a_cache_whose_root_is_itself_a_link(tmp_path, hub, monkeypatch):
    add_snapshot(hub, REPO_ID, COMMIT, GPT2)
    elsewhere = tmp_path / "moved-disk-link"
    elsewhere.symlink_to(hub, target_is_directory=True)  # a cache moved to another disk, reached by a link
    monkeypatch.setenv("HF_HUB_CACHE", str(elsewhere))
    assert sources.resolve_source(REPO_ID)[0].n_params == GPT2_PARAMS


def test_a_config_link_leaving_the_cache_is_refused_by_name(tmp_path, hub):
    outside = tmp_path / "outside" / "config.json"
    outside.parent.mkdir()
    outside.write_text(json.dumps(GPT2))
    pointer = add_snapshot(hub, REPO_ID, COMMIT, GPT2)
    name = f"snapshots/{COMMIT}/config.json of models--openai-community--gpt2"
    for target in (str(outside), os.path.relpath(outside, pointer.parent)):  # absolute, and ../../.. upwards
        pointer.unlink()
        os.symlink(target, pointer)
        refused_by_api(REPO_ID, name, "outside the cache")
        with pytest.raises(ValueError, match="outside the cache"):
            mm.from_hf_config(pointer)
        refused_by_api(str(pointer), name, "outside the cache")
    assert name in refused(run("train", REPO_ID, cache=hub)) and "outside the cache" in refused(
        run("infer", str(pointer), cache=hub))
    # A blob that is itself a link out: the second hop leaves the root, the same refusal.
    blob = next((hub / "models--openai-community--gpt2" / "blobs").iterdir())
    pointer.unlink()
    os.symlink(os.path.join("..", "..", "blobs", blob.name), pointer)
    blob.unlink()
    blob.symlink_to(outside)
    refused_by_api(REPO_ID, name, "outside the cache")


def test_a_snapshot_folder_or_repo_folder_linked_outside_the_cache_is_refused(tmp_path, hub):
    plain = tmp_path / "outside" / COMMIT
    plain.mkdir(parents=True)
    (plain / "config.json").write_text(json.dumps(GPT2))  # a regular file, reached through a folder link
    add_snapshot(hub, REPO_ID, COMMIT, GPT2)
    folder = hub / "models--openai-community--gpt2"
    snapshot = folder / "snapshots" / COMMIT
    (snapshot / "config.json").unlink()
    snapshot.rmdir()
    snapshot.symlink_to(plain, target_is_directory=True)
    name = f"snapshots/{COMMIT} of models--openai-community--gpt2 "
    refused_by_api(REPO_ID, name, "outside the cache")
    refused_by_api(f"{REPO_ID}@{COMMIT}", name)
    refused_by_api(str(snapshot), name)  # the snapshot folder given as a path: the same rule
    assert name in refused(run("train", REPO_ID, cache=hub))
    assert name in refused(run("train", str(snapshot), cache=hub))
    # Without refs/main memmath looks at every snapshot: the linked one is still refused, not skipped.
    (folder / "refs" / "main").unlink()
    refused_by_api(REPO_ID, name)
    # The whole repo folder linked outside the cache.
    moved = tmp_path / "moved-repo"
    folder.rename(moved)
    folder.symlink_to(moved, target_is_directory=True)
    refused_by_api(REPO_ID, "models--openai-community--gpt2 in the Hugging Face cache", "outside the cache")


def test_a_snapshot_folder_linked_inside_the_cache_is_followed(hub):
    pointer = add_snapshot(hub, REPO_ID, COMMIT, GPT2, ref=None)
    folder = hub / "models--openai-community--gpt2"
    (folder / "snapshots" / COMMIT_2).symlink_to(pointer.parent, target_is_directory=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT_2)
    assert sources.resolve_source(REPO_ID)[0].n_params == GPT2_PARAMS


# ---- refs/<revision> and repo@revision -------------------------------------------------------------------
def test_revision_by_ref_name_and_by_commit(hub):
    add_snapshot(hub, REPO_ID, COMMIT, GPT2)
    tagged = add_snapshot(hub, REPO_ID, COMMIT_2, GPT2_2_LAYERS, ref="v2")
    assert sources.resolve_source(REPO_ID)[0].n_params == GPT2_PARAMS  # refs/main
    for revision in ("v2", COMMIT_2):
        shape, info = sources.resolve_source(f"{REPO_ID}@{revision}")
        assert shape.n_params == GPT2_2_LAYERS_PARAMS and shape.name == REPO_ID
        assert info["config_path"] == str(tagged)
    assert sources.resolve_source(f"{REPO_ID}@{COMMIT}")[0].n_params == GPT2_PARAMS
    # A pull-request ref as huggingface_hub stores it: refs/refs/pr/1.
    (hub / "models--openai-community--gpt2" / "refs" / "refs" / "pr").mkdir(parents=True)
    (hub / "models--openai-community--gpt2" / "refs" / "refs" / "pr" / "1").write_text(COMMIT_2)
    assert sources.resolve_source(f"{REPO_ID}@refs/pr/1")[0].n_params == GPT2_2_LAYERS_PARAMS
    done = run("train", f"{REPO_ID}@v2", "--seq", "64", "--json", cache=hub)
    assert done.returncode == 0 and json.loads(done.stdout)["model"]["total_params"] == GPT2_2_LAYERS_PARAMS
    # An unknown revision: not found, with the revision in the download command; '..' is no revision.
    refused_by_api(f"{REPO_ID}@v3", f"`hf download {REPO_ID} config.json --revision v3`")
    refused_by_api(f"{REPO_ID}@../../x", "revision", "'..'")


def test_a_huge_ref_is_refused_by_name_unread(hub):
    add_snapshot(hub, REPO_ID, COMMIT, GPT2)
    ref = hub / "models--openai-community--gpt2" / "refs" / "main"
    with open(ref, "r+b") as file:
        file.truncate(2**40)  # a sparse 1 TiB file: read whole, it is a MemoryError
    started = time.perf_counter()
    message = refused_by_api(REPO_ID, "refs/main of models--openai-community--gpt2", "1,099,511,627,776 bytes")
    assert "40-character commit hash" in message and time.perf_counter() - started < 5
    assert "refs/main" in refused(run("train", REPO_ID, cache=hub))
    ref.write_text("a" * 100_000)  # hex, but no commit hash is that long
    refused_by_api(REPO_ID, "refs/main", "100,000 bytes")


@pytest.mark.parametrize("content", ["not-a-commit", "v1.0\n", COMMIT.upper(), COMMIT + "0", "\x00" * 40])
def test_a_ref_that_is_not_a_commit_hash_is_refused_by_name(hub, content):
    add_snapshot(hub, REPO_ID, COMMIT, GPT2)
    (hub / "models--openai-community--gpt2" / "refs" / "main").write_text(content)
    refused_by_api(REPO_ID, "refs/main of models--openai-community--gpt2", "does not hold a commit hash")


def test_a_ref_that_is_a_fifo_or_a_link_outside_is_refused(tmp_path, hub):
    add_snapshot(hub, REPO_ID, COMMIT, GPT2)
    ref = hub / "models--openai-community--gpt2" / "refs" / "main"
    ref.unlink()
    os.mkfifo(ref)  # opened for reading it would block until a writer came
    refused_by_api(REPO_ID, "refs/main", "not a regular file")
    ref.unlink()
    (tmp_path / "elsewhere").write_text(COMMIT)
    ref.symlink_to(tmp_path / "elsewhere")
    refused_by_api(REPO_ID, "refs/main of models--openai-community--gpt2", "outside the cache")


# ---- messages: the download command, did you mean --------------------------------------------------------
def test_the_download_hint_names_todays_hf_command(hub):
    message = refused_by_api("meta-llama/Llama-3.1-8B", "`hf download meta-llama/Llama-3.1-8B config.json`",
                             str(hub / "models--meta-llama--Llama-3.1-8B"), "never uses the network")
    assert "huggingface-cli" not in message and "did you mean" not in message
    line = refused(run("train", "meta-llama/Llama-3.1-8B", cache=hub))
    assert "`hf download meta-llama/Llama-3.1-8B config.json`" in line and "huggingface-cli" not in line


def test_a_near_miss_preset_or_cached_repo_gets_did_you_mean(hub):
    refused_by_api("lama-3-8b", "did you mean llama-3-8b")
    refused_by_api("Mistral-7", "did you mean mistral-7b")
    assert "did you mean llama-3-8b" in refused(run("train", "lama-3-8b", cache=hub))
    add_snapshot(hub, REPO_ID, COMMIT, GPT2)
    add_snapshot(hub, "Qwen/Qwen3-0.6B", COMMIT, GPT2)
    refused_by_api("openai-community/gtp2", "did you mean openai-community/gpt2")
    refused_by_api("qwen/qwen3-0.6", "did you mean Qwen/Qwen3-0.6B")
    assert "did you mean openai-community/gpt2" in refused(run("infer", "openai-comunity/gpt2", cache=hub))


# ---- what MODEL names on disk: FIFOs, devices, sockets, links outside the cache --------------------------
def test_a_fifo_device_or_socket_as_model_is_not_a_regular_file(tmp_path, hub):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    specials = [fifo]
    if os.path.exists("/dev/null"):
        specials.append(Path("/dev/null"))
    path = tmp_path / "s.json"
    try:
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(path))
            specials.append(path)
            for special in specials:
                message = refused_by_api(str(special), "not a regular file")
                assert "no such file" not in message
                line = refused(run("train", str(special), cache=hub))
                assert "not a regular file" in line and "no such file" not in line
    except (OSError, AttributeError):  # no AF_UNIX here, or a path too long for one
        for special in specials:
            refused_by_api(str(special), "not a regular file")
            assert "not a regular file" in refused(run("train", str(special), cache=hub))


def test_a_symlinked_model_outside_the_cache_is_refused_alike_by_the_api_and_the_command_line(tmp_path, hub):
    real = tmp_path / "gpt2"
    real.mkdir()
    (real / "config.json").write_text(json.dumps(GPT2))
    assert sources.resolve_source(str(real))[0].n_params == GPT2_PARAMS  # the folder itself: read
    folder_link, file_link = tmp_path / "gpt2-link", tmp_path / "link.json"
    folder_link.symlink_to(real, target_is_directory=True)
    file_link.symlink_to(real / "config.json")
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "gone.json")
    for link in (folder_link, file_link, dangling):
        with pytest.raises(ValueError, match="symbolic link") as api:
            mm.from_hf_config(link)
        refused_by_api(str(link), "symbolic link")
        line = refused(run("train", str(link), cache=hub))
        words = str(api.value).partition("' is ")[2]  # the one rule, the same words after the quoted path
        assert words.startswith("a symbolic link") and words in line, (words, line)

"""Read a PyTorch CUDA memory snapshot and say which part of a training step holds its memory.

A snapshot is what torch.cuda.memory._dump_snapshot(path) pickles: torch.cuda.memory._snapshot()'s dictionary
(documented in torch/cuda/memory.py, `_snapshot`, and https://pytorch.org/docs/stable/torch_cuda_memory.html):

    {"segments": [{"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
                   "stream", "segment_type": "small" | "large",
                   "blocks": [{"address", "size", "requested_size",
                               "state": "active_allocated" | "active_pending_free" | "inactive",
                               "frames": [{"filename", "line", "name"}, ...]}]}],
     "device_traces": [[{"action": "alloc" | "free_requested" | "free_completed" | "segment_alloc" |
                                   "segment_free" | "segment_map" | "segment_unmap" | "snapshot" | "oom",
                         "addr", "size", "stream", "frames": [...]}, ...], ...]}

Each allocated block is given to a part by the Python frames that allocated it (recorded with
torch.cuda.memory._record_memory_history()): the optimizer's step (torch/optim/), the backward pass (a
`backward` frame: gradients and the backward's own tensors), the forward pass (a `forward` frame: activations),
building or moving the model (`_apply`, `to`, `__init__`, `reset_parameters`, `_init_weights`, `from_pretrained`:
weights), and "other" (no frames, or none of these). Reserved bytes are the segments' total; fragmented bytes the
reserved bytes in inactive blocks (free pieces of the allocator's segments).

The file is read with an unpickler that builds only dicts, lists, strings and numbers: a snapshot holds nothing
else, and a pickle that asks for any class is refused rather than run. numpy is not needed.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import field
from pathlib import Path

from . import validate
from .values import frozen

PARTS = ("weights", "activations", "gradients and backward", "optimizer", "other")
MAX_SNAPSHOT_BYTES = 2**31  # a snapshot with frames is tens to hundreds of MB
_WEIGHT_FRAMES = ("_apply", "to", "cuda", "reset_parameters", "_init_weights", "from_pretrained", "__init__",
                  "to_empty", "_load_state_dict_into_meta_model", "load_state_dict")


class _DataOnly(pickle.Unpickler):
    """Unpickles plain data only: a class or function reference in the file is refused."""

    def find_class(self, module, name):
        raise validate.FieldError("snapshot", f"the snapshot file asks for {module}.{name}; a memory snapshot holds "
                                  "plain data only, so it is not read")


def part_of(frames) -> str:
    """The part of the step that allocated a block, from its Python frames (innermost first, as PyTorch records)."""
    names = [(str(f.get("filename", "")), str(f.get("name", ""))) for f in frames or ()]
    if any("torch/optim/" in filename.replace("\\", "/") for filename, _ in names):
        return "optimizer"
    if any(name == "backward" or "autograd" in filename for filename, name in names):
        return "gradients and backward"
    if any(name == "forward" for _, name in names):
        return "activations"
    if any(name in _WEIGHT_FRAMES for _, name in names):
        return "weights"
    return "other"


@frozen
class SnapshotSummary:
    """A snapshot's bytes: allocated by part, reserved, fragmented, and the trace's highest allocation."""

    allocated_by_part: dict
    allocated_bytes: int
    reserved_bytes: int
    fragmented_bytes: int
    largest_free_block_bytes: int
    segments: int
    blocks: int
    trace_peak_bytes: int | None = None
    trace_peak_by_part: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)

    def text(self) -> str:
        lines = ["PyTorch memory snapshot (torch.cuda.memory._snapshot), allocated blocks by the part that made them:"]
        for part in PARTS:
            lines.append(f"  {part:<28s} {self.allocated_by_part.get(part, 0):>20,} B")
        lines += [f"  {'allocated':<28s} {self.allocated_bytes:>20,} B",
                  f"  {'reserved (segments)':<28s} {self.reserved_bytes:>20,} B",
                  f"  {'fragmented (inactive blocks)':<28s} {self.fragmented_bytes:>20,} B",
                  f"  {'largest free block':<28s} {self.largest_free_block_bytes:>20,} B"]
        if self.trace_peak_bytes is not None:
            lines.append(f"  highest allocation in the trace: {self.trace_peak_bytes:,} B, of which "
                         + ", ".join(f"{part} {n:,} B" for part, n in self.trace_peak_by_part.items() if n))
        return "\n".join(lines) + "\n"


def load_snapshot(source) -> dict:
    """The snapshot dict: from a dict, bytes, or a path to a _dump_snapshot pickle."""
    if isinstance(source, dict):
        data = source
    else:
        if isinstance(source, (bytes, bytearray)):
            raw = bytes(source)
        else:
            path = Path(source)
            try:
                size = path.stat().st_size
            except OSError as error:
                raise validate.FieldError("snapshot", f"cannot read {path.name!r}: {error.strerror or error}") from None
            if size > MAX_SNAPSHOT_BYTES:
                raise validate.FieldError("snapshot", f"{path.name!r} holds {size:,} bytes; at most 2 GiB is read")
            raw = path.read_bytes()
        try:
            data = _DataOnly(io.BytesIO(raw)).load()
        except validate.FieldError:
            raise
        except Exception as error:  # a truncated or foreign file: pickle raises many kinds
            raise validate.FieldError("snapshot", f"not a PyTorch memory snapshot ({type(error).__name__}: "
                                      f"{error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list):
        raise validate.FieldError("snapshot", "not a PyTorch memory snapshot: it needs a 'segments' list (what "
                                  "torch.cuda.memory._dump_snapshot writes)")
    return data


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise validate.FieldError("snapshot", f"{what} must be a whole number of bytes >= 0; got {value!r}")
    return value


def read_snapshot(source) -> SnapshotSummary:
    """Summarize a snapshot (see the module docstring)."""
    data = load_snapshot(source)
    by_part = dict.fromkeys(PARTS, 0)
    allocated = reserved = fragmented = largest_free = n_blocks = 0
    frames_at: dict[int, list] = {}
    for segment in data["segments"]:
        reserved += _int(segment.get("total_size", 0), "a segment's total_size")
        for block in segment.get("blocks", ()):
            size = _int(block.get("size", 0), "a block's size")
            n_blocks += 1
            if block.get("state") == "inactive":
                fragmented += size
                largest_free = max(largest_free, size)
                continue
            if block.get("state") == "active_allocated":
                allocated += size
                by_part[part_of(block.get("frames"))] += size
            if "address" in block:
                frames_at[block["address"]] = block.get("frames")
    peak, peak_parts = _trace_peak(data.get("device_traces"))
    return SnapshotSummary(allocated_by_part=by_part, allocated_bytes=allocated, reserved_bytes=reserved,
                           fragmented_bytes=fragmented, largest_free_block_bytes=largest_free,
                           segments=len(data["segments"]), blocks=n_blocks, trace_peak_bytes=peak,
                           trace_peak_by_part=peak_parts)


def _trace_peak(traces):
    """The highest allocated total over the recorded trace (allocs minus completed frees), and its parts then.

    The trace starts when recording started, so its total counts only what was allocated since."""
    if not traces:
        return None, {}
    live: dict[int, tuple] = {}
    by_part = dict.fromkeys(PARTS, 0)
    total = peak = 0
    peak_parts = dict(by_part)
    for device_trace in traces:
        for entry in device_trace or ():
            action = entry.get("action")
            addr = entry.get("addr")
            if action == "alloc":
                size = _int(entry.get("size", 0), "a trace entry's size")
                part = part_of(entry.get("frames"))
                live[addr] = (size, part)
                total += size
                by_part[part] += size
                if total > peak:
                    peak, peak_parts = total, dict(by_part)
            elif action == "free_completed" and addr in live:
                size, part = live.pop(addr)
                total -= size
                by_part[part] -= size
    return peak, peak_parts

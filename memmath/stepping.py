"""Two training steps of a PyTorch model, measured part by part: the one engine behind `memmath measure` (real
tensors on the CPU or a CUDA GPU) and `memmath.traced` (fake tensors, PyTorch's FakeTensorMode, no memory).

What is counted, each storage once (a view keeps its whole storage alive; a tied head is its embedding):

- parameters, their gradients after the first backward, the optimizer's state tensors after its first step;
- bytes saved for backward during the first forward, through torch.autograd.graph.saved_tensors_hooks
  (PyTorch's "Hooks for saved tensors" notes), parameters and buffers left out, attributed to the block that
  saved them first or to "outside the blocks";
- each phase's peak (forward, backward, optimizer step) of each of the two steps, over everything alive
  before step 1 (parameters, buffers, the batch): step 1 runs before the optimizer states exist, step 2 as
  every later step does. On the CPU from the profiler's allocation events (torch.profiler, profile_memory=True);
  on CUDA from torch.cuda.max_memory_allocated per phase, with the allocator's reserved bytes and the reserved
  bytes not allocated at each step's peak; under fake tensors from PyTorch's MemTracker
  (torch.distributed._tools.mem_tracker), which sorts every storage of the step and rounds CUDA storages to
  the caching allocator's 512 B.

torch is imported inside the functions: memmath's core never needs it.
"""

from __future__ import annotations

import contextlib
import itertools
import weakref

STEPS = 2  # step 1 builds the optimizer states; from step 2 on they exist during forward and backward
PHASES = ("forward", "backward", "optimizer_step")


class StorageSet:
    """Storages seen once each, by identity: a real storage by its address, a fake one (no address) by its Python
    object, held weakly so that nothing is kept alive by being counted."""

    def __init__(self, tensors=()):
        self._by_id: dict[int, tuple] = {}
        for t in tensors:
            self.add(t)

    @staticmethod
    def _storage(t):
        return t.untyped_storage()

    def key(self, t):
        storage = self._storage(t)
        pointer = 0 if type(t).__name__ == "FakeTensor" else storage.data_ptr()
        return ("ptr", pointer) if pointer else ("obj", id(storage)), storage

    def __contains__(self, t) -> bool:
        key, storage = self.key(t)
        entry = self._by_id.get(key)
        return entry is not None and (key[0] == "ptr" or entry[0]() is storage)

    def add(self, t) -> int:
        """The storage's bytes when it is new here, else 0."""
        if t is None or t in self:
            return 0
        key, storage = self.key(t)
        nbytes = storage.nbytes()
        self._by_id[key] = (weakref.ref(storage) if key[0] == "obj" else None, nbytes)
        return nbytes

    @property
    def nbytes(self) -> int:
        return sum(entry[1] for entry in self._by_id.values())


def unique_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (tied or shared tensors counted once)."""
    return StorageSet(t for t in tensors if t is not None and t.numel()).nbytes


class SavedTensorRecorder:
    """Every storage autograd saves for backward while active, once, by block (parameters and buffers left out)."""

    def __init__(self, model, blocks):
        self.excluded = StorageSet(itertools.chain(model.parameters(), model.buffers()))
        self.seen = StorageSet()
        self.region = -1
        self.per_block = [0] * len(blocks)
        self.outside = 0
        self.handles = []
        for i, block in enumerate(blocks):
            self.handles.append(block.register_forward_pre_hook(lambda *_, i=i: self._enter(i)))
            self.handles.append(block.register_forward_hook(lambda *_: self._enter(-1)))

    def _enter(self, region):
        self.region = region

    def pack(self, t):
        if t in self.excluded:
            return t
        try:
            nbytes = self.seen.add(t)
        except (RuntimeError, NotImplementedError):  # a tensor without storage (a nested or sparse one)
            return t
        if self.region < 0:
            self.outside += nbytes
        else:
            self.per_block[self.region] += nbytes
        return t

    @staticmethod
    def unpack(t):
        return t

    def hooks(self):
        import torch

        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def close(self):
        for handle in self.handles:
            handle.remove()


def phase_peaks(prof, phases):
    """(highest net allocation, in bytes over the start of profiling, inside each record_function phase; the net
    allocation at the end)."""
    events = prof.profiler.kineto_results.events()
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    ranges = {e.name(): (e.start_ns(), e.end_ns()) for e in events if e.name() in phases}
    peaks = {name: 0 for name in phases}
    running = 0
    for start, delta in memory:
        running += delta
        for name, (lo, hi) in ranges.items():
            if lo <= start <= hi and running > peaks[name]:
                peaks[name] = running
    return peaks, running


def _phase_tracker():
    """MemTracker with a peak per named phase: the highest total of tracked storages while the phase runs."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class PhaseTracker(MemTracker):
        def __init__(self):
            super().__init__()
            self.phase = None
            self.phase_peaks: dict[str, int] = {}

        def total(self) -> int:
            return sum(snap.get("Total", 0) for snap in self._curr_mem_snap.values())

        def start(self, phase: str):
            if phase.endswith("forward"):
                self.reset_mod_stats()  # MemTracker keeps one forward's module statistics at a time
            self.phase = phase
            self.phase_peaks[phase] = self.total()

        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            # Gradients are tracked as the backward pass makes them; no hook (a frozen parameter takes none).
            return super()._track_module_params_and_buffers(module, install_grad_hooks=False)

        def _update_peak_stats(self, peak_state):
            # The step's and the phase's peaks only: MemTracker's per-module peaks (a walk over every module at
            # every operation, most of a trace's time) are not read here.
            total = self.total()
            if self.phase is not None and total > self.phase_peaks[self.phase]:
                self.phase_peaks[self.phase] = total

    return PhaseTracker()


def _cuda_phase(torch, peaks: dict, name: str, reserved: dict):
    """A context that records a CUDA phase's highest allocated and reserved bytes under `name`."""

    @contextlib.contextmanager
    def phase():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        yield
        torch.cuda.synchronize()
        peaks[name] = torch.cuda.max_memory_allocated()
        reserved[name] = torch.cuda.max_memory_reserved()

    return phase()


def step_twice(model, optimizer, batch, blocks, *, mode: str = "cpu", loss_of=None, first_step_hook=None) -> dict:
    """Run two training steps (forward, backward, optimizer.step(), zero_grad(set_to_none=True)) and return
    what they allocated, by validation/measure.py's keys (see the module docstring).

    mode: "cpu" (the profiler), "cuda" (the allocator's statistics) or "fake" (MemTracker, under a
    FakeTensorMode the caller entered). loss_of(model, batch) gives the loss (default: model(**batch).loss).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    loss_of = loss_of or (lambda m, b: m(**b).loss)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    resident_set = StorageSet(itertools.chain(params, model.buffers(), batch.values()))
    resident = resident_set.nbytes
    recorder = SavedTensorRecorder(model, blocks)
    names = [f"step{k}/{phase}" for k in range(1, STEPS + 1) for phase in PHASES]
    cuda_peaks: dict[str, int] = {}
    cuda_reserved: dict[str, int] = {}
    tracker = None
    if mode == "cuda":
        torch.cuda.synchronize()
        allocated_before = torch.cuda.memory_allocated()
        outer = contextlib.nullcontext()

        def phase(name):
            return _cuda_phase(torch, cuda_peaks, name, cuda_reserved)
    elif mode == "fake":
        tracker = _phase_tracker()
        tracker.track_external(model, optimizer)
        outer = tracker

        @contextlib.contextmanager
        def phase(name):
            tracker.start(name)
            yield
            tracker.phase = None
    else:
        outer = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        phase = record_function
    loss = None
    grad_bytes = 0
    with outer as prof:
        if tracker is not None:
            base = tracker.total()
        for k in range(1, STEPS + 1):
            hooks = recorder.hooks() if k == 1 else contextlib.nullcontext()
            with phase(f"step{k}/forward"), hooks:
                loss = loss_of(model, batch)  # the logits go at once, as in a loop that keeps the loss only
            with phase(f"step{k}/backward"):
                loss.backward()
            if k == 1:
                grad_bytes = unique_bytes(p.grad for p in params)
            with phase(f"step{k}/optimizer_step"):
                optimizer.step()
            if k == 1 and first_step_hook is not None:
                first_step_hook()
            optimizer.zero_grad(set_to_none=True)
    recorder.close()
    states = StorageSet()
    state_detail: dict[str, int] = {}
    for state in optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value):
                state_detail[key] = state_detail.get(key, 0) + states.add(value)
    result = {
        "total_params": sum(p.numel() for p in params),
        "trainable_params": sum(p.numel() for p in trainable),
        "trainable_tensors": len(trainable),
        "param_bytes": unique_bytes(params),
        "grad_bytes": grad_bytes,
        "optimizer_state_bytes": states.nbytes,
        "optimizer_state_detail": dict(sorted(state_detail.items())),
        "saved_bytes": sum(recorder.per_block) + recorder.outside,
        "saved_per_layer": list(recorder.per_block),
        "saved_outside_layers": recorder.outside,
        "resident_before_bytes": resident,
    }
    if mode == "cuda":
        result["cuda_allocated_before_bytes"] = allocated_before
        peaks = {name: cuda_peaks[name] - allocated_before for name in names}
        for k in range(1, STEPS + 1):
            step = [f"step{k}/{phase}" for phase in PHASES]
            result[f"cuda_max_allocated_step{k}_bytes"] = max(cuda_peaks[n] for n in step)
            result[f"cuda_max_reserved_step{k}_bytes"] = max(cuda_reserved[n] for n in step)
            # The allocator's reserved bytes that held no tensor at the step's peak (free pieces of its segments).
            result[f"cuda_fragmented_step{k}_bytes"] = (result[f"cuda_max_reserved_step{k}_bytes"]
                                                        - result[f"cuda_max_allocated_step{k}_bytes"])
        result["cuda_reserved_bytes"] = torch.cuda.memory_reserved()
    elif mode == "fake":
        peaks = {name: tracker.phase_peaks[name] - base for name in names}
    else:
        peaks, _ = phase_peaks(prof, names)
    for k in range(1, STEPS + 1):
        for name in PHASES:
            result[f"peak_step{k}_{name}_bytes"] = resident + peaks[f"step{k}/{name}"]
        result[f"peak_step{k}_bytes"] = max(result[f"peak_step{k}_{name}_bytes"] for name in PHASES)
        result[f"peak_step{k}_phase"] = max(PHASES, key=lambda name: result[f"peak_step{k}_{name}_bytes"])
    result["peak_bytes"] = result[f"peak_step{STEPS}_bytes"]
    del loss
    return result


def prefill(model, batch) -> dict:
    """One forward of the whole prompt with the KV cache on, under no_grad (what serving's first step runs), under a
    FakeTensorMode the caller entered: the highest total during it and what stays alive after it (the cache, and
    the last position's logits when the model's forward takes logits_to_keep), over what was alive before."""
    import inspect

    import torch

    tracker = _phase_tracker()
    tracker.track_external(model)
    resident = StorageSet(itertools.chain(model.parameters(), model.buffers(), batch.values())).nbytes
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    with tracker, torch.no_grad():
        base = tracker.total()
        tracker.start("prefill")
        output = model(**batch, use_cache=True, **keep)
        tracker.phase = None
        held = tracker.total() - base
    peak = tracker.phase_peaks["prefill"] - base
    logits = getattr(output, "logits", None)
    logits_bytes = unique_bytes([logits]) if logits is not None else 0
    del output
    return {"resident_before_bytes": resident, "prefill_peak_bytes": resident + peak,
            "cache_bytes": held - logits_bytes, "logits_bytes": logits_bytes}

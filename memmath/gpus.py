"""A catalog of GPUs and a fit check.

memory_bytes is what the driver reports (nvidia-smi's "Total" in MiB times 2**20), which is less
than the marketed size: an RTX 4090 sold as "24 GB" reports 24564 MiB. Sources for the MiB
figures: H100 81559, A100 80GB 81920, A100 40GB 40960, A10(G) 23028, L40S 46068, L4 23034 and
T4 15360 as listed in modal-labs/modal-client pull request 2797 (2025); the others as printed by
nvidia-smi in public logs (H200 143771, RTX 5090 32607, RTX 4080 16376, RTX A6000 49140,
RTX 3090 24576). Bandwidth and bf16 dense tensor throughput come from NVIDIA's datasheets (no
sparsity). Cards without bf16 (T4, V100) list their fp16 throughput and say so.

Blackwell and AMD Instinct cards (each figure's source beside its entry): memory as nvidia-smi or
rocm-smi printed it where a public log shows it (B200, MI300X), else the vendor's datasheet size read
in binary units, as the memory is built (the driver then reports up to about 0.5% less: an H100 80GB
shows 81,559 of 81,920 MiB, a B200 183,359 of 184,320, an MI300X 196,592 of 196,608), well inside
the planner's 5% margin. A DGX Spark's GB10 has no memory of its own: it shares 128 GB with the CPU,
nvidia-smi prints N/A, and CUDA's total is the system's MemTotal.

compute_capability is NVIDIA's (developer.nvidia.com/cuda-gpus): Volta 7.0 (V100), Turing 7.5 (T4),
Ampere 8.0/8.6 (A100; RTX 30, A10G, RTX A6000), Ada 8.9 (RTX 40, L4, L40S), Hopper 9.0 (H100, H200),
Blackwell 10.0 (B200, GB200), 10.3 (B300), 12.0 (RTX 5090, RTX PRO 6000) and 12.1 (GB10). The formats
a card computes in follow from it: bf16 tensor-core math from Ampere on (sm_80; the Ampere
architecture whitepaper introduces BF16, and PyTorch's torch.cuda.is_bf16_supported() asks for
compute capability 8.0), fp8 (E4M3/E5M2) from Ada and Hopper on (sm_89 and sm_90: the Ada and Hopper
whitepapers' fourth-generation tensor cores). AMD cards have no compute capability; their formats
follow their instruction set (gfx942: CDNA 3, gfx950: CDNA 4), whose matrix cores compute bf16 and
fp8 (AMD's CDNA 3 and CDNA 4 instruction set architecture references).
"""

from __future__ import annotations

from . import validate
from .cuda_context import CONSERVATIVE_LAZY_MIB, CONTEXT_RESERVES, ContextReserve, context_family, module_loading_for
from .recipes import get_recipe
from .units import UNITS, unit_name
from .values import frozen

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at every start
if TYPE_CHECKING:
    import pandas as pd


MIB = 2**20
MAX_GPU_BYTES = 2**60  # memory and bytes per second of one card (an H200 has 2**37 bytes)
GPU_KINDS = ("consumer", "datacenter", "custom")  # custom: a card given by its memory alone (memmath train --gpu-memory)
# What a CUDA context and its kernels hold before any tensor depends on the card's family, the CUDA version and
# module loading (memmath/cuda_context.py, each value with its source); a card's default is GPU.cuda_context_bytes.
# CUDA_CONTEXT_BYTES is the reserve where nothing names the card's family (no card, or one of unknown capability):
# 1,343 MiB, a V100's context measured with eager loading, a conservative bound on a lazy one.
CUDA_CONTEXT_BYTES = CONSERVATIVE_LAZY_MIB * MIB
CUDA_CONTEXT_SOURCE = ("CUDA context and kernels before any tensor, 1,343 MiB measured on a V100 "
                       "(Hugging Face transformers docs, Model training anatomy)")
# The planner proposes a change only when it leaves at least this share of the requirement free:
# the peak estimate is held to 5% of PyTorch's measured peak (tests/test_fidelity.py).
FIT_MARGIN = 0.05


@frozen
class GPU:
    """One card: memory in bytes as the driver reports it, bandwidth in bytes/s, bf16 dense TFLOP/s."""

    name: str
    memory_bytes: int
    bandwidth_bytes_per_s: int
    bf16_tflops: float
    kind: str  # "consumer" or "datacenter"
    marketed: str  # the size on the box
    note: str = ""
    compute_capability: tuple | None = None  # NVIDIA's compute capability (major, minor); None: unknown
    architecture: str = ""  # Volta, Turing, Ampere, Ada, Hopper, Blackwell; CDNA 3, CDNA 4
    isa: str = ""  # an AMD card's instruction set (gfx942, gfx950), which sets its formats as cc does NVIDIA's

    @property
    def computes_bf16(self) -> bool | None:
        """bf16 tensor-core arithmetic: compute capability 8.0 (Ampere) and later, or an AMD instruction set
        with bf16 matrix math; None when unknown."""
        if self.isa in _ISA_FORMATS:
            return "bf16" in _ISA_FORMATS[self.isa]
        return None if self.compute_capability is None else tuple(self.compute_capability) >= (8, 0)

    @property
    def computes_fp8(self) -> bool | None:
        """fp8 (E4M3, E5M2) tensor-core arithmetic: compute capability 8.9 (Ada) and later, or an AMD
        instruction set with fp8 matrix math; None when unknown."""
        if self.isa in _ISA_FORMATS:
            return "fp8" in _ISA_FORMATS[self.isa]
        return None if self.compute_capability is None else tuple(self.compute_capability) >= (8, 9)

    @property
    def capability(self) -> str:
        """How the card's formats are known: 'compute capability 8.0' (NVIDIA) or 'gfx942' (AMD); '' if unknown."""
        if self.isa:
            return self.isa
        if self.compute_capability is None:
            return ""
        return "compute capability " + ".".join(str(n) for n in self.compute_capability)

    @property
    def context_reserve(self) -> ContextReserve:
        """The CUDA context of the card's family with lazy and eager module loading (memmath/cuda_context.py)."""
        return CONTEXT_RESERVES[context_family(self.compute_capability, self.isa)]

    @property
    def cuda_context_bytes(self) -> int:
        """What the CUDA context takes on this card with PyTorch's default lazy module loading: check_fit's default
        reserve."""
        return self.context_reserve.lazy_bytes

    @property
    def compute_formats(self) -> tuple:
        """The 16- and 8-bit floating formats the card's tensor cores compute in (fp16 on every card listed)."""
        return ("fp16",) + (("bf16",) if self.computes_bf16 else ()) + (("fp8",) if self.computes_fp8 else ())

    def __post_init__(self):
        # Checked when built, so get_gpu never hands on a card with negative memory.
        for name in ("name", "marketed", "note", "isa"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a string; got {validate.describe(getattr(self, name))}")
        if not self.name.strip():
            raise ValueError("name must not be empty")
        object.__setattr__(self, "memory_bytes",
                           validate.count("memory_bytes", self.memory_bytes, high=MAX_GPU_BYTES, scalar=True))
        object.__setattr__(self, "kind", validate.choice("kind", self.kind, GPU_KINDS))
        # A "custom" card (one given only by its memory) may leave bandwidth and throughput unknown, as 0.
        unknown_allowed = self.kind == "custom"
        object.__setattr__(self, "bandwidth_bytes_per_s", validate.count(
            "bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, low=0 if unknown_allowed else 1, high=MAX_GPU_BYTES,
            scalar=True))
        object.__setattr__(self, "bf16_tflops", validate.real("bf16_tflops", self.bf16_tflops,
                                                              low=0.0 if unknown_allowed else 1e-6, high=1e9))


_ARCHITECTURES = {(7, 0): "Volta", (7, 5): "Turing", (8, 0): "Ampere", (8, 6): "Ampere", (8, 9): "Ada",
                  (9, 0): "Hopper", (10, 0): "Blackwell", (10, 3): "Blackwell", (12, 0): "Blackwell",
                  (12, 1): "Blackwell"}
# AMD's instruction sets: the formats their matrix cores compute in (AMD's "AMD Instinct MI300 Instruction Set
# Architecture" reference for gfx942, CDNA 3, and "AMD Instinct CDNA 4 Instruction Set Architecture" for gfx950:
# bf16 and fp8 matrix instructions in both).
_ISA_FORMATS = {"gfx942": ("fp16", "bf16", "fp8"), "gfx950": ("fp16", "bf16", "fp8")}
_ISA_ARCHITECTURES = {"gfx942": "CDNA 3", "gfx950": "CDNA 4"}
GIB_IN_MIB = 1024


def _gpu(name, mib, bandwidth_gb_s, tflops, kind, marketed, note="", *, cc=None, isa=""):
    architecture = _ISA_ARCHITECTURES[isa] if isa else _ARCHITECTURES[cc]
    return GPU(name, mib * MIB, int(bandwidth_gb_s * 10**9), tflops, kind, marketed, note,
               compute_capability=cc, architecture=architecture, isa=isa)


GPUS: dict[str, GPU] = {
    g.name: g
    for g in (
        _gpu("RTX 3060", 12288, 360, 51, "consumer", "12 GB", cc=(8, 6)),
        _gpu("RTX 4060 Ti 16GB", 16380, 288, 88, "consumer", "16 GB", cc=(8, 9)),
        _gpu("RTX 4080", 16376, 717, 195, "consumer", "16 GB", cc=(8, 9)),
        _gpu("RTX 3090", 24576, 936, 71, "consumer", "24 GB", cc=(8, 6)),
        _gpu("RTX 4090", 24564, 1008, 165, "consumer", "24 GB", cc=(8, 9)),  # 24564 MiB in nvidia-smi
        _gpu("RTX 5090", 32607, 1792, 209, "consumer", "32 GB", cc=(12, 0)),
        _gpu("T4", 15360, 320, 65, "datacenter", "16 GB", "no bf16: fp16 throughput listed", cc=(7, 5)),
        # nvidia-smi shows Tesla V100 32GB (SXM2 and PCIe) as 32510 MiB, not the full 32768 MiB.
        _gpu("V100 32GB", 32510, 900, 125, "datacenter", "32 GB", "no bf16: fp16 throughput listed", cc=(7, 0)),
        _gpu("L4", 23034, 300, 121, "datacenter", "24 GB", cc=(8, 9)),
        _gpu("A10G", 23028, 600, 70, "datacenter", "24 GB", cc=(8, 6)),
        _gpu("RTX A6000", 49140, 768, 155, "datacenter", "48 GB", cc=(8, 6)),
        _gpu("L40S", 46068, 864, 362, "datacenter", "48 GB", cc=(8, 9)),
        _gpu("A100 40GB", 40960, 1555, 312, "datacenter", "40 GB", cc=(8, 0)),
        _gpu("A100 80GB", 81920, 2039, 312, "datacenter", "80 GB", cc=(8, 0)),  # 81920 MiB in nvidia-smi
        _gpu("H100 80GB", 81559, 3350, 989, "datacenter", "80 GB", cc=(9, 0)),
        _gpu("H200", 143771, 4800, 989, "datacenter", "141 GB", cc=(9, 0)),
        # RTX PRO 6000 Blackwell (Workstation and Server Edition): NVIDIA RTX PRO 6000 Blackwell datasheet,
        # nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/: 96 GB GDDR7, 1,792 GB/s,
        # 4,000 AI TOPS (fp4 with sparsity): halved for dense, then halved twice for fp8 and 16-bit, 500 TFLOP/s.
        _gpu("RTX PRO 6000", 96 * GIB_IN_MIB, 1792, 500, "datacenter", "96 GB", cc=(12, 0)),
        # DGX Spark (GB10): NVIDIA DGX Spark datasheet, nvidia.com/en-us/products/workstations/dgx-spark/: 128 GB
        # LPDDR5x shared with the CPU, 273 GB/s, 1 PFLOP of fp4 with sparsity (125 TFLOP/s 16-bit dense, halved as
        # above). nvidia-smi prints N/A for its memory; CUDA's total is the system's MemTotal, 127,600,748 kB on a
        # DGX Spark with driver 580.173.02 (XuehaiPan/nvitop pull request 208): 124,610 MiB, rounded down.
        _gpu("DGX Spark", 124610, 273, 125, "consumer", "128 GB", cc=(12, 1)),
        # B200: nvidia-smi prints 183359MiB (NVIDIA B200, driver 580.95.05, NVIDIA/TensorRT-LLM issue 10278). NVIDIA
        # DGX B200 datasheet, nvidia.com/en-us/data-center/dgx-b200/: 1,440 GB and 64 TB/s over 8 GPUs (180 GB, 8 TB/s
        # each), 72 PFLOPS of fp8 training with sparsity over 8: 4.5 dense fp8, 2,250 TFLOP/s 16-bit dense per GPU.
        _gpu("B200", 183359, 8000, 2250, "datacenter", "180 GB", cc=(10, 0)),
        # B300 (Blackwell Ultra): NVIDIA HGX B300 datasheet, nvidia.com/en-us/data-center/hgx/: 2.3 TB over 8 GPUs
        # (288 GB each), 8 TB/s per GPU, 36 PFLOPS 16-bit with sparsity over 8: 2,250 TFLOP/s dense per GPU.
        _gpu("B300", 288 * GIB_IN_MIB, 8000, 2250, "datacenter", "288 GB", cc=(10, 3)),
        # GB200, one of its two Blackwell GPUs: NVIDIA GB200 NVL72 datasheet, nvidia.com/en-us/data-center/gb200-nvl72/:
        # per superchip 372 GB HBM3e at 16 TB/s and 10 PFLOPS 16-bit with sparsity, so 186 GB, 8 TB/s and 2,500
        # TFLOP/s dense per GPU.
        _gpu("GB200", 186 * GIB_IN_MIB, 8000, 2500, "datacenter", "186 GB", cc=(10, 0)),
        # MI300X: rocm-smi prints "VRAM Total Memory (B): 206141652992" = 196,592 MiB (ROCm/legacy-rocm-build issue
        # 4750). AMD Instinct MI300X datasheet, amd.com/en/products/accelerators/instinct/mi300/mi300x.html: 192 GB
        # HBM3, 5.3 TB/s, 1,307.4 TFLOP/s bf16 dense.
        _gpu("MI300X", 196592, 5300, 1307.4, "datacenter", "192 GB", isa="gfx942"),
        # MI325X: AMD Instinct MI325X datasheet, amd.com/en/products/accelerators/instinct/mi300/mi325x.html: 256 GB
        # HBM3E, 6 TB/s, 1,307.4 TFLOP/s bf16 dense.
        _gpu("MI325X", 256 * GIB_IN_MIB, 6000, 1307.4, "datacenter", "256 GB", isa="gfx942"),
        # MI355X: AMD Instinct MI355X datasheet, amd.com/en/products/accelerators/instinct/mi350/mi355x.html: 288 GB
        # HBM3E, 8 TB/s, 2,516.6 TFLOP/s bf16 dense.
        _gpu("MI355X", 288 * GIB_IN_MIB, 8000, 2516.6, "datacenter", "288 GB", isa="gfx950"),
    )
}


def get_gpu(name) -> GPU:
    """The catalog entry for a name (case-insensitive), or the GPU passed in."""
    if isinstance(name, GPU):
        name.__post_init__()  # checked again: a card altered after it was built is refused too
        return name
    if not isinstance(name, str):
        raise TypeError(f"gpu must be a name such as 'H100 80GB' or a GPU; got {validate.describe(name)}")
    for key, gpu in GPUS.items():
        if key.lower() == name.strip().lower():
            return gpu
    raise ValueError(f"gpu must be one of {', '.join(GPUS)}; got {validate.describe(name)}")


def cuda_context_bytes(gpu, *, cuda_version=None, module_loading=None) -> int:
    """What the CUDA context takes on `gpu` before any tensor: its family's figure with lazy module loading (PyTorch's
    default from CUDA 11.7 on) or eager loading (module_loading='eager', or a CUDA runtime before 11.7).
    cuda_version: (major, minor), None for 11.7 or later (memmath/cuda_context.py)."""
    return get_gpu(gpu).context_reserve.bytes(module_loading_for(cuda_version, module_loading))


def cuda_context_source(gpu, *, cuda_version=None, module_loading=None) -> str:
    """Where cuda_context_bytes's figure for `gpu` comes from, in words."""
    gpu = get_gpu(gpu)
    loading = module_loading_for(cuda_version, module_loading)
    return (f"CUDA context before any tensor on the {gpu.name} ({gpu.context_reserve.family}, {loading} module "
            f"loading): {gpu.context_reserve.source(loading)}")


def default_reserve(gpu, reserved_bytes=None) -> int:
    """reserved_bytes as given, else what the CUDA context takes on `gpu` (CUDA_CONTEXT_BYTES without a card)."""
    if reserved_bytes is not None:
        return reserved_bytes
    return CUDA_CONTEXT_BYTES if gpu is None else get_gpu(gpu).cuda_context_bytes


# A recipe -> the format its arithmetic needs. Pure bf16 computes in bf16; fp16, the mixed recipes
# and AMP run their 16-bit math in fp16 on a card without bf16 (torch.autocast's dtype=torch.float16,
# with a GradScaler: Micikevicius et al. 2018), so only pure bf16 needs bf16 arithmetic.
RECIPE_NEEDS = {"bf16": "bf16"}
# What such a card runs instead: fp16 mixed precision (16-bit weights and gradients, an fp32 master
# copy and fp32 Adam states, loss scaling): pure fp16 without a master copy loses small updates.
RECIPE_INSTEAD = {"bf16": "mixed"}


@frozen
class RecipeWarning:
    """A recipe the card cannot execute: why, and the recipe it would run instead."""

    gpu: GPU
    precision: str
    needs: str
    instead: str
    message: str


def recipe_warning(precision, gpu) -> RecipeWarning | None:
    """None when `gpu` computes in the format the training recipe needs (or its capability is unknown);
    else a RecipeWarning naming the recipe to use instead (pure bf16 on a T4 or V100: fp16 mixed precision)."""
    gpu = get_gpu(gpu)
    name = getattr(precision, "name", None) or get_recipe(precision).name
    needs = RECIPE_NEEDS.get(name)
    if needs is None or needs in gpu.compute_formats or not gpu.capability:
        return None
    instead = RECIPE_INSTEAD[name]
    message = (f"the {gpu.name} ({gpu.architecture}, {gpu.capability}) has no {needs} arithmetic "
               f"(it computes in {', '.join(gpu.compute_formats)}): the '{name}' recipe cannot run on it; "
               f"use '{instead}' (fp16 mixed precision with loss scaling) instead")
    return RecipeWarning(gpu=gpu, precision=name, needs=needs, instead=instead, message=message)


@frozen
class Fit:
    """Whether `required_bytes` fits on one card: headroom is positive when it fits.

    available_bytes = the card's memory - reserved_bytes (the card's CUDA context by default);
    margin_bytes: what must stay free on top of the requirement for `fits` to hold.
    """

    gpu: GPU
    required_bytes: int
    available_bytes: int
    reserved_bytes: int = 0
    margin_bytes: int = 0

    def __post_init__(self):
        if not isinstance(self.gpu, GPU):
            raise TypeError(f"gpu must be a GPU; got {validate.describe(self.gpu)}")
        for name in ("required_bytes", "available_bytes", "reserved_bytes", "margin_bytes"):
            object.__setattr__(self, name, validate.nbytes(name, getattr(self, name)))

    @property
    def fits(self) -> bool:
        """True when the requirement plus the margin is at most the memory available."""
        return self.required_bytes + self.margin_bytes <= self.available_bytes

    @property
    def headroom_bytes(self) -> int:
        """Bytes left over (positive) or missing (negative)."""
        return self.available_bytes - self.required_bytes


def check_fit(required_bytes, gpu, *, reserved_bytes=None, margin=0.0) -> Fit:
    """Does a per-GPU requirement fit one card? A Fit with available_bytes = memory_bytes -
    reserved_bytes and headroom_bytes = available - required (negative: that many bytes missing).

    Pass the step's peak (a PeakEstimate from peak_memory, or its .total: what the allocator really
    needs at once), a TrainingMemory/InferenceMemory or bytes. reserved_bytes is what else the card
    holds: by default the card's CUDA context with lazy module loading (GPU.cuda_context_bytes, from
    memmath/cuda_context.py: 426 MiB on an Ada card, 256 MiB on an RTX 30-series or A10G/A6000, else 1,343 MiB);
    pass 0 to leave it out. margin: a share of the requirement that must stay free as well (0 to 1).
    """
    gpu = get_gpu(gpu)
    reserved_bytes = default_reserve(gpu, reserved_bytes)
    required = getattr(required_bytes, "total", required_bytes)
    # Any size training_memory can report is accepted (a run far too large simply does not fit).
    required = validate.count("required_bytes", required, low=0, high=validate.MAX_BYTES, scalar=True)
    reserved = validate.count("reserved_bytes", reserved_bytes, low=0, high=gpu.memory_bytes, scalar=True)
    margin = validate.real("margin", margin, low=0, high=1)
    margin_bytes = int(-(-required * margin // 1))
    return Fit(gpu=gpu, required_bytes=required, available_bytes=gpu.memory_bytes - reserved,
               reserved_bytes=reserved, margin_bytes=margin_bytes)


def fit_table(required_bytes, *, reserved_bytes=None, gpus=None, unit="GiB") -> pd.DataFrame:
    """A table of every catalog GPU (or `gpus`), smallest first: memory and headroom (memory -
    reserved - required) in `unit` (labelled in the column names) and whether it fits. Pass the
    step's peak (peak_memory); reserved_bytes defaults to each card's CUDA context, as in check_fit."""
    import pandas as pd  # only here: `import memmath` stays numpy-only

    unit = unit_name(unit)
    rows = []
    for gpu in (gpus or GPUS.values()):
        fit = check_fit(required_bytes, gpu, reserved_bytes=reserved_bytes)
        rows.append({"gpu": fit.gpu.name, "kind": fit.gpu.kind, "marketed": fit.gpu.marketed,
                     f"memory ({unit})": fit.gpu.memory_bytes / UNITS[unit],
                     f"headroom ({unit})": fit.headroom_bytes / UNITS[unit], "fits": fit.fits})
    return pd.DataFrame(rows).sort_values(f"memory ({unit})", kind="stable").reset_index(drop=True)

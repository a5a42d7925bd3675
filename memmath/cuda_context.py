"""What a card loses to the CUDA context before PyTorch allocates any tensor, by what it depends on.

The context holds the driver's structures, the local memory the driver reserves for every thread the card can run
at once (threads per SM x SMs x the per-thread stack: NVIDIA's cuCtxSetLimit, CU_LIMIT_STACK_SIZE), and the kernels
loaded into it. Which kernels are loaded depends on module loading (NVIDIA, CUDA C++ Programming Guide, "Lazy
Loading"): eagerly, every kernel of every library at initialization; lazily, a kernel on its first use. Lazy loading
needs a CUDA 11.7 runtime (and a 515 driver); CUDA makes it the default on Linux from 12.2, and PyTorch sets
CUDA_MODULE_LOADING=LAZY itself when the user has not (pytorch/pytorch pull request 86509, PyTorch 1.13:
287,047,680 bytes lazily against 666,632,192 eagerly for the same tensor on one card). The caching allocator's
peak does not see the context, so a fit check reserves it.

One value per card family (its compute capability), each with its source. Measured contexts are whole processes as
nvidia-smi prints them after PyTorch's first CUDA call. Where no public measurement gives a family's context, the
reserve is a documented conservative value: lazily, the V100's context measured with eager loading (1,343 MiB, every
kernel PyTorch ships loaded, three times the largest lazy context measured on any card below); eagerly, the largest
eager context measured (1,687 MiB, an RTX 3090 under CUDA 11.1). Kernels a lazy context loads later in the step
(cuBLAS's GEMMs, attention) are not in a figure taken at the first call; the planner's 5% margin stands for them.
"""

from __future__ import annotations


from . import validate
from .values import frozen

MIB = 2**20
LAZY_LOADING_CUDA = (11, 7)  # the first CUDA runtime with lazy loading (CUDA C++ Programming Guide, "Lazy Loading")
MODULE_LOADING = ("lazy", "eager")  # CUDA_MODULE_LOADING: LAZY (PyTorch's default since 1.13) or EAGER

V100_EAGER_MIB = 1343  # Hugging Face transformers docs, "Model training anatomy": "1343 MB" from pynvml's used // 1024**2
RTX3090_EAGER_MIB = 1687  # pytorch/pytorch issue 55277: torch 1.8.2+cu111, torch.Tensor(1).cuda(), nvidia-smi
CONSERVATIVE_LAZY_MIB = V100_EAGER_MIB
CONSERVATIVE_EAGER_MIB = RTX3090_EAGER_MIB
_NO_LAZY = ("no public measurement of this family's context with lazy loading: the V100's, measured with eager "
            "loading (1,343 MiB, Hugging Face transformers docs, Model training anatomy), kept as a conservative bound")
_NO_EAGER = ("no public measurement of this family's context with eager loading: the largest measured, an RTX 3090's "
             "under CUDA 11.1 (1,687 MiB, pytorch/pytorch issue 55277), kept as a conservative bound")


@frozen
class ContextReserve:
    """A card family's CUDA context with lazy and with eager module loading, in bytes, and where each comes from."""

    family: str
    lazy_bytes: int
    eager_bytes: int
    lazy_source: str
    eager_source: str

    def bytes(self, module_loading: str = "lazy") -> int:
        return self.lazy_bytes if module_loading == "lazy" else self.eager_bytes

    def source(self, module_loading: str = "lazy") -> str:
        return self.lazy_source if module_loading == "lazy" else self.eager_source


def _reserve(family, lazy_mib, eager_mib, lazy_source=_NO_LAZY, eager_source=_NO_EAGER):
    return ContextReserve(family, lazy_mib * MIB, eager_mib * MIB, lazy_source, eager_source)


CONTEXT_RESERVES: dict[str, ContextReserve] = {r.family: r for r in (
    _reserve("Volta", CONSERVATIVE_LAZY_MIB, V100_EAGER_MIB, eager_source=(
        "1,343 MiB measured on a V100 before any tensor (Hugging Face transformers docs, Model training anatomy)")),
    _reserve("Turing", CONSERVATIVE_LAZY_MIB, CONSERVATIVE_EAGER_MIB),
    _reserve("Ampere GA100", CONSERVATIVE_LAZY_MIB, CONSERVATIVE_EAGER_MIB),
    # An RTX 3090 has 82 SMs; the RTX A6000's 84 reserve 3 MiB more local memory (1,536 threads x 1 KiB each per SM).
    _reserve("Ampere GA10x", 256, RTX3090_EAGER_MIB, lazy_source=(
        "256 MiB measured on an RTX 3090 (torch 2.7.1+cu128, driver 610.43.03, the process's context before any "
        "tensor in nvidia-smi; invoke-ai/InvokeAI issue 9413)"), eager_source=(
        "1,687 MiB measured on an RTX 3090 (torch 1.8.2+cu111, torch.Tensor(1).cuda(), nvidia-smi; "
        "pytorch/pytorch issue 55277)")),
    # The RTX 6000 Ada's AD102 has 142 SMs, as many as any Ada card (an L40S's; an RTX 4090 has 128): its local
    # memory, and so its context, bounds the family's.
    _reserve("Ada", 426, CONSERVATIVE_EAGER_MIB, lazy_source=(
        "426 MiB measured on an RTX 6000 Ada (PyTorch 2.10.0+cu130, after torch.cuda.mem_get_info, nvidia-smi; "
        "unslothai/unsloth-zoo pull request 1053)")),
    _reserve("Hopper", CONSERVATIVE_LAZY_MIB, CONSERVATIVE_EAGER_MIB),
    # B200 and GB200 (compute capability 10.0); the B300 (10.3) has more SMs, so the B200's figure does not bound it
    _reserve("Blackwell GB100", 612, CONSERVATIVE_EAGER_MIB, lazy_source=(
        "612 MiB measured on a B200 (a process's context after torch.cuda.mem_get_info, per-PID nvidia-smi; "
        "unslothai/unsloth pull request 8669)")),
    _reserve("Blackwell", CONSERVATIVE_LAZY_MIB, CONSERVATIVE_EAGER_MIB),
    _reserve("unknown", CONSERVATIVE_LAZY_MIB, CONSERVATIVE_EAGER_MIB,
             lazy_source=_NO_LAZY.replace("this family's context", "this card's context"),
             eager_source=_NO_EAGER.replace("this family's context", "this card's context")),
)}
# An AMD card's HIP context (ROCm) has no public measurement either: the same conservative bound.
_ISA_FAMILY = {"gfx942": "unknown", "gfx950": "unknown"}


def context_family(compute_capability=None, isa: str = "") -> str:
    """The CONTEXT_RESERVES family of a card: by its compute capability (NVIDIA's), 'unknown' without one."""
    if isa:
        return _ISA_FAMILY.get(isa, "unknown")
    if compute_capability is None:
        return "unknown"
    cc = tuple(compute_capability)
    if cc == (8, 0):
        return "Ampere GA100"
    if cc == (10, 0):
        return "Blackwell GB100"
    major = {7: "Turing" if cc >= (7, 5) else "Volta", 8: "Ada" if cc >= (8, 9) else "Ampere GA10x", 9: "Hopper",
             10: "Blackwell", 12: "Blackwell"}
    return major.get(cc[0], "unknown")


def module_loading_for(cuda_version=None, module_loading=None) -> str:
    """'lazy' or 'eager': CUDA_MODULE_LOADING as given, else lazy (PyTorch's default) from CUDA 11.7 on; a CUDA
    runtime before 11.7 loads eagerly whatever is asked. cuda_version: (major, minor); None: 11.7 or later."""
    if module_loading is not None:
        module_loading = validate.choice("module_loading", str(module_loading).lower(), MODULE_LOADING)
    if cuda_version is not None:
        if (not isinstance(cuda_version, (tuple, list)) or len(cuda_version) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 100 for v in cuda_version)):
            raise ValueError(f"cuda_version must be (major, minor), two whole numbers from 0 to 99, such as (12, 8); "
                             f"got {validate.describe(cuda_version)}")
        if tuple(cuda_version) < LAZY_LOADING_CUDA:
            return "eager"
    return module_loading or "lazy"

"""Reported figures the lessons quote, each with its source, so every lesson cites them the same way.

These are measurements and claims from papers, not arithmetic: memmath cannot derive them, so
they are kept here verbatim with a citation. Everything a formula can produce is computed instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reported:
    """A published figure: the value, its unit, what it measures, and where it was reported."""

    value: float
    unit: str
    claim: str
    source: str


REPORTED: dict[str, Reported] = {
    "houlsby_glue_gap": Reported(
        0.4, "% of GLUE score", "Adapters on BERT-large came within 0.4% of full finetuning on GLUE",
        "Houlsby et al. 2019, Parameter-Efficient Transfer Learning for NLP, arXiv:1902.00751 abstract"
        "; the ICML version says 0.8%"),
    "houlsby_trainable_share": Reported(
        3.6, "% of parameters per task", "while adding only 3.6% trainable parameters per task (the article rounds to 3%)",
        "Houlsby et al. 2019, arXiv:1902.00751 abstract"),
    "bert_large_partial_share": Reported(
        25, "% of parameters", "finetuning only the top layers of BERT-large needed about 25% of the parameters "
        "updated to match full finetuning on GLUE", "Houlsby et al. 2019, top-layer finetuning baseline, as the article reports"),
    "lora_gpt3_vram_before": Reported(
        1.2, "TB", "GPT-3 175B full finetuning with Adam: training VRAM", "Hu et al. 2021, LoRA, arXiv:2106.09685, section 4.2"),
    "lora_gpt3_vram_after": Reported(
        350, "GB", "GPT-3 175B with LoRA (r=4, q and v): training VRAM", "Hu et al. 2021, LoRA, section 4.2"),
    "lora_param_reduction": Reported(
        10_000, "x fewer trainable parameters", "LoRA on GPT-3 175B versus full finetuning",
        "Hu et al. 2021, LoRA, abstract"),
    "lora_vram_two_thirds": Reported(
        2 / 3, "of training VRAM saved at most", "for a large Transformer trained with Adam, LoRA reduces VRAM usage by up to 2/3 "
        "when r is much smaller than the model width, because the optimizer states of frozen weights are not stored",
        "Hu et al. 2021, LoRA, arXiv:2106.09685, section 4.2"),
    "lora_checkpoint_before": Reported(
        350, "GB", "GPT-3 175B checkpoint size with full finetuning (one copy of the model per task)",
        "Hu et al. 2021, LoRA, section 4.2"),
    "lora_checkpoint_after": Reported(
        35, "MB", "GPT-3 175B checkpoint size with LoRA r=4 on the query and value projections (about 10,000x smaller)",
        "Hu et al. 2021, LoRA, section 4.2"),
    "lora_gpu_memory_3x": Reported(
        3, "x less GPU memory", "LoRA on GPT-3 175B versus full finetuning with Adam", "Hu et al. 2021, LoRA, abstract"),
    "qlora_65b_full_16bit": Reported(
        780, "GB (more than)", "regular 16-bit finetuning of a LLaMA 65B model needs more than 780 GB of GPU memory",
        "Dettmers et al. 2023, QLoRA, arXiv:2305.14314, introduction"),
    "qlora_65b_gpu": Reported(
        48, "GB GPU", "QLoRA finetunes a 65B model on a single 48 GB GPU", "Dettmers et al. 2023, QLoRA, arXiv:2305.14314, abstract"),
    "peft_examples_full": Reported(
        10_000, "examples (tens of thousands to millions)", "full finetuning may need tens of thousands to millions of examples",
        "the article"),
    "peft_examples_peft": Reported(
        1_000, "examples (a few thousand)", "some PEFT methods do well with a few thousand examples", "the article"),
    "cuda_context_v100": Reported(
        # The docs print "1343 MB", but their helper computes pynvml's info.used // 1024**2: mebibytes.
        1343, "MiB", "CUDA context and kernels before any tensor, measured on a V100",
        "Hugging Face transformers docs, Model training anatomy"),
    "cuda_context_rtx6000ada_lazy": Reported(
        426, "MiB", "a PyTorch process's CUDA context with lazy module loading on an RTX 6000 Ada, after "
        "torch.cuda.mem_get_info (PyTorch 2.10.0+cu130), as nvidia-smi prints it",
        "unslothai/unsloth-zoo pull request 1053, live measurements"),
    "cuda_context_rtx3090_lazy": Reported(
        256, "MiB", "a PyTorch process's CUDA context before any tensor on an RTX 3090 (torch 2.7.1+cu128, driver "
        "610.43.03, lazy module loading, CUDA's Linux default since 12.2), as nvidia-smi prints it",
        "invoke-ai/InvokeAI issue 9413"),
    "cuda_context_b200_lazy": Reported(
        612, "MiB", "a PyTorch process's CUDA context on a B200 after torch.cuda.mem_get_info, as nvidia-smi's "
        "per-process query prints it", "unslothai/unsloth pull request 8669, measured"),
    "cuda_context_rtx3090_eager": Reported(
        1687, "MiB", "a PyTorch process's CUDA context on an RTX 3090 after torch.Tensor(1).cuda() with torch "
        "1.8.2+cu111 (before lazy loading existed), as nvidia-smi prints it", "pytorch/pytorch issue 55277"),
    "cuda_lazy_loading_runtime": Reported(
        11.7, "CUDA version", "lazy loading first available in the CUDA 11.7 runtime (driver 515 or newer); "
        "enabled by default on Linux from 12.2", "NVIDIA CUDA C++ Programming Guide, Lazy Loading"),
    "lora_adapter_latency": Reported(
        30.3, "% slower forward pass", "Houlsby-style adapters made a GPT-2 medium forward pass 30.3% slower "
        "(25.8 ms against 19.8 ms at batch 1, 128 tokens); merged LoRA ran as fast as the finetuned model",
        "Hu et al. 2021, LoRA, arXiv:2106.09685, Table 1, on an NVIDIA Quadro RTX8000"),
    "lora_no_added_latency": Reported(
        0, "ms added at inference", "LoRA's update merges into the frozen weights, so it adds no inference latency",
        "Hu et al. 2021, LoRA, arXiv:2106.09685, abstract and section 4.1"),
    "lora_quality": Reported(
        0, "(on par)", "LoRA performed on par with or better than full finetuning in model quality on RoBERTa, "
        "DeBERTa, GPT-2 and GPT-3", "Hu et al. 2021, LoRA, arXiv:2106.09685, abstract"),
}


def cite(key: str) -> str:
    """'claim (source)' for a reported figure, ready for lesson prose."""
    if key not in REPORTED:
        raise ValueError(f"reported figure must be one of {', '.join(REPORTED)}; got {key!r}")
    item = REPORTED[key]
    return f"{item.claim} ({item.source})"

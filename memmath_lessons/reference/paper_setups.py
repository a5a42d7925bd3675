"""The training setups behind the PEFT papers' headline memory numbers, so a lesson can recompute them.

A paper reports one number ("1.2 TB", "a single 48 GB GPU"); what it counted depends on its
setup. Each Setup here names the model preset, the method, the precision recipe, the optimizer
and the batch, with the source of every choice, and turns into a TrainingMemory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memmath.methods import Full, LoRA, Method, QLoRA
from memmath.recipes import Recipe
from memmath.memory import training_memory
from memmath.training import TrainingMemory

# bitsandbytes' 32-bit (paged) AdamW on a bf16 model: 16-bit weights and gradients, fp32 optimizer
# states, no fp32 master copy: 2 + 2 + 2 x 4 = 12 B per trainable parameter with Adam.
BF16_FP32_STATES = Recipe(
    name="bf16_fp32_states", weight_bits=16, grad_bits=16,
    master_bits=0, state_bits=32, accum_bits=0, activation_bits=16, states_follow_params=False,
    description="bf16 weights and gradients, fp32 optimizer states, no master copy (2 + 2 + 8 = 12 B/param with Adam).",
    source="Dettmers et al. 2023 (QLoRA); artidoro/qlora qlora.py: --bf16 with optim paged_adamw_32bit",
)

# Houlsby et al. 2019, section 3.2: on GLUE the adapter size was picked per task from these.
HOULSBY_GLUE_BOTTLENECKS = (8, 64, 256)


@dataclass(frozen=True)
class Setup:
    """One published training configuration: everything training_memory needs, and where it is from."""

    model: str
    method: Method
    precision: object
    optimizer: str
    batch_size: int = 1
    seq_len: int | None = None
    checkpointing: bool = False
    description: str = ""
    source: str = ""

    def memory(self, **changes) -> TrainingMemory:
        """The TrainingMemory of this setup; keyword arguments replace fields (method=, batch_size=, ...)."""
        return training_memory(self.run(**changes))

    def run(self, **changes):
        """The memmath.Run of this setup (what memmath.requirement judges); keyword arguments replace fields."""
        from memmath.run import Run

        setup = replace(self, **changes) if changes else self
        return Run(setup.model, precision=setup.precision, optimizer=setup.optimizer, method=setup.method,
                   batch_size=setup.batch_size, seq_len=setup.seq_len, checkpointing=setup.checkpointing)


SETUPS: dict[str, Setup] = {
    # Hu et al. 2021, section 4.2: GPT-3 175B with Adam, LoRA r=4 on W_q and W_v, 16-bit weights.
    "lora_gpt3_full": Setup(
        "gpt3-175b", Full(), "bf16", "adam",
        description="GPT-3 175B, full finetuning with Adam, 16-bit weights and states (no activations)",
        source="Hu et al. 2021, LoRA, section 4.2"),
    "lora_gpt3_lora": Setup(
        "gpt3-175b", LoRA(rank=4, targets=("q", "v"), adapter_format=None), "bf16", "adam",
        description="GPT-3 175B, LoRA r=4 on q and v with Adam, 16-bit adapters (no activations)",
        source="Hu et al. 2021, LoRA, section 4.2"),
    # Dettmers et al. 2023 and artidoro/qlora scripts/finetune_guanaco_65b.sh: LLaMA 65B, NF4 with
    # double quantization, LoRA r=64 on every linear layer, bf16 adapters, paged 32-bit AdamW,
    # gradient checkpointing, batch 4, up to 16 source + 512 target tokens.
    "qlora_guanaco_65b": Setup(
        "llama-65b", QLoRA(rank=64, targets="all", adapter_format="bf16", double_quant=True),
        BF16_FP32_STATES, "adamw", batch_size=4, seq_len=528, checkpointing=True,
        description="LLaMA 65B, QLoRA r=64 on all linear layers, bf16 adapters, 32-bit AdamW, "
                    "checkpointing, batch 4 x 528 tokens",
        source="Dettmers et al. 2023, QLoRA; artidoro/qlora scripts/finetune_guanaco_65b.sh"),
    # Dettmers et al. 2023, introduction: "regular 16-bit finetuning" of LLaMA 65B, > 780 GB.
    "qlora_65b_full_16bit": Setup(
        "llama-65b", Full(), BF16_FP32_STATES, "adamw",
        description="LLaMA 65B, full 16-bit finetuning with 32-bit Adam states (no activations)",
        source="Dettmers et al. 2023, QLoRA, introduction"),
}


def get_setup(name: str) -> Setup:
    """A published setup by name (see SETUPS); ValueError listing them otherwise."""
    if name not in SETUPS:
        raise ValueError(f"setup must be one of {', '.join(SETUPS)}; got {name!r}")
    return SETUPS[name]

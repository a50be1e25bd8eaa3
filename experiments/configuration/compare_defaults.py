"""What ``famlab compare`` adds to the presets it is given, and which device each of its worker processes gets.

When the defaults apply (:data:`RULE`, the one statement of it; ``famlab compare --help`` prints it and
docs/config.md quotes it; :func:`comparison_presets` is the code): the defaults (TINY_DEFAULTS) apply to every
comparison at the tiny size: one that names no size preset (tiny is added), names tiny, or names a preset that
extends tiny (cpu). Each default applies unless its key is set by a key=value override or by a preset you name that
is not a size preset (cpu.yaml, a YAML file of your own); a size preset's own keys do not count, so famlab compare
tiny pretrains the defaults' 4,500 steps, not tiny.yaml's 200. With small or base no default applies.

``famlab compare --dry-run`` prints the config the defaults compose to (each applied default marked), the budget
plan and the jobs, without running anything.

``compare.workers`` > 1 runs jobs side by side, each in a process of its own on one device: on a machine with
visible CUDA GPUs worker ``i`` sees only GPU ``i`` of them (round robin when there are more workers than GPUs,
:func:`worker_device`), set as its ``CUDA_VISIBLE_DEVICES`` before CUDA starts; else the CPU, its cores shared out.
The tiny comparison's default is 2 workers, or one per GPU on a machine with several (:func:`with_gpu_workers`).
"""

from __future__ import annotations

import os

from famlab.experiments.configuration.compose import expand_presets, flatten, preset_node, section_dict
from famlab.experiments.configuration.config import GPU_ACCELERATORS

SIZES = ("tiny", "small", "base")
# The tiny comparison (applied before the user's overrides and the keys of a preset they name): the whole protocol
# within 15 minutes on 2 CPU cores, a smoke-scale run whose gains sit close to seed variation (the cpu preset pretrains
# longer; why each default, and what it measured: docs/protocol.md, The default comparison). Most of the time goes to
# pretraining: the median-cost family trains trainer.max_steps steps and the others match its FLOPs. Fine-tuning is
# low-resource (1,000 labelled definitions; 500 each for validation and test), where what pretraining put into the
# body shows, and every side, pretrained or scratch, gets the same (body lr x head lr) grid, seeds and validation-based
# selection (at every scale the grid is the preset's finetune.lr and three times it, each with a 10x head lr;
# validation chooses per side).
TINY_DEFAULTS = [
    "trainer.max_steps=4500",  # most of the 15-minute budget goes to pretraining
    "compare.workers=2",  # two jobs side by side, one thread each (one per GPU on a machine with several)
    "trainer.val_check_interval=500",
    "trainer.limit_val_batches=4",
    "compare.task_limit=1000",
    "compare.task_eval_limit=500",
    # 150 steps, validated twice; the grid selects on seed 0 and seeds 1, 2 train at the selected point only, which
    # leaves more of the time to pretraining
    "finetune.max_steps=150",
    "finetune.val_every=75",
    "finetune.select_seeds=1",
    "finetune.batch_size=32",
    "trainer.progress_bar=false",
]
WORKERS = "compare.workers"
# when TINY_DEFAULTS apply, in words (comparison_presets is the code; tests/experiments/test_compare_defaults_rule.py
# checks they agree on composed configs); the module docstring, famlab compare --help and docs/config.md say it so
RULE = ("the defaults (TINY_DEFAULTS) apply to every comparison at the tiny size: one that names no size preset "
        "(tiny is added), names tiny, or names a preset that extends tiny (cpu). Each default applies unless its key "
        "is set by a key=value override or by a preset you name that is not a size preset (cpu.yaml, a YAML file of "
        "your own); a size preset's own keys do not count, so famlab compare tiny pretrains the defaults' 4,500 "
        "steps, not tiny.yaml's 200. With small or base no default applies.")


def comparison_presets(presets: list[str], overrides: list[str]) -> tuple[list[str], list[str]]:
    """The presets a comparison composes (``extends`` chains expanded; ``tiny`` first when none is a size) and the
    :data:`TINY_DEFAULTS` that apply: with ``tiny``, those whose key neither an override nor a non-size preset the
    user named sets (``famlab compare cpu`` keeps cpu.yaml's trainer.max_steps)."""
    presets = expand_presets(list(presets))
    if not any(p in SIZES for p in presets):
        presets = ["tiny", *presets]
    if "tiny" not in presets:
        return presets, []
    named = user_keys(presets, overrides)
    return presets, [d for d in TINY_DEFAULTS if d.split("=", 1)[0] not in named]


def user_keys(presets: list[str], overrides: list[str]) -> set[str]:
    """The dotted keys the user set: by an override, or in a preset they named that is not a size preset."""
    user_flat = {t.lstrip("-").split("=", 1)[0] for t in overrides}
    return user_flat | {key for p in presets if p not in SIZES for key in preset_keys(p)}


def preset_keys(preset: str) -> set[str]:
    """The dotted keys a preset file sets (``trainer.max_steps``), ``by_family`` sections included without it."""
    node = section_dict(preset_node(preset))  # a registered family's name too (its spec's preset)
    node.pop("extends", None)
    by_family = node.pop("by_family", None) or {}
    return set(flatten(node)) | {key for section in by_family.values() for key in flatten(section)}


def visible_gpus(accelerator: str) -> list[str]:
    """The CUDA GPUs a run with ``trainer.accelerator=accelerator`` may use, as ``CUDA_VISIBLE_DEVICES`` names them
    (``["0", "1"]``, or that variable's own entries); ``[]`` for the CPU or another accelerator."""
    if accelerator not in GPU_ACCELERATORS:
        return []
    import torch

    count = torch.cuda.device_count()
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed[:count] if len(listed) >= count and listed else [str(i) for i in range(count)]

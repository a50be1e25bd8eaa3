"""Early checks of the ``trainer.*`` values famlab hands to Lightning, with the valid choices in the message.

Lightning checks these only when a ``Trainer`` is built - after the tokenizer has been trained and a W&B
run opened. The choices come from Lightning itself, so a new Lightning strategy or accelerator is accepted
without a change here: ``AcceleratorRegistry`` and ``StrategyRegistry`` are public; the precision values
are the ``Literal`` types Lightning's connector checks against (``lightning.fabric.connector``), which are
private, so they are read through ``experiments/libraries/internals.py`` (``lightning_precisions``), and
``tests/experiments/test_internals.py`` fails if Lightning moves them.
"""

from __future__ import annotations

import os

from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.configuration.placement import check_strategy
from famlab.experiments.configuration.plans import TrainerSetup
from famlab.experiments.libraries.internals import lightning_precisions

FAMLAB_VALUES = ("auto",)  # famlab's own value for precision (bf16-mixed on a CUDA GPU with bf16, else 32-true)


def accelerator_choices() -> list[str]:
    """``auto``, ``gpu`` (Lightning's alias for the machine's GPU kind) and Lightning's registered accelerators."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    return ["auto", "gpu", *sorted(AcceleratorRegistry.available_accelerators())]


def strategy_choices() -> list[str]:
    """``auto`` and Lightning's registered strategy names."""
    from lightning.pytorch.strategies import StrategyRegistry

    return ["auto", *StrategyRegistry.available_strategies()]


def precision_choices() -> list[str]:
    """famlab's ``auto`` plus the precision strings Lightning's ``Trainer(precision=...)`` accepts."""
    return [*FAMLAB_VALUES, *lightning_precisions()]


def _choice(key: str, value: str, choices: list[str]) -> None:
    if value not in choices:
        raise ConfigInputError(f"{key}={value!r} is not one of: {', '.join(choices)}")


def parse_devices(value: int | str) -> int | str:
    """``trainer.devices`` as Lightning takes it: ``auto``, a count (``-1`` = all) or an id list ``"0,1"``."""
    text = str(value).strip()
    if text == "auto":
        return "auto"
    if text.lstrip("-").isdigit():
        count = int(text)
        if count == 0 or count < -1:
            raise ConfigInputError(f"trainer.devices={value} must be auto, a count >= 1, -1 (all) or ids like 0,1")
        return count
    ids = [i.strip() for i in text.strip("[]").split(",") if i.strip()]
    if not ids or not all(i.isdigit() for i in ids):
        raise ConfigInputError(f"trainer.devices={value!r} must be auto, a count >= 1, -1 (all) or ids like 0,1")
    return text


def check_devices(accelerator: str, devices: int | str) -> None:
    """A device count the machine cannot give is a config error (Lightning would fail deep in setup, or,
    on CPU, start that many processes on too few cores)."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if accelerator in ("gpu", "cuda") and gpus == 0:
        raise ConfigInputError(f"trainer.accelerator={accelerator} but this machine has no CUDA GPU; use auto or cpu")
    on_gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and gpus > 0)
    available, what = (gpus, "CUDA GPUs") if on_gpu else (os.cpu_count() or 1, "CPU cores")
    if isinstance(devices, str) and devices != "auto" and on_gpu:
        missing = [i for i in devices.strip("[]").split(",") if i.strip() and int(i) >= available]
        if missing:
            raise ConfigInputError(f"trainer.devices={devices} names GPU {missing[0].strip()}, but this machine has "
                                   f"{available} {what}")
    if isinstance(devices, int) and accelerator in ("gpu", "cuda", "cpu", "auto") and devices > available:
        raise ConfigInputError(f"trainer.devices={devices} but this machine has {available} {what}; "
                               "lower trainer.devices (multi-node: trainer.num_nodes)")


def _check_available(name: str) -> None:
    """An accelerator Lightning knows but this machine lacks (``mps`` on Linux, ``tpu`` without torch_xla)."""
    if name == "gpu":
        return  # Lightning picks cuda or mps; check_devices reports a machine without either
    from lightning.pytorch.accelerators import AcceleratorRegistry

    if not AcceleratorRegistry[name]["accelerator"].is_available():
        raise ConfigInputError(f"trainer.accelerator={name} is not available on this machine; use auto or cpu")


def _check_strategy(name: str) -> None:
    """Build the registered strategy once: a missing backend (DeepSpeed, torch_xla) fails here, in one line."""
    if name == "auto":
        return
    from lightning.pytorch.strategies import StrategyRegistry

    try:
        StrategyRegistry.get(name)
    except Exception as e:  # noqa: BLE001 - Lightning raises several kinds; any of them means "not usable here"
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigInputError(f"trainer.strategy={name} cannot be used on this machine ({first})") from None


def check_lightning_settings(t: TrainerSetup) -> dict[str, int | str]:
    """Check ``trainer.{accelerator, devices, strategy, precision, num_nodes}`` against Lightning.

    Returns:
        the parsed ``devices`` under ``"devices"`` (what ``Trainer(devices=...)`` is given).

    Raises:
        ConfigInputError: one line naming the key, the value and the valid choices.
    """
    # "auto" is valid for all three; importing Lightning (seconds) is left to the runs that set a value
    if t.accelerator != "auto":
        _choice("trainer.accelerator", t.accelerator, accelerator_choices())
        _check_available(t.accelerator)
    if t.strategy != "auto":
        _choice("trainer.strategy", t.strategy, strategy_choices())
        check_strategy(t)
    if t.precision != "auto":
        _choice("trainer.precision", t.precision, precision_choices())
    if not 1 <= t.num_nodes <= 100_000:
        raise ConfigInputError(f"trainer.num_nodes={t.num_nodes} must be in [1, 100000]")
    devices = parse_devices(t.devices)
    check_devices(t.accelerator, devices)
    _check_strategy(t.strategy)
    return {"devices": devices}

"""The device's peak FLOP/s and a precision's matmul dtype: the denominator of MFU, for training and ``famlab bench``.

Shared by ``experiments/commands/pretrain.py`` (the ``perf/mfu`` metric) and ``experiments/perf/bench.py``, so
training does not import the benchmark.
"""

from __future__ import annotations

import time
import warnings

import torch

# Dense bf16 tensor-core peaks (FLOP/s, no sparsity) from the vendors' datasheets, matched on the device name.
GPU_PEAKS_BF16 = {
    "H200": 989e12,
    "H100": 989e12,  # SXM; the PCIe card is 756e12
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
    "A10": 125e12,
    "RTX 4090": 165e12,
    "RTX 3090": 71e12,
    "V100": 125e12,  # fp16 (no bf16 on Volta)
    "T4": 65e12,  # fp16
}


def precision_dtype(precision: str) -> torch.dtype:
    """The matmul dtype of a Lightning precision string (``bf16-mixed`` -> bfloat16, ``32-true`` -> float32)."""
    head = precision.split("-")[0]
    return {"bf16": torch.bfloat16, "16": torch.float16, "64": torch.float64, "transformer": torch.bfloat16}.get(
        head, torch.float32)


def peak_flops(device: torch.device, *, size: int = 2048, repeats: int = 5,
               dtype: torch.dtype = torch.bfloat16) -> tuple[float, str]:
    """Peak FLOP/s for MFU at ``dtype`` and how it was obtained.

    GPU: Lightning's ``get_available_flops`` (datasheet peaks keyed by card and dtype; fp32 counts as TF32
    when ``torch.get_float32_matmul_precision()`` allows it), else, for 16-bit dtypes only, the bf16
    datasheet peak in ``GPU_PEAKS_BF16`` (cards Lightning does not name, e.g. a plain "NVIDIA H200");
    NaN when neither knows the card. CPU: a measured fp32 matmul.
    """
    if device.type == "cuda":
        from lightning.fabric.utilities.throughput import get_available_flops

        name = torch.cuda.get_device_name(device)
        with warnings.catch_warnings():  # an unknown card is reported through the returned reason instead
            warnings.simplefilter("ignore")
            flops = get_available_flops(device, dtype)
        if flops:
            return float(flops), f"Lightning's datasheet peak of {name} at {dtype}"
        if dtype in (torch.bfloat16, torch.float16):
            for key, peak in GPU_PEAKS_BF16.items():
                if key in name:
                    return peak, f"datasheet bf16 dense peak of {name}"
        return float("nan"), f"no datasheet peak known for {name} at {dtype}"
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best, f"measured fp32 matmul {size}x{size}x{size}, best of {repeats}"

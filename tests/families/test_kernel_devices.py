"""`dispatch.use_fast` decides per device: each kernel's CPU rule, and on CUDA the reference (standard) path except
for the device-neutral kernels that only merge operations (context_kv, joint_embedding). No GPU is needed:
`dispatch.as_device` makes the rules read another device type."""

from __future__ import annotations

import pytest
import torch
from famlab.families.kernels.dispatch import Kernel, as_device, device_type, reference_only, use_fast

# (kernel, main input, other) at the inputs where the CPU rule says yes
X, W = torch.randn(2, 4), torch.ones(4)
BIAS = torch.zeros(1, 1, 2, 2, requires_grad=True)
CPU_YES = [(Kernel.LINEAR_CROSS_ENTROPY, X, None), (Kernel.BIASED_ATTENTION, X, BIAS), (Kernel.RMS_NORM, X, W),
           (Kernel.CONTEXT_KV, X, None), (Kernel.JOINT_EMBEDDING, torch.zeros(2, 3, dtype=torch.long), None)]
# the rule per device type, kernel by kernel, at those inputs
RULES = {
    "cpu": {k: True for k in Kernel},
    "cuda": {Kernel.LINEAR_CROSS_ENTROPY: False, Kernel.BIASED_ATTENTION: False, Kernel.RMS_NORM: False,
             Kernel.CONTEXT_KV: True, Kernel.JOINT_EMBEDDING: True},
}


@pytest.mark.parametrize("device", sorted(RULES))
def test_each_kernels_rule_per_device(device: str) -> None:
    with as_device(device):
        got = {kernel: use_fast(kernel, x, other) for kernel, x, other in CPU_YES}
    assert got == RULES[device]


def test_other_accelerators_take_the_reference_like_cuda() -> None:
    """Nothing was measured on MPS / XPU either: only the device-neutral kernels run there."""
    for kind in ("mps", "xpu"):
        with as_device(kind):
            assert {k for k, x, o in CPU_YES if use_fast(k, x, o)} == {Kernel.CONTEXT_KV, Kernel.JOINT_EMBEDDING}


def test_the_tensors_device_decides_without_an_override() -> None:
    """Without ``as_device`` the main input's own device is read (meta tensors are not a CPU)."""
    meta = torch.empty(2, 4, device="meta")
    assert device_type(X) == "cpu" and device_type(meta) == "meta"
    assert use_fast(Kernel.LINEAR_CROSS_ENTROPY, X) and not use_fast(Kernel.LINEAR_CROSS_ENTROPY, meta)
    with as_device("cpu"):
        assert use_fast(Kernel.LINEAR_CROSS_ENTROPY, meta)


def test_as_device_nests_and_restores_and_reference_only_wins() -> None:
    with pytest.raises(RuntimeError, match="inside"), as_device("cuda"):
        with as_device("cpu"):
            assert use_fast(Kernel.LINEAR_CROSS_ENTROPY, X)
        assert not use_fast(Kernel.LINEAR_CROSS_ENTROPY, X)
        with reference_only():
            assert not use_fast(Kernel.CONTEXT_KV, X)
        raise RuntimeError("inside")
    assert device_type(X) == "cpu" and use_fast(Kernel.LINEAR_CROSS_ENTROPY, X)


def test_cpu_conditions_still_hold() -> None:
    """The CPU rules' conditions: RMSNorm only fp32 with autograd, biased attention only a float bias with a
    gradient (the CUDA rules say no whatever the inputs)."""
    assert not use_fast(Kernel.RMS_NORM, X.bfloat16(), W)
    with torch.no_grad():
        assert not use_fast(Kernel.RMS_NORM, X, W)
    assert not use_fast(Kernel.BIASED_ATTENTION, X, BIAS.detach())
    assert not use_fast(Kernel.BIASED_ATTENTION, X, torch.ones(1, 1, 2, 2, dtype=torch.bool))

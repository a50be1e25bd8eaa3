"""``torch.compile`` a network in place, with an eager fallback that logs when it is taken.

``nn.Module.compile`` (not ``torch.compile(net)``) keeps the parameter names, so checkpoints of compiled and
eager runs load into each other (``torch.compile(net)`` would prefix every key with ``_orig_mod.``).
Compilation is lazy: errors (no C++ compiler for inductor, an unsupported op) surface on the first call, so
that call is guarded; if it fails the network runs eagerly from then on and a warning says why.

torch has no public hook for that guard, so this module is where famlab touches torch internals:
``nn.Module._compiled_call_impl`` (what ``nn.Module.compile`` sets and ``__call__`` runs when set) and
``nn.Module._call_impl`` (the eager call). ``tests/experiments/test_compile.py`` checks both still behave so
(docs/architecture.md, "Library internals we rely on").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeVar, cast

from torch import nn

if TYPE_CHECKING:
    from famlab.families.network import Network

log = logging.getLogger("famlab.compile")

_Net = TypeVar("_Net", bound="nn.Module | Network")  # a famlab network is an nn.Module


def compile_network(net: _Net, *, backend: str = "inductor", **options: Any) -> _Net:
    """Compile ``net``'s forward in place; returns ``net`` (compiled, or eager after a logged fallback).

    Args:
        net: Any module (a famlab network).
        backend: ``torch.compile`` backend (``inductor``; ``aot_eager`` / ``eager`` for debugging).
        **options: Passed to ``torch.compile`` (e.g. ``dynamic=False``, ``mode="max-autotune"``).
    """
    module = cast(nn.Module, net)  # every famlab network is an nn.Module
    try:
        module.compile(backend=backend, **options)
    except Exception as e:  # noqa: BLE001 - any failure means "run eager" (a failing optional speed-up never stops a run)
        log.warning("torch.compile unavailable (%s: %s); running eager", type(e).__name__, e)
        return net
    compiled = module._compiled_call_impl

    def first_call(*args: Any, **kwargs: Any) -> Any:
        try:
            out = compiled(*args, **kwargs)
        except Exception as e:  # noqa: BLE001
            log.warning("torch.compile failed on the first call (%s: %s); running eager", type(e).__name__, e)
            module._compiled_call_impl = None
            return module._call_impl(*args, **kwargs)
        module._compiled_call_impl = compiled  # compiled and working: drop this guard
        return out

    module._compiled_call_impl = first_call
    return net


def is_compiled(net: nn.Module) -> bool:
    """Whether ``net`` runs through ``torch.compile`` (False after an eager fallback)."""
    return getattr(net, "_compiled_call_impl", None) is not None

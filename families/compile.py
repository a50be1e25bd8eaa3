"""``torch.compile`` with an eager fallback: a whole training loss (network + objective) or a network in place.

A training step compiles whole: :func:`compile_fn` wraps the function that maps a batch to its loss (the network's
forward and the objective's loss, so the LM head, the cross-entropy and their backward are in the graph too).
Compilation is lazy, and a compiled function can fail at any call, not only the first (a recompilation for new
shapes or a new grad mode, an inductor error on one graph): every call is guarded, and the first failure switches
that function to eager for good, with one warning naming the error. A failure in the compiled *backward* happens
inside ``loss.backward()``, outside the guarded call, and is raised as is.

:func:`compile_network` compiles a network in place with ``nn.Module.compile`` (not ``torch.compile(net)``,
which would prefix every state-dict key with ``_orig_mod.``); torch has no public hook for its guard, so this
module is where famlab touches torch internals: ``nn.Module._compiled_call_impl`` (what ``nn.Module.compile``
sets and ``__call__`` runs when set) and ``nn.Module._call_impl`` (the eager call).
``tests/experiments/test_compile.py`` checks both still behave so (docs/architecture.md, "Library internals we
rely on").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from famlab.families.network import Network

log = logging.getLogger("famlab.compile")

_Net = TypeVar("_Net", bound="nn.Module | Network")  # a famlab network is an nn.Module
_R = TypeVar("_R")


def _summary(error: BaseException) -> str:
    """``Type: the message's first line`` (inductor's messages run to pages), continued while a line ends in ``:``
    (dynamo's ``backend='x' raised:`` is followed by the real error), at most 300 characters."""
    lines = []
    for line in (line.strip() for line in str(error).splitlines()):
        if line:
            lines.append(line)
            if not line.endswith(":") or len(lines) == 3:
                break
    return f"{type(error).__name__}: {' '.join(lines)}"[:300]


class Guarded(Generic[_R]):
    """``compiled(*args)`` until a call of it raises; from then on ``eager(*args)`` (that call included).

    Attributes:
        name: What is compiled, for the warning (``"the training loss"``).
        error: ``Type: message`` of the failure that switched to eager; None while compiled.
    """

    def __init__(self, name: str, compiled: Callable[..., _R] | None, eager: Callable[..., _R],
                 on_fallback: Callable[[], None] | None = None) -> None:
        self.name, self.compiled, self.eager, self.on_fallback = name, compiled, eager, on_fallback
        self.error: str | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> _R:
        if self.compiled is not None:
            try:
                return self.compiled(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - any failure means "run eager": an optional speed-up never stops a run
                self.fail(e)
        return self.eager(*args, **kwargs)

    def fail(self, error: BaseException) -> None:
        """Switch to eager for good and say why, once."""
        self.compiled, self.error = None, _summary(error)
        log.warning("torch.compile of %s failed (%s); running eager from now on", self.name, self.error)
        if self.on_fallback is not None:
            self.on_fallback()

    @property
    def is_compiled(self) -> bool:
        """Whether calls still go through ``torch.compile`` (False after the fallback)."""
        return self.compiled is not None


def compile_fn(fn: Callable[..., _R], name: str, *, backend: str = "inductor", **options: Any) -> Guarded[_R]:
    """``torch.compile(fn)`` guarded at every call (:class:`Guarded`); eager at once if torch.compile refuses it.

    Args:
        fn: The function to compile, e.g. ``lambda batch: objective.loss(net, batch).loss``.
        name: What ``fn`` is, for the fallback warning.
        backend: ``torch.compile`` backend (``inductor``; ``aot_eager`` / ``eager`` for debugging).
        **options: Passed to ``torch.compile`` (e.g. ``fullgraph=True``, ``dynamic=False``).
    """
    guarded: Guarded[_R] = Guarded(name, None, fn)
    try:
        guarded.compiled = torch.compile(fn, backend=backend, **options)
    except Exception as e:  # noqa: BLE001
        guarded.fail(e)
    return guarded


def compile_network(net: _Net, *, backend: str = "inductor", **options: Any) -> _Net:
    """Compile ``net``'s forward in place, every call guarded (:class:`Guarded`); returns ``net``.

    Args:
        net: Any module (a famlab network).
        backend: ``torch.compile`` backend (``inductor``; ``aot_eager`` / ``eager`` for debugging).
        **options: Passed to ``torch.compile`` (e.g. ``dynamic=False``, ``mode="max-autotune"``).
    """
    module = cast(nn.Module, net)  # every famlab network is an nn.Module
    try:
        module.compile(backend=backend, **options)
    except Exception as e:  # noqa: BLE001
        log.warning("torch.compile of the network failed (%s); running eager from now on", _summary(e))
        return net

    def eager_from_now_on() -> None:
        module._compiled_call_impl = None

    module._compiled_call_impl = Guarded("the network", module._compiled_call_impl, module._call_impl,
                                         on_fallback=eager_from_now_on)
    return net


def is_compiled(net: nn.Module) -> bool:
    """Whether ``net`` runs through ``torch.compile`` (False after an eager fallback)."""
    return getattr(net, "_compiled_call_impl", None) is not None

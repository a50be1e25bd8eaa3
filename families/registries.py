"""One shape for every table of named choices: :class:`Registry`, and :class:`Name`, the ``str`` an extensible kind's
values are.

Families (``model.family``), position schemes (``model.pos``), objectives (``objective.name``, one registry per
architecture), norms, activations and feed-forward kinds are each one :class:`Registry`. The built-in choices are
registered into it the way a plugin registers one (:meth:`Registry.register`), then :meth:`Registry.seal` marks them
built in; a lookup is the same for both. Unregistering refuses a built-in choice and an unknown one, and an unknown
name is one error line listing the valid names under the config key (docs/architecture.md, Plugins).

The lowest layer of ``famlab.families``: it imports nothing of famlab, so ``objectives`` and ``experiments`` use it
too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from types import FrameType, MappingProxyType
from typing import Generic, TypeVar

T = TypeVar("T")


class Name(str):
    """A registered choice's name: a plain ``str`` (equal to, hashed and printed as its text) with the ``.value`` an
    Enum member has, so code reads ``cfg.model.family.value`` whatever the kind. Which names are valid is the
    registry's to say (``ModelConfig`` checks them), not the class's: any text makes one, and one unpickles in a
    process whatever it has registered."""

    __slots__ = ()

    @property
    def value(self) -> str:
        """The name as a plain ``str``."""
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str.__repr__(self)})"


class Registry(Generic[T]):
    """The choices of one kind by name, in registration order, the built-in ones first.

    Args:
        key: the config key whose values are the names (``model.pos``); every message names it.
        error: the exception raised for an unknown name, a taken name or a refused removal (a ValueError subclass:
            ``ConfigError``, ``ObjectiveError``).
    """

    def __init__(self, key: str, error: type[ValueError] = ValueError) -> None:
        self.key = key
        self.error = error
        self._items: dict[str, T] = {}
        self._builtin: frozenset[str] = frozenset()
        self._origin: dict[str, str] = {}

    def register(self, name: str, item: T) -> T:
        """Add ``item`` as ``name``; returns it. Refused: a name taken, or not a lower-case identifier."""
        name = str(name)
        if name in self._items:
            raise self.error(f"{self.key}={name} is registered already")
        if not (name.isidentifier() and name == name.lower()):
            raise self.error(f"{self.key}={name!r}: a name is a lower-case identifier")
        self._items[name] = item
        origin = _caller_module()
        if origin is not None:
            self._origin[name] = origin
        return item

    def unregister(self, name: str) -> None:
        """Remove a name added since :meth:`seal`; a built-in name and an unknown name are refused."""
        name = str(name)
        if name in self._builtin:
            raise self.error(f"{self.key}={name} is built in and cannot be unregistered")
        if name not in self._items:
            raise self.error(f"{self.key}={name} is not registered (registered: {', '.join(self._items)})")
        del self._items[name]
        self._origin.pop(name, None)

    def seal(self) -> None:
        """Mark every name registered so far built in (the module that registers the built-in choices calls it)."""
        self._builtin = frozenset(self._items)
        self._origin.clear()

    def get(self, name: str) -> T:
        """The item registered as ``name``; an unknown name is one line naming the key and the valid names."""
        found = self._items.get(str(name))
        if found is None:
            raise self.error(f"{self.key}={str(name)!r} is not one of: {', '.join(self._items)}")
        return found

    def names(self) -> tuple[str, ...]:
        """Every registered name, in registration order."""
        return tuple(self._items)

    def builtins(self) -> tuple[str, ...]:
        """The built-in names, in registration order."""
        return tuple(n for n in self._items if n in self._builtin)

    def added(self) -> tuple[str, ...]:
        """The names registered since :meth:`seal` (by plugins or tests), in registration order."""
        return tuple(n for n in self._items if n not in self._builtin)

    def origin(self, name: str) -> str | None:
        """The module outside famlab that registered ``name``; None for famlab's own (and the built-in) names."""
        return self._origin.get(str(name))

    def view(self) -> Mapping[str, T]:
        """A live read-only mapping of the registry (a name registered later is in it)."""
        return MappingProxyType(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and str(name) in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.key}: {', '.join(self._items)})"


def _caller_module() -> str | None:
    """The first module up the stack that is not famlab's: who registered (None when famlab itself did)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if not module.startswith(("famlab.", "importlib")) and module != "famlab":
            return module
        frame = frame.f_back
    return None


__all__ = ["Name", "Registry"]

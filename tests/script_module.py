"""Import a repository script (``scripts/<name>.py``) as a module for a test, and drop it afterwards."""

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def script_module(name: str, folder: str = "scripts") -> Iterator[ModuleType]:
    """``<folder>/<name>.py`` imported as module ``name`` (registered in ``sys.modules`` while in use, so its
    dataclasses resolve their own module)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)

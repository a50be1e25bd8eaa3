"""Hugging Face ``datasets`` access (optional extra), imported lazily.

``hf:<name>[:<config>]`` loads a hub dataset (from the user's cache, or the hub when online). For the
file builders ``json``, ``csv``, ``text`` and ``parquet`` the part after the second colon is a local
file or glob instead of a config (``hf:json:data/train.jsonl``), which loads offline through the same code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from famlab.datamodules.errors import DataError

if TYPE_CHECKING:
    from datasets import DatasetDict, IterableDatasetDict

FILE_BUILDERS = {"json", "csv", "text", "parquet"}


def parse_hf_spec(spec: str) -> tuple[str, str | None]:
    """``"hf:glue:sst2"`` -> ``("glue", "sst2")``; ``"hf:wikitext"`` -> ``("wikitext", None)``."""
    body = spec[len("hf:") :]
    name, _, config = body.partition(":")
    if not name:
        raise DataError(f"{spec}: expected hf:<name>[:<config>]")
    return name, (config or None)


def load_hf(spec: str, *, streaming: bool = False) -> DatasetDict | IterableDatasetDict:
    """Load ``spec`` as a ``datasets.DatasetDict`` (``streaming``: an ``IterableDatasetDict`` read as iterated);
    any failure becomes one-line ``DataError``."""
    name, config = parse_hf_spec(spec)
    try:
        import datasets
    except ImportError as e:
        raise DataError(f"{spec}: needs the Hugging Face 'datasets' package (pip install famlab[hf])") from e
    try:
        if name in FILE_BUILDERS and config is not None:
            ds = datasets.load_dataset(name, data_files=config, streaming=streaming)
        else:
            ds = datasets.load_dataset(name, config, streaming=streaming)
    except Exception as e:  # noqa: BLE001 - datasets raises many types (offline, missing, bad config)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataError(f"{spec}: cannot load dataset ({type(e).__name__}: {first})") from e
    kind = datasets.IterableDatasetDict if streaming else datasets.DatasetDict
    return ds if isinstance(ds, kind) else kind({"train": ds})

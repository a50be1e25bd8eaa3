"""famlab: compare BERT-, GPT- and T5-style Transformers on equal terms.

The one import name famlab installs. Its four packages live at the repository's top level and are
mapped here by the packaging (``pyproject.toml``): ``famlab.families`` (what the network is),
``famlab.objectives`` (what it is trained to do), ``famlab.datamodules`` (where tokens come from) and
``famlab.experiments`` (how a run is assembled). See ``docs/architecture.md``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("famlab")
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0+unknown"

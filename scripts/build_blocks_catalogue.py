"""Write docs/blocks.md: every block choice the model config offers, one line each with what it computes (the code's
own comment), the paper it comes from and the built-in families whose faithful defaults choose it.

Usage::

    python scripts/build_blocks_catalogue.py            # rewrite docs/blocks.md
    python scripts/build_blocks_catalogue.py --check    # exit 1 if docs/blocks.md differs from the code

The choices are read from the code, never listed here: each catalogued enum of ``famlab.families.config`` and the
built-in names of each registered kind (``POSITIONS``, ``NORMS``, ``FFN_KINDS``, ``ACTIVATIONS``: ``builtins()``; a name
registered at run time is the registering code's to document), the comment beside each member or ``Name`` constant
(``PosScheme.ROPE = PosScheme("rope")  # ...``), the attention fields of
``ModelConfig`` with the comment above each, and ``famlab.families.faithful``. Only the papers are this script's: a
member with no paper below, or a paper for a member that is gone, stops the script (``tests/test_blocks_catalogue.py``
runs it against docs/blocks.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import re
import sys
from pathlib import Path
from typing import Any

from famlab.families.config import (
    ACTIVATIONS,
    FFN_KINDS,
    NORMS,
    POSITIONS,
    Activation,
    AttnImpl,
    FFNKind,
    InitScheme,
    ModelConfig,
    Norm,
    NormPosition,
    PosScheme,
)
from famlab.families.faithful import FAITHFUL
from famlab.families.registries import Registry

OUT = Path(__file__).resolve().parents[1] / "docs" / "blocks.md"
# (section title, config key, enum or registered kind's Name class): the block kinds, in the order a layer meets them
SECTIONS: list[tuple[str, str, type]] = [
    ("Positions", "pos", PosScheme),
    ("Norms", "norm", Norm),
    ("Norm placement", "norm_position", NormPosition),
    ("Feed-forward kinds", "ffn", FFNKind),
    ("Activations", "activation", Activation),
    ("Initialisation", "init", InitScheme),
    ("Attention kernels", "attn_impl", AttnImpl),
]
ATTENTION_FIELDS = ("num_heads", "num_kv_heads", "head_dim", "qk_scale")
VASWANI = "Vaswani et al. 2017, Attention Is All You Need (arXiv:1706.03762)"
T5 = "Raffel et al. 2020, T5 (arXiv:1910.10683)"
# "<config key>=<value>" (or the field name, for the attention options) -> its paper
PAPERS: dict[str, str] = {
    "pos=learned": "Devlin et al. 2019, BERT (arXiv:1810.04805); Radford et al. 2019, GPT-2",
    "pos=sinusoidal": VASWANI,
    "pos=rope": "Su et al. 2021, RoFormer (arXiv:2104.09864)",
    "pos=alibi": "Press et al. 2022, Train Short, Test Long (arXiv:2108.12409)",
    "pos=t5_bias": f"{T5}; relative positions: Shaw et al. 2018 (arXiv:1803.02155)",
    "pos=none": "Haviv et al. 2022, Transformer Language Models without Positional Encodings Still Learn Positional "
                "Information (arXiv:2203.16634)",
    "norm=layernorm": "Ba et al. 2016, Layer Normalization (arXiv:1607.06450)",
    "norm=rmsnorm": "Zhang and Sennrich 2019, Root Mean Square Layer Normalization (arXiv:1910.07467)",
    "norm_position=pre": "Xiong et al. 2020, On Layer Normalization in the Transformer Architecture (arXiv:2002.04745)",
    "norm_position=post": VASWANI,
    "ffn=plain": VASWANI,
    "ffn=gated": "Shazeer 2020, GLU Variants Improve Transformer (arXiv:2002.05202); GLU: Dauphin et al. 2017",
    "activation=relu": "Nair and Hinton 2010, Rectified Linear Units Improve Restricted Boltzmann Machines",
    "activation=gelu": "Hendrycks and Gimpel 2016, Gaussian Error Linear Units (arXiv:1606.08415)",
    "activation=gelu_tanh": "Hendrycks and Gimpel 2016 (arXiv:1606.08415), its tanh approximation",
    "activation=silu": "Elfwing et al. 2018 (arXiv:1702.03118); Ramachandran et al. 2017, Swish (arXiv:1710.05941)",
    "init=bert": "Devlin et al. 2019, BERT (arXiv:1810.04805), its reference code",
    "init=gpt2": "Radford et al. 2019, GPT-2 (Language Models are Unsupervised Multitask Learners)",
    "init=t5": T5 + ", Mesh TensorFlow's initialisers",
    "attn_impl=sdpa": "FlashAttention: Dao et al. 2022 (arXiv:2205.14135), where torch's SDPA picks it",
    "attn_impl=math": VASWANI,
    "num_heads": VASWANI,
    "num_kv_heads": "GQA: Ainslie et al. 2023 (arXiv:2305.13245); MQA: Shazeer 2019 (arXiv:1911.02150)",
    "head_dim": T5 + " (d_kv)",
    "qk_scale": f"{VASWANI}; T5 folds it into its init: {T5}",
}


def member_comments(cls: type) -> dict[str, str]:
    """``{value: comment}`` for each ``NAME = "value"  # comment`` line of enum ``cls``'s source, or each
    ``Cls.NAME = Cls("value")  # comment`` line of its module (a registered kind's built-in names: ``PosScheme``,
    ``Norm``, ``FFNKind``, ``Activation``)."""
    if issubclass(cls, enum.Enum):
        pattern = re.compile(r'^\s+[A-Z0-9_]+ = "([^"]+)"\s+#\s*(.+)$')
        lines = inspect.getsource(cls).splitlines()
    else:
        name = re.escape(cls.__name__)
        pattern = re.compile(rf'^{name}\.[A-Z0-9_]+ = {name}\("([^"]+)"\)\s+#\s*(.+?)(?:\s+# noqa: E501)?$')
        module = inspect.getmodule(cls)
        assert module is not None, cls
        lines = inspect.getsource(module).splitlines()
    return {m.group(1): m.group(2).strip() for line in lines if (m := pattern.match(line))}


def field_comments(cls: type) -> dict[str, str]:
    """``{field: comment}``: the ``# ...`` lines right above each field of dataclass ``cls``, joined."""
    out: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("# "):
            pending.append(stripped[2:])
        elif (m := re.match(r"^\s+(\w+): ", line)) and pending:
            out[m.group(1)] = " ".join(pending)
            pending = []
        else:
            pending = []
    return out


def chosen_by(key: str, value: str) -> str:
    """The built-in families whose faithful defaults set ``model.<key>`` to ``value``."""
    names = [name for name, spec in FAITHFUL.items() if str(spec.model.get(key)) == value]
    return f" Faithful default of {', '.join(names)}." if names else ""


def comment(comments: dict[str, str], entry: str) -> str:
    """The code's comment on ``entry`` (``key=value``); a member without one stops the script."""
    value = entry.split("=", 1)[1]
    if value not in comments:
        raise SystemExit(f"build_blocks_catalogue: no comment beside {entry} in families/config.py; add one")
    return comments[value]


def paper(entry: str) -> str:
    if entry not in PAPERS:
        raise SystemExit(f"build_blocks_catalogue: no paper for {entry}; add one to PAPERS")
    return PAPERS[entry]


def render() -> str:
    """The whole of docs/blocks.md, from the code."""
    lines = ["# Block catalogue", "",
             "Every block choice a model config offers, one line each: the value, what it computes (the comment "
             "beside it in `families/config.py`), its paper and the built-in families whose faithful defaults "
             "(`famlab.families.faithful`) choose it. Generated by `python scripts/build_blocks_catalogue.py` from "
             "the code; `tests/test_blocks_catalogue.py` fails when it is out of step. A position scheme registered "
             "at run time (`register_positions`, docs/architecture.md, \"Adding a position scheme\") is not listed.",
             ""]
    used = {f"{key}={value}" for _, key, cls in SECTIONS for value in builtin_values(cls)} | set(ATTENTION_FIELDS)
    stale = sorted(set(PAPERS) - used)
    if stale:
        raise SystemExit(f"build_blocks_catalogue: papers for choices the code no longer has: {', '.join(stale)}")
    for title, key, cls in SECTIONS:
        comments = member_comments(cls)
        lines += [f"## {title} (`model.{key}`)", ""]
        lines += [f"- `{value}`: {comment(comments, f'{key}={value}')}. Paper: {paper(f'{key}={value}')}."
                  f"{chosen_by(key, value)}" for value in builtin_values(cls)]
        lines.append("")
    comments = field_comments(ModelConfig)
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    lines += ["## Attention options", ""]
    lines += [f"- `model.{name}` (default `{defaults[name]}`): {comments[name].rstrip('.')}. Paper: {paper(name)}."
              for name in ATTENTION_FIELDS]
    return "\n".join(lines) + "\n"


# each registered kind's Name class and its registry: the built-in names are the registry's, not the class's
REGISTRIES: dict[type, Registry[Any]] = {PosScheme: POSITIONS, Norm: NORMS, FFNKind: FFN_KINDS, Activation: ACTIVATIONS}


def builtin_values(cls: type) -> list[str]:
    """The members famlab ships (a position scheme, norm, feed-forward kind or activation registered at run time left
    out)."""
    if cls in REGISTRIES:
        return list(REGISTRIES[cls].builtins())
    assert issubclass(cls, enum.Enum), cls
    return [str(m.value) for m in cls]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/blocks.md differs from the code")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        if not same:
            print(f"{OUT} is out of step with the code: python scripts/build_blocks_catalogue.py", file=sys.stderr)
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``famlab generate <run_dir> prompt=...`` and ``famlab fill <run_dir> text="... [MASK] ..."``.

How each trained pair writes text (the same formats its objective trained on, objectives/denoisers.py):

| family x objective | generate (continue a prompt) | fill (each ``[MASK]``) |
|---|---|---|
| gpt x clm | ``[EOS] prompt`` -> causal sampling | error: a causal LM cannot infill |
| gpt x prefix_lm | ``[EOS] prompt`` as a bidirectional prefix | only a trailing ``[MASK]`` (= generate) |
| gpt x span | fill of ``prompt [MASK]`` | ``text-with-sentinels [EOS]`` as prefix -> ``s0 span0 s1 ...`` |
| gpt x ul2 | ``[S] prompt`` as prefix (S mode) | ``[R] text-with-sentinels [EOS]`` (R mode) |
| t5 x span | fill of ``prompt [MASK]`` | encoder ``text-with-sentinels [EOS]``, decoder writes the spans |
| t5 x prefix_lm | encoder ``prompt [EOS]`` | only a trailing ``[MASK]`` (= generate) |
| t5 x ul2 | encoder ``[S] prompt [EOS]`` | encoder ``[R] text-with-sentinels [EOS]`` |
| bert x mlm / span_mlm | error: BERT does not generate | one token per ``[MASK]`` (argmax) |

Options (``key=value``): ``prompt`` / ``text``, ``max_new_tokens`` (32), ``temperature`` (0 = greedy),
``top_k`` (0), ``top_p`` (1.0), ``seed`` (0).
"""

from __future__ import annotations

from typing import cast

from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.steps.generate import DecodeOptions, fill_text, generate_text, load_run

OPTIONS = {
    "prompt": str,
    "text": str,
    "max_new_tokens": int,
    "temperature": float,
    "top_k": int,
    "top_p": float,
    "seed": int,
}


class Options(DecodeOptions, total=False):
    """The parsed command line: decoding options plus the text (``prompt`` or ``text``, whichever is required)."""

    prompt: str
    text: str


def parse_options(presets: list[str], overrides: list[str], required: str) -> tuple[str, Options]:
    """``(run_dir, options)`` from the command line; unknown or malformed keys fail naming the key."""
    if len(presets) != 1:
        raise ConfigInputError(f"expected exactly one run directory before the options, got {presets or 'none'}")
    options: dict[str, str | int | float] = {
        "max_new_tokens": 32, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0
    }
    for token in overrides:
        key, _, value = (token[2:] if token.startswith("--") else token).partition("=")
        if key not in OPTIONS or key in ({"prompt", "text"} - {required}):
            allowed = sorted(set(OPTIONS) - ({"prompt", "text"} - {required}))
            raise ConfigInputError(f"unknown option {key}=; options: {', '.join(allowed)}")
        try:
            options[key] = OPTIONS[key](value)
        except ValueError:
            raise ConfigInputError(f"{key}={value} is not a valid {OPTIONS[key].__name__}") from None
    if required not in options:
        raise ConfigInputError(f'{required}= is required (e.g. {required}="The cat")')
    return presets[0], cast(Options, options)  # OPTIONS' types, the defaults above, required checked


def generate_main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab generate <run_dir> prompt=... [max_new_tokens=32 temperature=0 top_k= top_p= seed=]``."""
    run_dir, opts = parse_options(presets, overrides, "prompt")
    run = load_run(run_dir)
    print(opts["prompt"] + generate_text(run, opts["prompt"], opts))
    return 0


def fill_main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab fill <run_dir> text="... [MASK] ..." [options as generate]``; fills print in brackets."""
    run_dir, opts = parse_options(presets, overrides, "text")
    print(fill_text(load_run(run_dir), opts["text"], opts))
    return 0

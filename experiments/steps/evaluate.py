"""Zero-shot multiple choice for every family on the same items (what ``famlab eval`` and a comparison's
evaluation run): reading items, scoring a run, summarising with bootstrap intervals."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from famlab.datamodules.bundled import WORDNET_MINIMAL_PAIRS, WORDNET_REVERSE_DICTIONARY
from famlab.datamodules.jsonl import JsonlError, JsonRecord, read_jsonl
from famlab.experiments.analysis.results import BigramScores, NormAccuracy, ZeroShotResult, ZeroShotScores
from famlab.experiments.analysis.stats import bootstrap_ci
from famlab.experiments.configuration.compose import to_dataclass
from famlab.experiments.configuration.config import ConfigInputError, DataConfig, with_values
from famlab.experiments.plumbing.eval_device import eval_device
from famlab.experiments.plumbing.rundir import RunDir
from famlab.experiments.steps.generate import Run, load_run
from famlab.objectives.zeroshot import (
    BLANK,
    NORMS,
    BigramLM,
    ChoiceScores,
    Item,
    Scorer,
    chance,
    correct,
    headline,
    length_only,
    skipped,
)
from omegaconf import DictConfig, OmegaConf

BUNDLED = {
    "wordnet-reverse-dictionary": WORDNET_REVERSE_DICTIONARY,
    "wordnet-minimal-pairs": WORDNET_MINIMAL_PAIRS,
}
BIGRAM_KS = (1.0, 0.1, 0.01, 0.001)  # add-k constants tried; the one with the lowest validation NLL is kept


class EvalInputError(ConfigInputError):
    """A bad eval file or option; the message names the file and line (or the key)."""


def read_items(path: Path) -> list[Item]:
    """Items of a JSONL (optionally ``.gz``) file; any malformed line raises naming the file and line."""
    if not path.is_file():
        raise EvalInputError(f"data.eval={path}: no such file (bundled tasks: {', '.join(BUNDLED)})")
    try:
        items = [_parse(row, f"{path}:{n}") for n, row in read_jsonl(path)]
    except JsonlError as e:
        raise EvalInputError(f"{e.path}:{e.line}: {e.problem}") from None
    if not items:
        raise EvalInputError(f"{path}: no items (the file is empty)")
    return items


def _parse(row: JsonRecord, where: str) -> Item:
    text, choices, label = row.get("text"), row.get("choices"), row.get("label")
    if not isinstance(text, str) or text.count(BLANK) != 1:
        count = text.count(BLANK) if isinstance(text, str) else 0
        raise EvalInputError(f"{where}: text must hold exactly one blank {BLANK} (found {count})")
    if not isinstance(choices, list) or len(choices) < 2:
        raise EvalInputError(f"{where}: choices must be a list of at least 2 strings")
    if not all(isinstance(c, str) and c.strip() for c in choices):
        raise EvalInputError(f"{where}: every choice must be a non-empty string")
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(choices):
        raise EvalInputError(f"{where}: label={label!r} must be an integer index into the {len(choices)} choices")
    group = row.get("group")
    return Item(text, tuple(choices), label, None if group is None else str(group))


def task_paths(spec: str) -> dict[str, Path]:
    """``data.eval`` -> {task name: file}."""
    if spec == "wordnet":
        return dict(BUNDLED)
    if spec in BUNDLED:
        return {spec: BUNDLED[spec]}
    if spec.endswith((".jsonl", ".jsonl.gz")):
        return {Path(spec).name.split(".")[0]: Path(spec)}
    raise EvalInputError(f"data.eval={spec}: expected wordnet, {', '.join(BUNDLED)} or a .jsonl file")


def summarise(items: list[Item], scores: list[ChoiceScores], *, seed: int = 0) -> ZeroShotScores:
    """Accuracy per normalisation (value, 95 % bootstrap CI), chance, skipped items, and the same per group.

    A skipped item stays in ``num_items`` and counts as wrong (it has no winner), so chance and length alone
    stay the references of every model on the same items; ``num_skipped`` and ``skipped`` ({reason: items}) tell
    how many.
    """

    def block(sel: list[int]) -> ZeroShotScores:
        sub_items = [items[i] for i in sel]
        sub_scores = [scores[i] for i in sel]
        reasons = skipped(sub_scores)
        norms = {}
        for norm in NORMS:
            right = correct(sub_items, sub_scores, norm)
            acc, low, high = bootstrap_ci(right, seed=seed)
            # per item, in item order ("1" right): paired tests against the bigram floor read it (report)
            norms[norm] = NormAccuracy(acc=acc, low=low, high=high, correct="".join("1" if r else "0" for r in right))
        return ZeroShotScores(num_items=len(sel), chance=chance(sub_items),
                              length_only=statistics.fmean(length_only(sub_items)) if sel else math.nan,
                              num_skipped=sum(reasons.values()), skipped=reasons, norms=norms)

    result = block(list(range(len(items))))
    groups = sorted({it.group for it in items if it.group is not None})
    if groups:
        result.groups = {g: block([i for i, it in enumerate(items) if it.group == g]) for g in groups}
    return result


def load_bigram(run: Run, saved: Mapping[str, object], run_dir: Path) -> BigramLM:
    """An add-k bigram on the run's pretraining corpus (train documents) with the run's tokenizer; k is chosen
    by validation NLL among :data:`BIGRAM_KS`. The counts come from the prepared corpus's training stream, chunk by
    chunk (a corpus of any size, no raw text read when it is prepared); the validation texts are its first 2,000."""
    from famlab.experiments.plumbing.data_cache import prepared_corpus

    data = OmegaConf.merge(OmegaConf.structured(DataConfig), saved.get("data") or {})
    assert isinstance(data, DictConfig)
    # the corpus as the run's own tokenizer encodes it
    corpus = prepared_corpus(with_values(to_dataclass(data), {"tokenizer.path": str(RunDir(run_dir).tokenizer_file)}))
    eos = run.ids.eos
    corpus.ensure_streams(eos)
    train_file, _ = corpus.stream_files(eos)
    stream: np.ndarray | list[int] = (
        np.memmap(train_file, dtype=corpus.dtype, mode="r") if train_file.stat().st_size else [])
    lm = BigramLM.fit_stream(stream, run.ids.vocab_size, separator=eos)
    val = [e.ids for e in run.tokenizer.encode_batch(corpus.val[:2000], add_special_tokens=False)]
    val = [v for v in val if v]  # texts that encode to nothing hold no bigram: without any, k falls back below
    return min((lm.with_k(k) for k in BIGRAM_KS), key=lambda m: m.nll(val, eos) if val else m.k)


def evaluate_run(run_dir: Path, tasks: dict[str, list[Item]], *, rule: str = "full", bigram: bool = True,
                 norm: str | None = None) -> dict[str, dict[str, Any]]:
    """:func:`score_run` as JSON: {task: the dict ``famlab eval`` writes as the task's ``results.json``}."""
    scored = score_run(run_dir, tasks, rule=rule, bigram=bigram, norm=norm)
    return {name: result.to_json() for name, result in scored.items()}


def score_run(run_dir: Path, tasks: dict[str, list[Item]], *, rule: str = "full", bigram: bool = True,
              norm: str | None = None) -> dict[str, ZeroShotResult]:
    """Score every task with the run's network (and the bigram floor); {task: results} (no files written).
    ``norm``: the headline normalisation (None: each task's :func:`headline`). The network is scored on the device
    its run trained on (:func:`eval_device` of the run's ``trainer.accelerator``), the bigram floor on the CPU."""
    run = load_run(str(run_dir))
    saved = RunDir(run_dir).config_data()
    run.net.to(eval_device(str((saved.get("trainer") or {}).get("accelerator", "auto"))))
    scorer = Scorer(run.net, run.encode, run.ids, objective=run.objective, rule=rule)
    floor = Scorer(load_bigram(run, saved, run_dir), run.encode, run.ids, rule=rule) if bigram else None
    out = {}
    for name, items in tasks.items():
        started = time.time()
        scores = summarise(items, [_score(scorer, it, name, n) for n, it in enumerate(items, 1)])
        result = ZeroShotResult(task=name, family=run.family, objective=run.objective, rule=rule,
                                headline=norm or headline(name), model_run_dir=str(run_dir.resolve()),
                                **vars(scores))
        result.wall_s = round(time.time() - started, 2)
        if floor is not None:
            result.bigram = BigramScores(**vars(summarise(items, [floor.score(it) for it in items])),
                                         k=floor.net.k)  # type: ignore[union-attr]
        out[name] = result
    return out


def _score(scorer: Scorer, item: Item, task: str, n: int) -> ChoiceScores:
    try:
        return scorer.score(item)
    except ValueError as e:
        raise EvalInputError(f"{task} item {n}: {e}") from None


def mean_over(values: list[float]) -> float:
    """Mean that tolerates an empty list (NaN)."""
    return statistics.fmean(values) if values else math.nan

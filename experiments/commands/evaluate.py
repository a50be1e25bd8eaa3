"""``famlab eval <run_dir>... data.eval=<name | file.jsonl>``: zero-shot multiple choice, all families, same items.

Each item is one JSONL line ``{"text": "... ___ ...", "choices": [...], "label": i}`` (optional ``"group"``:
accuracy is also reported per group, e.g. per minimal-pair construction). Each run's network scores every
candidate with its family's own likelihood (``famlab.objectives.zeroshot``); an add-k bigram model trained
on the run's pretraining corpus with the run's tokenizer is scored the same way as a floor.

Accuracy is reported for the raw summed log-probability, per token and per byte, each with a 95 % percentile
bootstrap interval over items, next to chance (mean of 1/K) and ``length_only`` (the right candidate is the
shortest in bytes: what length alone gets). A tie is never correct, nor are candidates that encode to the same
tokens. An item the network cannot score (a candidate that encodes to no tokens, or more positions than an absolute
position table holds) is skipped: it counts as wrong, so every model keeps the same items, and ``num_skipped`` with
``skipped`` ({reason: items}) say how many and why. The headline (:func:`headline`) is
**per byte** for cloze items whose candidates are different words (the reverse dictionary, any ``.jsonl``): the raw
sum favours short candidates and per token depends on the tokenizer (byte-length normalisation is the
``acc_norm`` of EleutherAI's lm-evaluation-harness). It is **raw** for ``wordnet-minimal-pairs``, as in BLiMP
(Warstadt et al. 2020, total log-probability of each member of a pair): the two fillers differ by a suffix or an
order, and per byte divides by what each family scores, the whole text for GPT (~100 bytes: nearly raw) but the
3-10 byte span for T5 and BERT, so it turns the ``-s`` of a plural into a family difference (measured:
docs/results.md, Zero-shot evaluation).

Options: ``data.eval`` (required: ``wordnet-reverse-dictionary``, ``wordnet-minimal-pairs``, ``wordnet``
for both, or a ``.jsonl`` file), ``rule=full|span`` (GPT: the whole text, or the span given the prefix),
``limit=N`` (first N items), ``headline=raw|per_token|per_byte`` (instead of the task's), ``bigram=true|false``,
``wandb.mode=auto|online|offline|disabled``, ``wandb.project=``. Each run gets ``<run_dir>/eval/<task>/results.json``
and a W&B run (``job_type=eval``, config ``model_run_dir``, in the run's group).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict, cast

from famlab.experiments.configuration.config import WandbConfig, WandbMode
from famlab.experiments.configuration.run_files import CONFIG, RESULTS
from famlab.experiments.plumbing.rundir import RunDir
from famlab.experiments.steps.evaluate import EvalInputError, evaluate_run, read_items, task_paths
from famlab.experiments.tracking.wandb_guard import start_wandb, wandb_mode
from famlab.objectives.zeroshot import NORMS

# famlab eval's options (:func:`_options`), by their command-line keys
EvalOptions = TypedDict("EvalOptions", {
    "data.eval": str, "rule": str, "limit": int | None, "headline": str | None, "bigram": bool, "wandb.mode": str,
    "wandb.project": str,
})


def table(results: dict[str, dict[str, Any]]) -> str:
    """Markdown table: one row per model, then the bigram floor and length alone; accuracy per normalisation
    (the headline's column in bold)."""
    best = next(iter(results.values()))["headline"]
    names = {"raw": "raw", "per_token": "per token", "per_byte": "per byte"}
    head = "| model | family | items | chance | " + " | ".join(
        f"**{names[n]}**" if n == best else names[n] for n in NORMS) + " |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    bigram, last = None, None
    for model, r in results.items():
        cells = [f"{r[n]['acc']:.3f} [{r[n]['low']:.3f}, {r[n]['high']:.3f}]" for n in NORMS]
        lines.append(f"| {model} | {r['family']} | {r['num_items']} | {r['chance']:.3f} | " + " | ".join(cells) + " |")
        bigram, last = bigram or r.get("bigram"), r
    if bigram:
        cells = [f"{bigram[n]['acc']:.3f} [{bigram[n]['low']:.3f}, {bigram[n]['high']:.3f}]" for n in NORMS]
        lines.append(f"| add-k bigram (k={bigram['k']:g}) | - | {bigram['num_items']} | {bigram['chance']:.3f} | "
                     + " | ".join(cells) + " |")
    if last is not None and "length_only" in last:
        lines.append(f"| shortest candidate (length alone) | - | {last['num_items']} | {last['chance']:.3f} | "
                     + " | ".join(f"{last['length_only']:.3f}" for _ in NORMS) + " |")
    return "\n".join(lines)


def _log_wandb(run_dir: Path, out_dir: Path, result: dict[str, Any], mode: str, project: str) -> None:
    """One W&B run (job_type=eval) per model and task; config names the model's run directory."""
    from lightning.pytorch.loggers import WandbLogger

    saved = RunDir(run_dir).config_data()
    task = result["task"]
    config = {"model_run_dir": result["model_run_dir"], "eval.task": task, "eval.rule": result["rule"],
              "model.family": result["family"], "objective.name": result["objective"]}
    logger, note = start_wandb(WandbLogger, out_dir, mode, resuming=False, kwargs=dict(
        project=project, name=f"eval-{task}-{run_dir.name}", group=(saved.get("wandb") or {}).get("group"),
        job_type="eval", tags=[result["family"], "eval", task], save_dir=str(out_dir), config=config))
    if note:
        print(f"famlab: WARNING {note}")
    if logger is None:
        return
    exp = logger.experiment
    best = result["headline"]
    summary = {"eval/chance": result["chance"], "eval/num_items": result["num_items"], "eval/headline": best,
               "eval/acc": result[best]["acc"], "eval/length_only": result["length_only"],
               "eval/num_skipped": result.get("num_skipped", 0)}
    for norm in NORMS:
        summary[f"eval/acc_{norm}"] = result[norm]["acc"]
        if "bigram" in result:
            summary[f"eval/bigram_acc_{norm}"] = result["bigram"][norm]["acc"]
    for group, g in (result.get("groups") or {}).items():
        summary[f"eval/{group}/acc_{best}"] = g[best]["acc"]
    exp.summary.update(summary)
    exp.finish()


def _options(overrides: list[str]) -> EvalOptions:
    opts: dict[str, str | int | bool | None] = {"data.eval": None, "rule": "full", "limit": None, "headline": None,
                                                "bigram": True, "wandb.mode": "auto", "wandb.project": "famlab"}
    for token in overrides:
        key, _, value = (token[2:] if token.startswith("--") else token).partition("=")
        if key not in opts:
            raise EvalInputError(f"unknown option {key}=; options: {', '.join(opts)}")
        if key == "limit":
            if not value.isdigit() or int(value) < 1:
                raise EvalInputError(f"limit={value} must be a positive integer")
            opts[key] = int(value)
        elif key == "bigram":
            if value.lower() not in ("true", "false"):
                raise EvalInputError(f"bigram={value} must be true or false")
            opts[key] = value.lower() == "true"
        else:
            opts[key] = value
    if not opts["data.eval"]:
        raise EvalInputError("data.eval= is required (wordnet, a bundled task name, or a .jsonl file)")
    if opts["headline"] is not None and opts["headline"] not in NORMS:
        raise EvalInputError(f"headline={opts['headline']} must be one of {', '.join(NORMS)}")
    if opts["rule"] not in ("full", "span"):
        raise EvalInputError(f"rule={opts['rule']} must be full or span")
    if opts["wandb.mode"] not in ("auto", "online", "offline", "disabled"):
        raise EvalInputError(f"wandb.mode={opts['wandb.mode']} must be auto, online, offline or disabled")
    return cast(EvalOptions, opts)  # each key holds its type: parsed as such above, data.eval checked set


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab eval <run_dir>... data.eval=<name | file.jsonl> [rule= limit= headline= bigram=
    wandb.mode= wandb.project=]`` (every option :func:`_options` parses; ``famlab eval --help`` names each)."""
    opts = _options(overrides)
    if not presets or flags:
        raise EvalInputError("usage: famlab eval <run_dir>... data.eval=<name | file.jsonl> [key=value]... "
                             "(famlab eval --help lists the options)")
    run_dirs = [Path(p) for p in presets]
    for d in run_dirs:
        if not RunDir(d).config_file.is_file():
            raise EvalInputError(f"{d}: not a run directory (no {CONFIG})")
    tasks = {name: read_items(path)[: opts["limit"]] for name, path in task_paths(opts["data.eval"]).items()}
    mode = wandb_mode(WandbConfig(mode=WandbMode(opts["wandb.mode"])))
    by_task: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in tasks}
    for run_dir in run_dirs:
        for name, result in evaluate_run(run_dir, tasks, rule=opts["rule"], bigram=opts["bigram"],
                                         norm=opts["headline"]).items():
            out_dir = run_dir / "eval" / name
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / RESULTS).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
            if mode != "disabled":
                _log_wandb(run_dir, out_dir, result, mode, opts["wandb.project"])
            if result.get("num_skipped"):
                why = "; ".join(f"{n} {reason}" for reason, n in result["skipped"].items())
                print(f"famlab: WARNING {run_dir.name} {name}: {result['num_skipped']} of {result['num_items']} items "
                      f"skipped, counted wrong ({why})")
            by_task[name][run_dir.name] = result
    for name, results in by_task.items():
        best = next(iter(results.values()))["headline"]
        print(f"## {name} (accuracy [95 % bootstrap CI]; headline: {best.replace('_', ' ')}, see `famlab eval` in "
              f"README.md; rule {opts['rule']})\n")
        print(table(results) + "\n")
        groups = sorted({g for r in results.values() for g in r.get("groups", {})})
        if groups:
            print("| model | " + " | ".join(groups) + " |\n|---|" + "---|" * len(groups))
            for model, r in results.items():
                print(f"| {model} | " + " | ".join(f"{r['groups'][g][best]['acc']:.3f}" for g in groups) + " |")
            print()
    return 0

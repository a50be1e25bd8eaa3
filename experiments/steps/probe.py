"""``famlab probe <run_dir>`` (or ``famlab finetune finetune.mode=probe``): a linear probe of a frozen body.

What pretraining put into the representation, apart from what fine-tuning can relearn: the body is frozen, each
example is pooled with the family's fine-tuning pooling (:func:`famlab.objectives.classifier.pooled_features`),
the features are standardised on the training split, and a multinomial logistic regression (scikit-learn,
L2) is fitted on the training split. Its inverse regularisation strength is chosen from
``finetune.probe_c_grid`` by validation accuracy; the test split is read once, by the chosen classifier.

The same is done for random-initialised bodies of the same shape and initialisation scheme, one per
``finetune.probe_seeds`` entry, so the report can say how much of the probe's accuracy the pretraining
bought (Alain & Bengio 2016, "Understanding intermediate layers using linear classifier probes"; the
random-body control follows Hewitt & Liang 2019).
"""

from __future__ import annotations

import statistics
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import torch
from famlab.datamodules.tasks import Task
from famlab.datamodules.tokenizer import TokenizerBundle
from famlab.experiments.analysis.results import ProbeGain, ProbeResult, ProbeScore
from famlab.experiments.analysis.stats import above
from famlab.experiments.configuration.config import ConfigInputError, with_values
from famlab.experiments.configuration.plans import ProbePlan
from famlab.experiments.plumbing.data_cache import token_ids
from famlab.experiments.plumbing.eval_device import eval_device
from famlab.experiments.plumbing.provenance import provenance
from famlab.experiments.plumbing.rundir import RunDir, make_run_dir, task_run_name, write_config, write_json
from famlab.experiments.steps.init import Init, default_pooling, hf_bundle, load_network, load_task_for
from famlab.families import Network, build_network
from famlab.objectives import ClassificationCollator

if TYPE_CHECKING:
    from famlab.datamodules.classification import ClassificationItem
    from lightning.pytorch.loggers import WandbLogger
    from sklearn.linear_model import LogisticRegression

METRICS = ("test/acc", "test/f1", "test/mcc")


class ProbeScores(TypedDict):
    """The scores of a probe's results (:func:`probe_scores`): the :class:`ProbeResult` fields they fill."""

    selection: str
    pretrained: ProbeScore
    random: dict[str, ProbeScore]
    random_mean: dict[str, float]
    random_std: dict[str, float]
    gain: ProbeGain | None


def features(net: Network, family: str, items: list[ClassificationItem], collate: ClassificationCollator, pooling: str,
             batch_size: int = 256) -> np.ndarray:
    """``(N, C)`` pooled features of tokenized examples under ``torch.no_grad`` with the network in eval mode, computed
    on the network's device (each batch collated on the CPU, as a data loader does, and copied over once); only the
    features come back to the CPU, for the logistic regression."""
    from famlab.objectives.classifier import pooled_features  # imports Lightning

    device = next(net.parameters()).device
    net.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(items), batch_size):
            with torch.device("cpu"):  # the collator's tensors, whatever the default device
                batch = collate(items[start:start + batch_size])
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            out.append(pooled_features(net, family, batch, pooling).float())  # (B, C), on the device
    return torch.cat(out).cpu().numpy() if out else np.zeros((0, 0), dtype=np.float32)


def fit_probe(
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    c_grid: list[float],
    num_classes: int,
) -> ProbeScore:
    """Standardise on train, fit an L2 logistic regression per strength, choose on val, test the chosen one.

    Raises:
        ConfigInputError: fewer than 2 classes in the training split, or an empty split.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
    from sklearn.preprocessing import StandardScaler

    (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = train, val, test
    if len(set(y_tr.tolist())) < 2:
        raise ConfigInputError("probe: the training split has fewer than 2 classes; a classifier needs at least 2")
    if not len(x_va) or not len(x_te):
        raise ConfigInputError("probe: the validation and test splits must not be empty")
    scaler = StandardScaler().fit(x_tr)
    x_tr, x_va, x_te = scaler.transform(x_tr), scaler.transform(x_va), scaler.transform(x_te)
    best: tuple[float, float, LogisticRegression] | None = None
    for c in c_grid:
        # Newton-CG: the same L2 optimum as the default L-BFGS in far fewer iterations (docs/results.md, probe solver)
        clf = LogisticRegression(C=c, max_iter=1000, solver="newton-cg").fit(x_tr, y_tr)
        acc = float(accuracy_score(y_va, clf.predict(x_va)))
        if best is None or acc > best[0]:  # ties keep the first (the strongest regularisation listed first)
            best = (acc, c, clf)
    assert best is not None
    acc, c, clf = best
    pred = clf.predict(x_te)
    labels = list(range(num_classes))
    scores = {
        "test/acc": float(accuracy_score(y_te, pred)),
        "test/f1": float(f1_score(y_te, pred, average="macro", labels=labels, zero_division=0)),
        "test/mcc": float(matthews_corrcoef(y_te, pred)),
    }
    return ProbeScore(c=float(c), val_acc=acc, test=scores)


def probe(cfg: ProbePlan, init: Init) -> ProbeResult:
    """Probe the body ``init`` gives (a run, a checkpoint or an hf: model) and random-init bodies of its shape.

    Returns the results written to ``<run_dir>/results.json`` (``job: probe``).
    """
    from famlab.datamodules.classification import tokenize_examples  # imports Lightning
    from famlab.experiments.plumbing.loggers import identity_tags, make_loggers
    from famlab.experiments.tracking.wandb_loggers import wandb_loggers

    if init.kind == "scratch":
        raise ConfigInputError("probe: init=scratch has no trained body to probe; give a run directory, "
                               "a checkpoint or hf:<name> (random-init bodies are probed alongside it anyway)")
    started = time.time()
    cfg, net, task, run_dir, bundle = load_body(cfg, init)
    family = cfg.model.family.value
    pooling = cfg.finetune.pooling.value if cfg.finetune.pooling else default_pooling(family)
    written = write_config(run_dir, cfg, provenance(tokenizer_hash=bundle.hash, init=cfg.init, task=task.name))
    collate = ClassificationCollator(family, token_ids(bundle), cfg.data.max_len)
    splits = {name: tokenize_examples(getattr(task, name), bundle) for name in ("train", "val", "test")}
    labels = {name: np.array([int(item["label"]) for item in items]) for name, items in splits.items()}

    def score(body: Network) -> ProbeScore:
        x = {name: features(body, family, items, collate, pooling) for name, items in splits.items()}
        return fit_probe((x["train"], labels["train"]), (x["val"], labels["val"]), (x["test"], labels["test"]),
                         list(cfg.finetune.probe_c_grid), len(task.labels))

    device = eval_device(cfg.trainer.accelerator)  # the features on the training device; the regression on the CPU
    pretrained = score(net.to(device))
    random: dict[str, ProbeScore] = {}
    for seed in cfg.finetune.probe_seeds:
        torch.manual_seed(seed)
        random[str(seed)] = score(build_network(cfg.model).to(device))  # built on the CPU: the same init as before
    assert cfg.init is not None  # parse_init refused a missing init= before the probe began
    results = ProbeResult(
        family=family,
        init=cfg.init,
        task=task.name,
        num_classes=len(task.labels),
        sizes={k: len(v) for k, v in splits.items()},
        pooling=pooling,
        **probe_scores(pretrained, random),
        wall_s=round(time.time() - started, 1),
    )
    write_json(RunDir(run_dir).results_file, results.to_json())
    # started once the probe is done, so refused input never leaves a W&B run
    loggers = make_loggers(cfg.wandb, run_dir, job_type="probe", name=run_dir.name, config=written,
                           tags=identity_tags(cfg.model, cfg.objective), resume=cfg.resume,
                           match=cfg.compare.match)
    log_wandb(wandb_loggers(loggers), init, results)
    return results


def load_body(cfg: ProbePlan, init: Init) -> tuple[ProbePlan, Network, Task, Path, TokenizerBundle]:
    """``(config, network, task, run directory, tokenizer)``; an hf: model brings its own model config (and so the
    run's name)."""
    from famlab.experiments.plumbing.data_cache import get_bundle

    if init.kind == "hf":
        net, _ = load_network(cfg.model, init)
        cfg = with_values(cfg, {"model": net.config})
    task = load_task_for(cfg.data)
    run_dir = make_run_dir(cfg.run_dir, cfg.resume, task_run_name(cfg.name, cfg.model.family.value, "probe", task.name))
    bundle = hf_bundle(init.hf or "", run_dir) if init.kind == "hf" else get_bundle(cfg.data, None, run_dir)
    if init.kind != "hf":
        net, _ = load_network(cfg.model, init)
    return cfg, net, task, run_dir, bundle


def probe_scores(pretrained: ProbeScore, random: dict[str, ProbeScore]) -> ProbeScores:
    """The results' scores: the pretrained probe, each random-init body's, their mean and std, and the pretrained
    probe's gain over the random bodies (with two or more of them)."""
    rand_acc = [r.test["test/acc"] for r in random.values()]
    gain = None
    if len(rand_acc) >= 2:  # the pretrained probe is deterministic: one value against the seeded random bodies
        w = above(pretrained.test["test/acc"], rand_acc)
        gain = ProbeGain(diff=w.diff, ci_low=w.ci_low, ci_high=w.ci_high, p=w.p)
    return {
        "selection": "probe_c_grid strength with the highest validation accuracy",
        "pretrained": pretrained,
        "random": dict(random),
        "random_mean": {k: statistics.fmean(r.test[k] for r in random.values()) for k in METRICS},
        "random_std": {k: statistics.stdev([r.test[k] for r in random.values()]) if len(random) > 1 else 0.0
                       for k in METRICS},
        "gain": gain,
    }


def log_wandb(loggers: list[WandbLogger], init: Init, results: ProbeResult) -> None:
    """The probe in its W&B run (``loggers``; ``job_type=probe``, the config's group), then closed: it declares the
    pretraining run's tokenizer and checkpoint as inputs (lineage pretraining -> probe, as a fine-tune does), its
    summary holds the scores (``pretrained/test/acc``, ``random_mean/test/acc``, ``gain/diff`` ...) and ``bodies`` is
    a table of every body probed. Never raises.
    """
    import wandb
    from famlab.experiments.tracking.wandb_loggers import close_wandb, wandb_use_pretrained
    from famlab.experiments.tracking.wandb_metrics import record_summary

    try:
        wandb_use_pretrained(loggers, init.run_dir, init.checkpoint)
        pretrained = results.pretrained
        record_summary(loggers, {
            "pretrained": {**pretrained.test, "c": pretrained.c, "val_acc": pretrained.val_acc},
            "random_mean": results.random_mean, "random_std": results.random_std,
            **({"gain": results.gain.to_json()} if results.gain is not None else {}),
        })
        record_summary(loggers, {"probe_seeds": len(results.random), "task": results.task,
                                 "pooling": results.pooling})
        columns: list[str | int] = ["body", "seed", "c", "val_acc", *METRICS]
        rows = [["pretrained", None, *_row(results.pretrained)]]
        rows += [["random-init", int(seed), *_row(r)] for seed, r in results.random.items()]
        for logger in loggers:
            logger.experiment.log({"bodies": wandb.Table(columns=columns, data=rows, allow_mixed_types=True)})
    except Exception as e:  # noqa: BLE001 - W&B trouble never stops a run (README, W&B)
        warnings.warn(f"W&B probe results not logged ({type(e).__name__}: {e})", stacklevel=2)
    finally:
        close_wandb(loggers)


def _row(score: ProbeScore) -> list[float]:
    return [score.c, score.val_acc, *(score.test[k] for k in METRICS)]


def print_probe(r: ProbeResult) -> None:
    """One line per body: the pretrained body and the random-init bodies' mean +- std."""
    p, m, s = r.pretrained.test, r.random_mean, r.random_std
    print(f"probe: {r.family} on {r.task} ({r.pooling} pooling): test/acc pretrained {p['test/acc']:.3f}  "
          f"random-init {m['test/acc']:.3f} +- {s['test/acc']:.3f} (n={len(r.random)})"
          + (f"  gain {r.gain.diff:+.3f} (p={r.gain.p:.3g})" if r.gain else ""))

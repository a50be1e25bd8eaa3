"""The typed results serialise to the JSON files they stand for, key for key, and read those files back."""

import json
import math

from famlab.experiments.analysis.results import (
    ArmBudget,
    FinetuneResult,
    Plan,
    PretrainResult,
    ProbeResult,
    read_result,
)
from famlab.experiments.configuration.config import DataConfig
from famlab.experiments.configuration.task import load_configured_task
from famlab.experiments.steps.probe import ProbeScore, probe_scores

# plan.json as famlab compare wrote it before the plan was typed (match=flops, an lr grid on gpt)
PLAN = {
    "match": "flops", "tolerance": 0.02,
    "families": {
        "gpt": {"family": "gpt", "objective": "clm", "steps": 15, "flops_per_step": 3020000000,
                "corpus_tokens_per_step": 2080, "flops": 45300000000, "corpus_tokens": 31200, "params": 372480,
                "non_embedding_params": 108288, "batch_shape": "B=32 S=64", "dim": 64, "ffn_dim": 256,
                "num_layers": 2, "lr_grid": {"0.0001": 7.5, "0.003": 6.25}, "lr": 0.003},
        "t5": {"family": "t5", "objective": "span", "steps": 20, "flops_per_step": 2325000000,
               "corpus_tokens_per_step": 2240, "flops": 46500000000, "corpus_tokens": 44800, "params": 494464,
               "non_embedding_params": 230272, "batch_shape": "B=32 S=64 T=14", "dim": 64, "ffn_dim": 256,
               "num_layers": 2},
    },
    "target": 46500000000, "reference_steps": 20, "reference": "trainer.max_steps=20 steps of the median-cost family",
    "achieved_spread": 0.026, "tokenizer_hash": "ab12",
}


def test_plan_json_round_trips_key_for_key():
    plan = Plan.from_json(json.loads(json.dumps(PLAN)))
    assert isinstance(plan.arms["gpt"], ArmBudget) and plan.arms["gpt"].lr == 0.003 and plan.arms["t5"].lr is None
    assert json.dumps(plan.to_json(), indent=2) == json.dumps(PLAN, indent=2)  # same keys, same order


def test_a_plan_from_before_arms_and_reference_steps_reads_back_unchanged():
    """Older plans were keyed by family with no family / objective per entry, and had no reference_steps."""
    old = json.loads(json.dumps(PLAN))
    del old["reference_steps"]
    for entry in old["families"].values():
        del entry["family"], entry["objective"]
    plan = Plan.from_json(old)
    assert plan.arms["t5"].family is None and plan.reference_steps is None
    assert json.dumps(plan.to_json()) == json.dumps(old)


def test_a_params_plan_keeps_its_key_order():
    plan = Plan(match="params", tolerance=0.02, arms={}, target_non_embedding_params=1000,
                reference="gpt at its preset size (non-embedding parameters)", achieved_spread=0.01)
    assert list(plan.to_json()) == ["match", "tolerance", "families", "target_non_embedding_params", "reference",
                                    "achieved_spread"]


def test_run_results_round_trip_with_job_first():
    pre = {"job": "pretrain", "family": "gpt", "objective": "clm", "run_dir": "runs/x", "steps": 12,
           "num_params": 100, "first": {}, "final": {"val/loss": 5.0}, "budget": {"tokens": 10, "flops": 20,
           "flops_per_step": 2}, "wall_s": 1.5, "setup_s": 0.5, "cpu_s": 2.0, "threads": 2,
           "length_extrapolation": {"1x": {"seq_len": 32, "loss": 5.0, "reason": None}}}
    result = PretrainResult.from_json(pre)
    assert result.final["val/loss"] == 5.0 and result.byte_score is None
    assert json.dumps(result.to_json()) == json.dumps(pre)
    ft = {"job": "finetune", "family": "t5", "init": "scratch", "task": "task", "num_classes": 3,
          "sizes": {"train": 8, "val": 2, "test": 2}, "pooling": "mean",
          "grid": [{"lr": 0.001, "head_lr": 0.01, "val": {"0": 0.5}, "val_mean": 0.5}],
          "selected": {"lr": 0.001, "head_lr": 0.01}, "selection": "highest mean val/acc over seeds",
          "seeds": {"0": {"test/acc": 0.5}}, "mean": {"test/acc": 0.5}, "std": {"test/acc": 0.0},
          "majority": {"label": "a", "test/acc": 0.5}, "wall_s": 3.0}
    assert json.dumps(FinetuneResult.from_json(ft).to_json()) == json.dumps(ft)


# a probe's results.json as famlab probe wrote it before the probe's results were typed (keys in that order)
PROBE_KEYS = ["job", "family", "init", "task", "num_classes", "sizes", "pooling", "selection", "pretrained", "random",
              "random_mean", "random_std", "gain", "wall_s"]


def _probe(random_accs: list[float]) -> ProbeResult:
    scores = probe_scores(ProbeScore(c=1.0, val_acc=0.4, test={"test/acc": 0.4, "test/f1": 0.3, "test/mcc": 0.2}),
                          {str(s): ProbeScore(c=0.1, val_acc=0.3, test={"test/acc": a, "test/f1": a, "test/mcc": 0.0})
                           for s, a in enumerate(random_accs)})
    return ProbeResult(family="gpt", init="runs/x/gpt-pretrain-s0", task="task.csv", num_classes=2,
                       sizes={"train": 8, "val": 2, "test": 2}, pooling="mean", **scores, wall_s=1.5)


def test_probe_results_keep_their_key_order_and_gain_as_null_and_read_back():
    one = _probe([0.3]).to_json()  # one random body: no gain, still written (as null)
    assert list(one) == PROBE_KEYS and one["gain"] is None and one["pretrained"]["test"]["test/acc"] == 0.4
    three = _probe([0.3, 0.31, 0.29])
    assert three.gain is not None and math.isclose(three.random_mean["test/acc"], 0.3)
    text = json.dumps(three.to_json(), indent=2)
    assert json.dumps(ProbeResult.from_json(json.loads(text)).to_json(), indent=2) == text
    assert isinstance(read_result(json.loads(text)), ProbeResult)


def test_read_result_names_the_class_by_job_and_skips_other_jobs():
    pre = {"job": "pretrain", "family": "gpt", "run_dir": "r", "steps": 1, "num_params": 1, "first": {},
           "final": {}, "wall_s": 0.0}
    assert isinstance(read_result(pre), PretrainResult)
    assert read_result({"job": "eval", "family": "gpt"}) is None and read_result([1, 2]) is None


def test_the_task_loads_the_same_from_the_config_and_from_config_yaml(tmp_path):
    """The data section as a dataclass and as the plain mapping a run's config.yaml holds: one task."""
    rows = ["review,sentiment"] + [f"text {i},{'pos' if i % 2 else 'neg'}" for i in range(40)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    data = DataConfig(task=str(tmp_path / "t.csv"), text_column="review", label_column="sentiment", seed=3)
    plain = {"task": data.task, "text_column": "review", "text_pair_column": None, "label_column": "sentiment",
             "split_column": "split", "val_fraction": None, "test_fraction": 0.1, "seed": 3}
    a, b = load_configured_task(data), load_configured_task(plain)
    assert a.labels == b.labels == ["neg", "pos"]
    assert [e.text for e in a.test] == [e.text for e in b.test] and len(a.val) == 4  # val_fraction None: 0.1

"""What a registered toy (a family, an objective, a position scheme) goes through after its comparison: ``famlab
finetune`` and ``famlab eval`` from the comparison's pretraining run, as a user would run them."""

import json
from pathlib import Path


def finetune_and_eval(pretrained: Path, inputs: list[str], tmp_path: Path) -> tuple[dict, dict]:
    """Fine-tune ``pretrained`` on the task of ``inputs`` (4 steps, one seed), then score it on 6 cloze items; returns
    the two ``results.json``."""
    from famlab.experiments.commands import cli

    task_keys = [k for k in inputs if k.startswith(("data.task", "data.text_column", "data.label_column"))]
    assert cli.main(["finetune", f"init={pretrained}", *task_keys, "finetune.max_steps=4", "finetune.val_every=2",
                     "finetune.seeds=[0]", "wandb.mode=disabled", "trainer.progress_bar=false",
                     f"run_dir={tmp_path / 'ft'}"]) == 0
    items = tmp_path / "items.jsonl"
    items.write_text("\n".join(json.dumps({"text": f"a dog and a ___ run {i}", "choices": ["cat", "red"],
                                           "label": 0}) for i in range(6)) + "\n")
    assert cli.main(["eval", str(pretrained), f"data.eval={items}", "wandb.mode=disabled", "bigram=false"]) == 0
    tuned = json.loads((tmp_path / "ft" / "results.json").read_text())
    return tuned, json.loads((pretrained / "eval" / "items" / "results.json").read_text())

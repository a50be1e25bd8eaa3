"""``famlab export <run_dir> <out_dir>``: a run as a Hugging Face model folder that ``transformers`` loads offline.

The folder holds the model (``model.safetensors`` + ``config.json``; ``BertForMaskedLM``,
``GPT2LMHeadModel`` or ``T5ForConditionalGeneration`` for a pretraining run, ``BertForSequenceClassification``
or ``GPT2ForSequenceClassification`` with label names for a fine-tuned classifier), the run's tokenizer as a
``PreTrainedTokenizerFast`` (famlab's special tokens, sentinels and ``[PAD]``; it adds the family's special
tokens as the fine-tuning collator does) and a model card ``README.md``. A BERT with ``model.pos=rope`` is written
as ``RoFormerForMaskedLM``, BERT with rotary q/k (Su et al. 2021; ``famlab.families.hf_roformer``). Every setting
HF cannot express is refused on one line before anything is written. A multi-seed fine-tune exports ``seed=<s>``
(default: the first seed); a fine-tune exports its best checkpoint, as its test scores were read from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from famlab.experiments.configuration.config import ConfigInputError

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]", "[R]", "[X]", "[S]")
LM_CLASS = {"bert": "AutoModelForMaskedLM", "gpt": "AutoModelForCausalLM", "t5": "AutoModelForSeq2SeqLM"}


@dataclass
class ExportPlan:
    """What will be exported; built (and so every check done) before anything is written."""

    run_dir: Path
    out_dir: Path
    saved: dict[str, Any]  # the run's config.yaml
    checkpoint: Path
    model: Any  # families ModelConfig
    classifier: dict[str, Any] | None = None  # hyper-parameters of a fine-tuned ClassifierModule
    labels: list[str] = field(default_factory=list)


def _checkpoint(run_dir: Path, finetune: bool, seed: str | None) -> Path:
    base = run_dir
    seeds = sorted(run_dir.glob("seed-*"))
    if seeds:
        chosen = [p for p in seeds if p.name == f"seed-{seed}"] if seed is not None else seeds[:1]
        if not chosen:
            raise ConfigInputError(f"seed={seed}: {run_dir} has {', '.join(p.name for p in seeds)}")
        base = chosen[0]
    elif seed is not None:
        raise ConfigInputError(f"seed={seed}: {run_dir} is a single-seed run")
    best = sorted((base / "checkpoints").glob("best*.ckpt")) if finetune else []
    ckpt = best[-1] if best else base / "checkpoints" / "last.ckpt"
    if not ckpt.is_file():
        raise ConfigInputError(f"{run_dir}: no checkpoint ({ckpt} is missing)")
    return ckpt


def _labels(saved: dict[str, Any], num_classes: int) -> list[str]:
    """The task's label names (the order training used), or ``LABEL_i`` when the task cannot be read again."""
    from famlab.datamodules import load_task

    d = saved.get("data", {})
    keys = ("text_column", "text_pair_column", "label_column", "split_column", "val_fraction", "test_fraction", "seed")
    try:
        task = load_task(d["task"], **{k: d[k] for k in keys if d.get(k) is not None})
        labels = [str(x) for x in task.labels]
    except (KeyError, TypeError, ValueError, OSError):
        labels = []
    if len(labels) != num_classes:
        print(f"famlab export: the task's label names are not readable; writing LABEL_0..LABEL_{num_classes - 1}")
        labels = [f"LABEL_{i}" for i in range(num_classes)]
    return labels


def plan_export(run_dir: str, out_dir: str, seed: str | None = None) -> ExportPlan:
    """Read the run and check that Hugging Face can express it; raises ConfigInputError / HFConversionError."""
    import torch
    from famlab.experiments.configuration.compose import to_dataclass
    from famlab.families.config import ModelConfig
    from famlab.families.hf_classifier import check_classifier_expressible
    from famlab.families.hf_roformer import check_roformer_expressible, is_roformer, roformer_classifier_error
    from famlab.families.hf_settings import check_expressible
    from omegaconf import OmegaConf

    src, out = Path(run_dir), Path(out_dir)
    for name in ("config.yaml", "tokenizer.json"):
        if not (src / name).is_file():
            raise ConfigInputError(f"{src}: {name} is missing (not a famlab run directory)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigInputError(f"{out} exists and is not an empty directory")
    saved = yaml.safe_load((src / "config.yaml").read_text(encoding="utf-8"))
    model = to_dataclass(OmegaConf.merge(OmegaConf.structured(ModelConfig), saved["model"]))
    (check_roformer_expressible if is_roformer(model) else check_expressible)(model)
    if model.family.value == "t5" and not model.tie_embeddings:
        # transformers 5 re-ties T5's lm_head to the shared embedding when it loads a folder
        raise ConfigInputError("export: model.tie_embeddings=false has no Hugging Face T5 equivalent (always tied)")
    results = _read_json(src / "results.json")
    finetune = results.get("job") == "finetune" or "finetune_seed" in saved
    ckpt = _checkpoint(src, finetune, seed)
    plan = ExportPlan(src, out, saved, ckpt, model)
    hparams = torch.load(ckpt, map_location="cpu", weights_only=False).get("hyper_parameters", {})
    if finetune or "num_classes" in hparams:
        if "num_classes" not in hparams:
            raise ConfigInputError(f"{ckpt}: a fine-tune checkpoint without the classifier's hyper-parameters")
        if is_roformer(model):
            raise roformer_classifier_error(model, hparams["pooling"])
        check_classifier_expressible(model.family.value, hparams["pooling"])
        plan.classifier = dict(hparams)
        plan.labels = _labels(saved, int(hparams["num_classes"]))
    return plan


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def build_hf_model(plan: ExportPlan) -> tuple[Any, Any]:
    """``(hf_model, famlab_module)`` where the module is the network (or the classifier's head) loaded from the
    checkpoint, for comparisons."""
    import torch
    from famlab.families import build_network
    from famlab.families.heads import ClassificationHead
    from famlab.families.hf import to_hf
    from famlab.families.hf_classifier import classifier_to_hf
    from famlab.families.hf_roformer import is_roformer, roformer_to_hf

    state = torch.load(plan.checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    state = {k.replace("_orig_mod.", ""): v for k, v in state.items()}
    net = build_network(plan.model)
    net.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("net.")})
    net.eval()
    if plan.classifier is None:
        return (roformer_to_hf(net) if is_roformer(plan.model) else to_hf(net)).eval(), net
    h = plan.classifier
    head = ClassificationHead(
        plan.model.dim, int(h["num_classes"]), float(h.get("head_dropout", 0.1)), pooler=h["pooling"] == "cls",
        standardize=bool(h.get("standardize", False)),
    )
    head.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("head.")})
    head.eval()
    return classifier_to_hf(net, head, h["pooling"], plan.labels), (net, head)


def fast_tokenizer(plan: ExportPlan) -> Any:
    """The run's ``tokenizer.json`` as a ``PreTrainedTokenizerFast`` that adds the family's special tokens."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_file(str(plan.run_dir / "tokenizer.json"))
    family = plan.model.family.value
    vocab = tok.get_vocab()
    sentinels = sorted((t for t in vocab if t.startswith("<extra_id_")), key=lambda t: int(t[10:-1]))
    specials = [(t, vocab[t]) for t in SPECIALS if t in vocab]
    if family == "bert":  # [CLS] a [SEP] (b [SEP]), token types 0 / 1
        tok.post_processor = TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=specials
        )
    elif family == "t5" or plan.classifier is not None:  # a ([SEP] b) [EOS]; a GPT LM continues raw text
        tok.post_processor = TemplateProcessing(single="$A [EOS]", pair="$A [SEP] $B [EOS]", special_tokens=specials)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
        bos_token="[BOS]", eos_token="[EOS]", additional_special_tokens=["[R]", "[X]", "[S]", *sentinels],
        padding_side="right", model_max_length=plan.model.max_seq_len if family != "t5" else 512,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"] if family == "bert"
        else ["input_ids", "attention_mask"],
    )  # fmt: skip


def model_card(plan: ExportPlan, hf_class: str) -> str:
    """A ``README.md`` model card: what the run was (config, data, budget), its results and how to load it."""
    saved, family = plan.saved, plan.model.family.value
    results = _read_json(plan.run_dir / "results.json")
    data = saved.get("data", {})
    auto = "AutoModelForSequenceClassification" if plan.classifier else LM_CLASS[family]
    objective = (saved.get("objective") or {}).get("name", "?")
    kind = f"fine-tuned {family} classifier" if plan.classifier else f"{family} pretrained with {objective}"
    source = plan.checkpoint.relative_to(plan.run_dir)
    lines = [
        "---", "library_name: transformers", f"tags: [famlab, {family}]", "---", "",
        f"# {plan.run_dir.name}", "",
        f"A {kind}, trained with famlab and exported as `{hf_class}` from `{source}`.",
        "", "## Data", "",
        f"- corpus: `{data.get('corpus', 'bundled')}`" + (f"; task: `{data.get('task')}`" if plan.classifier else ""),
        f"- tokenizer: {data.get('tokenizer', {}).get('kind', '?')}, "
        f"hash `{saved.get('provenance', {}).get('tokenizer_hash', '?')}`",
    ]
    if plan.labels:
        lines.append(f"- labels: {', '.join(plan.labels)}")
    lines += ["", "## Budget and results", ""]
    for key in ("steps", "num_params", "budget", "final", "mean", "std", "seeds", "wall_s"):
        if key in results:
            lines.append(f"- {key}: `{json.dumps(results[key], sort_keys=True)}`")
    if not results:
        lines.append("- the run wrote no results.json")
    lines += [
        "", "## Usage", "", "```python",
        f"from transformers import AutoTokenizer, {auto}", "",
        f'tokenizer = AutoTokenizer.from_pretrained("{plan.out_dir.name}")',
        f'model = {auto}.from_pretrained("{plan.out_dir.name}").eval()',
        'batch = tokenizer(["an example sentence"], return_tensors="pt", padding=True)',
    ]
    if family == "t5" and not plan.classifier:
        lines.append("logits = model(**batch, decoder_input_ids=batch.input_ids[:, :1] * 0).logits  # start: [PAD]")
    else:
        lines.append("logits = model(**batch).logits")
    lines += ["```", "", "## Training config (famlab `config.yaml`)", "", "```yaml",
              yaml.safe_dump(saved, sort_keys=False).rstrip(), "```", ""]  # fmt: skip
    return "\n".join(lines)


def export(plan: ExportPlan) -> Any:
    """Write the folder; returns the Hugging Face model written."""
    model, _ = build_hf_model(plan)  # may still refuse (a rank-deficient GPT classifier): nothing written yet
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(plan.out_dir))
    fast_tokenizer(plan).save_pretrained(str(plan.out_dir))
    (plan.out_dir / "README.md").write_text(model_card(plan, type(model).__name__), encoding="utf-8")
    return model


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab export <run_dir> <out_dir> [seed=<s>]``."""
    from famlab.experiments.configuration.compose import parse_overrides

    if len(presets) != 2:
        extra = f" ({presets[2]!r} is one too many)" if len(presets) > 2 else ""
        raise ConfigInputError(f"usage: famlab export <run_dir> <out_dir> [seed=<s>]; got {len(presets)} paths{extra}")
    options = parse_overrides(overrides)
    unknown = [k for k in options if k != "seed"]
    if unknown:
        raise ConfigInputError(f"famlab export takes only seed=<s>; unknown {unknown[0]}=")
    seed = str(options["seed"]) if "seed" in options else None
    plan = plan_export(presets[0], presets[1], seed)
    model = export(plan)
    print(f"exported {plan.checkpoint} as {type(model).__name__} to {plan.out_dir}")
    return 0

"""``famlab export <run_dir> <out_dir>``: a run as a Hugging Face model folder that ``transformers`` loads offline.

The folder holds the model (``model.safetensors`` + ``config.json``), the run's tokenizer as a
``PreTrainedTokenizerFast`` (famlab's special tokens, sentinels and ``[PAD]``; it adds the family's special
tokens as the fine-tuning collator does) and a model card ``README.md``. A pretraining run is written as
``BertForMaskedLM``, ``GPT2LMHeadModel`` or ``T5ForConditionalGeneration``; a BERT with ``model.pos=rope`` as
``RoFormerForMaskedLM``, BERT with rotary q/k (Su et al. 2021; ``famlab.families.hf_roformer``).

A fine-tuned classifier that pools as a Hugging Face sequence classifier does (BERT with learned positions and
``cls`` pooling, GPT with ``last``) is written as ``BertForSequenceClassification`` /
``GPT2ForSequenceClassification`` with label names. No Hugging Face sequence classifier pools any other way (the
default ``mean`` pooling included), so every other classifier is written as its fine-tuned body (``BertModel``,
``RoFormerModel``, ``GPT2Model`` and ``T5Model``, which ``AutoModel`` loads, or ``T5EncoderModel`` when a T5 pools
its encoder), with :data:`HEAD_FILE` (the classifier's ``weight`` and ``bias`` with a standardising head
folded in, and BERT's ``pooler.weight`` / ``pooler.bias`` for ``cls`` pooling), the pooling and the label names in
``config.json``, and a model card whose code computes the classifier's logits from the body (the same logits:
tested). Every model setting HF cannot express is refused on one line before anything is written. A multi-seed
fine-tune exports ``seed=<s>`` (default: the first seed); a fine-tune exports its best checkpoint, as its test
scores were read from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
import yaml
from famlab.datamodules import load_task
from famlab.experiments.configuration.compose import parse_overrides, to_dataclass
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.configuration.run_files import CONFIG, RESULTS, TOKENIZER
from famlab.experiments.plumbing.rundir import RunDir
from famlab.families import build_network
from famlab.families.config import ModelConfig
from famlab.families.formats import Arch
from famlab.families.heads import ClassificationHead
from famlab.families.hf import to_hf
from famlab.families.hf_classifier import classifier_to_hf, folded_classifier
from famlab.families.hf_roformer import check_roformer_expressible, is_roformer, roformer_to_hf
from famlab.families.hf_settings import check_expressible, hf_adapter
from famlab.families.network import Network
from famlab.families.registry import FamilySpec, HFAdapter, family
from omegaconf import OmegaConf

if TYPE_CHECKING:
    from famlab.experiments.analysis.results import JsonDict
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]", "[R]", "[X]", "[S]")
HEAD_FILE = "classifier_head.safetensors"  # a classifier written as its body: the head Hugging Face has no class for
# the model card's code for each pooling: (B, T, C) `hidden` and the tokenizer's `batch` -> (B, C) `pooled`
POOLED = {
    "mean": ['mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)',
             "pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)  # mean over the tokens"],
    "cls": ["pooled = hidden[:, 0]  # the first token"],
    "last": ['pooled = hidden[torch.arange(len(hidden)), batch["attention_mask"].sum(1) - 1]  # last token'],
    "decoder": ["pooled = hidden[:, 0]  # the decoder's first step"],
}  # fmt: skip


@dataclass
class ExportPlan:
    """What will be exported; built (and so every check done) before anything is written."""

    run_dir: Path
    out_dir: Path
    saved: JsonDict  # the run's config.yaml
    checkpoint: Path
    model: ModelConfig
    classifier: JsonDict | None = None  # hyper-parameters of a fine-tuned ClassifierModule
    labels: list[str] = field(default_factory=list)

    @property
    def spec(self) -> FamilySpec:
        """The run's family (``famlab.families.registry.FamilySpec``): its input format and Hugging Face adapter."""
        return family(self.model.family)

    @property
    def hf(self) -> HFAdapter:
        """The family's ``HFAdapter`` (``plan_export`` refuses a family without one)."""
        adapter = self.spec.hf
        assert adapter is not None, "plan_export refuses a family without a Hugging Face adapter"
        return adapter

    @property
    def body_only(self) -> bool:
        """A classifier no Hugging Face sequence classifier computes: written as its body plus :data:`HEAD_FILE`."""
        if self.classifier is None:
            return False
        return is_roformer(self.model) or self.hf.classifier_pooling != self.classifier["pooling"]


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
    best = sorted(RunDir(base).checkpoint_dir.glob("best*.ckpt")) if finetune else []
    ckpt = best[-1] if best else RunDir(base).last_checkpoint
    if not ckpt.is_file():
        raise ConfigInputError(f"{run_dir}: no checkpoint ({ckpt} is missing)")
    return ckpt


def _labels(saved: JsonDict, num_classes: int) -> list[str]:
    """The task's label names (the order training used), or ``LABEL_i`` when the task cannot be read again."""
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
    src, out = Path(run_dir), Path(out_dir)
    for name in (CONFIG, TOKENIZER):
        if not (src / name).is_file():
            raise ConfigInputError(f"{src}: {name} is missing (not a famlab run directory)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigInputError(f"{out} exists and is not an empty directory")
    saved = RunDir(src).config_data()
    model: ModelConfig = to_dataclass(OmegaConf.merge(OmegaConf.structured(ModelConfig), saved["model"]))
    (check_roformer_expressible if is_roformer(model) else check_expressible)(model)
    adapter = hf_adapter(model.family.value, "export")  # the checks above refused a family without one
    if adapter.always_tied and not model.tie_embeddings:
        # e.g. transformers 5 re-ties T5's lm_head to the shared embedding when it loads a folder
        raise ConfigInputError(f"export: model.tie_embeddings=false has no Hugging Face {adapter.lm_class} "
                               "equivalent (always tied)")
    results = _read_json(RunDir(src).results_file)
    finetune = results.get("job") == "finetune" or "finetune_seed" in saved
    ckpt = _checkpoint(src, finetune, seed)
    plan = ExportPlan(src, out, saved, ckpt, model)
    hparams = torch.load(ckpt, map_location="cpu", weights_only=False).get("hyper_parameters", {})
    if finetune or "num_classes" in hparams:
        if "num_classes" not in hparams:
            raise ConfigInputError(f"{ckpt}: a fine-tune checkpoint without the classifier's hyper-parameters")
        if hparams["pooling"] not in POOLED:
            raise ConfigInputError(f"export: finetune.pooling={hparams['pooling']} is not one of {', '.join(POOLED)}")
        plan.classifier = dict(hparams)
        plan.labels = _labels(saved, int(hparams["num_classes"]))
    return plan


def _read_json(path: Path) -> JsonDict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def build_hf_model(plan: ExportPlan) -> tuple[PreTrainedModel, Network | tuple[Network, ClassificationHead]]:
    """``(hf_model, famlab_module)`` where the module is the network (or the network and the classifier's head)
    loaded from the checkpoint, for comparisons."""
    state = torch.load(plan.checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    state = {k.replace("_orig_mod.", ""): v for k, v in state.items()}
    net = build_network(plan.model)
    weights = {k[4:]: v for k, v in state.items() if k.startswith("net.")}
    if plan.classifier is None:
        net.load_state_dict(weights)
    else:  # a classifier holds only the body its pooling reads (no LM head; T5's decoder only if it pools)
        plan.spec.input_format.load_body(net, weights, plan.classifier["pooling"])
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
    if plan.body_only:
        return body_to_hf(net, plan), (net, head)
    return classifier_to_hf(net, head, h["pooling"], plan.labels), (net, head)


def body_to_hf(net: Network, plan: ExportPlan) -> PreTrainedModel:
    """The fine-tuned body as a Hugging Face base model (``BertModel``, ``RoFormerModel``, ``GPT2Model``,
    ``T5EncoderModel``, or ``T5Model`` when the decoder pools), its ``config.json`` naming the pooling,
    the head file and the labels."""
    import transformers

    assert plan.classifier is not None
    pooling, hf = plan.classifier["pooling"], plan.hf
    lm = roformer_to_hf(net) if is_roformer(plan.model) else to_hf(net)
    body: PreTrainedModel
    if hf.encoder_class is None:  # BertModel (no pooler) / RoFormerModel / GPT2Model, sharing the LM's weights
        body = cast("PreTrainedModel", lm.base_model)  # transformers types it as a Module; it is the LM's body
    else:  # T5Model when the decoder pools, else T5EncoderModel
        body_class = hf.body_class if pooling == "decoder" else hf.encoder_class
        assert body_class is not None, "an HFAdapter with an encoder_class names its body_class"
        body = getattr(transformers, body_class)(lm.config)
        keys = body.state_dict().keys()
        body.load_state_dict({k: v for k, v in lm.state_dict().items() if k in keys})
    config = body.config
    config.id2label = dict(enumerate(plan.labels))
    config.label2id = {name: i for i, name in enumerate(plan.labels)}
    config.famlab_classifier = {"pooling": pooling, "head": HEAD_FILE}
    return body.eval()


def head_tensors(head: ClassificationHead) -> dict[str, torch.Tensor]:
    """:data:`HEAD_FILE`'s tensors: ``weight`` (K, C) and ``bias`` (K,) with a standardising head's evaluation
    statistics folded in; ``pooler.weight`` / ``pooler.bias`` (BERT's dense + tanh, applied first) for ``cls``."""
    weight, bias = folded_classifier(head)
    out = {"weight": weight.float().contiguous(), "bias": bias.float().contiguous()}
    if head.pooler is not None:
        out["pooler.weight"] = head.pooler.dense.weight.detach().contiguous()
        out["pooler.bias"] = head.pooler.dense.bias.detach().contiguous()
    return out


def fast_tokenizer(plan: ExportPlan) -> PreTrainedTokenizerFast:
    """The run's ``tokenizer.json`` as a ``PreTrainedTokenizerFast`` that adds the family's special tokens."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_file(str(RunDir(plan.run_dir).tokenizer_file))
    fmt = plan.spec.input_format  # the template the fine-tuning collator writes (famlab.families.formats)
    vocab = tok.get_vocab()
    sentinels = sorted((t for t in vocab if t.startswith("<extra_id_")), key=lambda t: int(t[10:-1]))
    specials = [(t, vocab[t]) for t in SPECIALS if t in vocab]
    template = fmt.template(classifier=plan.classifier is not None)  # None: a GPT LM continues raw text
    if template is not None:  # BERT [CLS] a [SEP] (b [SEP]) with token types 0 / 1; GPT, T5 a ([SEP] b) [EOS]
        tok.post_processor = TemplateProcessing(single=template[0], pair=template[1], special_tokens=specials)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
        bos_token="[BOS]", eos_token="[EOS]", additional_special_tokens=["[R]", "[X]", "[S]", *sentinels],
        padding_side="right", model_max_length=plan.hf.tokenizer_max_length or plan.model.max_seq_len,
        model_input_names=fmt.model_input_names,
    )  # fmt: skip


def model_card(plan: ExportPlan, hf_class: str) -> str:
    """A ``README.md`` model card: what the run was (config, data, budget), its results and how to load it."""
    saved, family = plan.saved, plan.model.family.value
    results = _read_json(RunDir(plan.run_dir).results_file)
    data = saved.get("data", {})
    auto = body_class(plan) if plan.body_only else "AutoModelForSequenceClassification" if plan.classifier \
        else plan.hf.auto_class
    objective = (saved.get("objective") or {}).get("name", "?")
    kind = f"fine-tuned {family} classifier" if plan.classifier else f"{family} pretrained with {objective}"
    source = plan.checkpoint.relative_to(plan.run_dir)
    lines = [
        "---", "library_name: transformers", f"tags: [famlab, {family}]", "---", "",
        f"# {plan.run_dir.name}", "",
        f"A {kind}, trained with famlab and exported as `{hf_class}` from `{source}`." + (
            f" Hugging Face has no sequence classifier with its pooling (`{(plan.classifier or {}).get('pooling')}`): "
            f"this is the fine-tuned body, and `{HEAD_FILE}` holds the classification head (code below)."
            if plan.body_only else ""),
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
        lines.append(f"- the run wrote no {RESULTS}")
    lines += ["", "## Usage", "", *(body_usage(plan) if plan.body_only else usage(plan, auto))]
    lines += ["", f"## Training config (famlab `{CONFIG}`)", "", "```yaml",
              yaml.safe_dump(saved, sort_keys=False).rstrip(), "```", ""]  # fmt: skip
    return "\n".join(lines)


def usage(plan: ExportPlan, auto: str) -> list[str]:
    """The model card's Python for a model that computes its logits itself (an LM or a sequence classifier)."""
    folder = plan.out_dir.name
    lines = ["```python", f"from transformers import AutoTokenizer, {auto}", "",
             f'tokenizer = AutoTokenizer.from_pretrained("{folder}")',
             f'model = {auto}.from_pretrained("{folder}").eval()',
             'batch = tokenizer(["an example sentence"], return_tensors="pt", padding=True)']  # fmt: skip
    if plan.spec.arch is Arch.ENCODER_DECODER and not plan.classifier:
        lines.append("logits = model(**batch, decoder_input_ids=batch.input_ids[:, :1] * 0).logits  # start: [PAD]")
    else:
        lines.append("logits = model(**batch).logits")
    return [*lines, "```"]


def body_class(plan: ExportPlan) -> str:
    """The transformers class that loads a classifier's body: ``AutoModel``, but ``T5EncoderModel`` for a T5 that
    pools its encoder (``AutoModel`` would build a ``T5Model`` with a decoder the classifier never trained)."""
    assert plan.classifier is not None
    encoder = plan.hf.encoder_class
    return encoder if encoder is not None and plan.classifier["pooling"] != "decoder" else "AutoModel"


def body_usage(plan: ExportPlan) -> list[str]:
    """The model card's Python for a classifier written as its body: load it and the head, pool as famlab did,
    apply the head (tests run this code and compare its logits with famlab's)."""
    assert plan.classifier is not None
    folder, pooling = plan.out_dir.name, plan.classifier["pooling"]
    # BertModel would add a pooler the classifier never trained (RoFormerModel has none)
    pooler = plan.hf.body_pooler and not is_roformer(plan.model)
    extra = ", add_pooling_layer=False" if pooler else ""
    decoder = ", decoder_input_ids=batch.input_ids[:, :1] * 0" if pooling == "decoder" else ""  # start: [PAD]
    lines = ["```python", "import torch", "from safetensors.torch import load_file",
             f"from transformers import AutoTokenizer, {body_class(plan)}", "",
             f'tokenizer = AutoTokenizer.from_pretrained("{folder}")',
             f'model = {body_class(plan)}.from_pretrained("{folder}"{extra}).eval()',
             f'head = load_file("{folder}/{HEAD_FILE}")',
             'batch = tokenizer(["an example sentence"], return_tensors="pt", padding=True)',
             "with torch.no_grad():",
             f"    hidden = model(**batch{decoder}).last_hidden_state",
             *(f"    {line}" for line in POOLED[pooling])]  # fmt: skip
    if pooling == "cls":  # the head's pooler (BERT's dense + tanh)
        lines.append('    pooled = torch.tanh(pooled @ head["pooler.weight"].T + head["pooler.bias"])')
    lines += ['    logits = pooled @ head["weight"].T + head["bias"]',
              "labels = [model.config.id2label[i] for i in logits.argmax(-1).tolist()]", "```"]
    return lines


def export(plan: ExportPlan) -> PreTrainedModel:
    """Write the folder; returns the Hugging Face model written."""
    model, ours = build_hf_model(plan)  # may still refuse (a rank-deficient GPT classifier): nothing written yet
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(plan.out_dir))
    if plan.body_only:
        from safetensors.torch import save_file

        assert isinstance(ours, tuple), "a classifier is built as its network and head"
        save_file(head_tensors(ours[1]), str(plan.out_dir / HEAD_FILE))
    fast_tokenizer(plan).save_pretrained(str(plan.out_dir))
    (plan.out_dir / "README.md").write_text(model_card(plan, type(model).__name__), encoding="utf-8")
    return model


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab export <run_dir> <out_dir> [seed=<s>]``."""
    if len(presets) != 2:
        extra = f" ({presets[2]!r} is one too many)" if len(presets) > 2 else ""
        raise ConfigInputError(f"usage: famlab export <run_dir> <out_dir> [seed=<s>]; got {len(presets)} paths{extra}")
    options = parse_overrides(overrides)
    unknown = [str(k) for k in options if k != "seed"]
    if unknown:
        raise ConfigInputError(f"famlab export takes only seed=<s>; unknown {unknown[0]}=")
    seed = str(options["seed"]) if "seed" in options else None
    plan = plan_export(presets[0], presets[1], seed)
    model = export(plan)
    print(f"exported {plan.checkpoint} as {type(model).__name__} to {plan.out_dir}")
    return 0

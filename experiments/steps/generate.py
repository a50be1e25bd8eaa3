"""A trained run loaded for inference, and the decoding each family x objective writes text with (what
``famlab generate`` and ``famlab fill`` run).

How a run continues a prompt or fills a ``[MASK]`` is its objective's to say (``ObjectiveRules.generate`` /
``ObjectiveRules.fill``, looked up through the registry by the run's family x objective): a causal continuation, a
prefix LM's (the prompt read bidirectionally, after the rule's lead tokens such as UL2's ``[S]``), or one masked span
at the end (span corruption, the rule's lead tokens first). An objective that declares no such rule is refused in one
line naming it (``ConfigInputError``), never decoded by another objective's rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict, cast

import torch
from famlab.datamodules import get_tokenizer
from famlab.experiments.configuration.compose import to_dataclass
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.plumbing.rundir import RunDir
from famlab.experiments.steps.init import load_network, parse_init
from famlab.families.config import ModelConfig
from famlab.families.formats import Arch, Reading, Rule
from famlab.families.generation import generate, sample_next
from famlab.families.network import Network
from famlab.families.registry import family
from famlab.objectives.objective import ObjectiveRules
from famlab.objectives.prefix import prefix_lm_mask
from famlab.objectives.registry import default_objective, objectives_of, rules_of
from famlab.objectives.tokens import TokenIds
from omegaconf import DictConfig, OmegaConf
from tokenizers import Tokenizer

MASK = "[MASK]"


class DecodeOptions(TypedDict):
    """How to decode: ``famlab generate`` / ``famlab fill`` options other than the text."""

    max_new_tokens: int
    temperature: float  # 0 = greedy
    top_k: int  # 0 = off
    top_p: float  # 1.0 = off
    seed: int


@dataclass
class Run:
    """A trained run loaded for inference."""

    net: Network  # eval mode
    tokenizer: Tokenizer
    ids: TokenIds
    family: str
    objective: str

    @property
    def arch(self) -> Arch:
        """The family's architecture (``famlab.families.registry``): what generation and filling dispatch on."""
        return family(self.family).arch

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids) if text else []

    def decode(self, tokens: list[int]) -> str:
        return str(self.tokenizer.decode(tokens))

    @property
    def rules(self) -> ObjectiveRules:
        """How the run's objective is prompted and filled (``famlab.objectives.registry.rules_of``)."""
        return rules_of(self.family, self.objective)


def load_run(run_dir: str) -> Run:
    """Network (``checkpoints/last.ckpt`` or the given ``.ckpt``), tokenizer and objective of a pretraining run."""
    from famlab.experiments.plumbing.data_cache import token_ids

    init = parse_init(run_dir)
    assert init.run_dir is not None
    saved = RunDir(init.run_dir).config_data()
    # merging a mapping into a structured dataclass config gives a DictConfig
    model: ModelConfig = to_dataclass(cast(DictConfig, OmegaConf.merge(OmegaConf.structured(ModelConfig),
                                                                         saved["model"])))
    net, _ = load_network(model, init)
    num_sentinels = int(saved.get("data", {}).get("tokenizer", {}).get("num_sentinels", 100))
    bundle = get_tokenizer(
        None, path=RunDir(init.run_dir).tokenizer_file, num_sentinels=num_sentinels, cache_dir=init.run_dir
    )
    family = model.family.value
    objective = (saved.get("objective") or {}).get("name") or default_objective(family)
    return Run(net.eval(), bundle.tokenizer, token_ids(bundle), family, objective)


def _sample(run: Run, logits: torch.Tensor, opts: DecodeOptions, generator: torch.Generator) -> torch.Tensor:
    return sample_next(
        logits, temperature=opts["temperature"], top_k=opts["top_k"], top_p=opts["top_p"], generator=generator
    )


def _prefix_decode(run: Run, prefix: list[int], opts: DecodeOptions, generator: torch.Generator) -> list[int]:
    """GPT with a bidirectional prefix (prefix_lm / span / ul2 training): recompute each step under
    ``prefix_lm_mask`` (families.generation's KV cache assumes plain causal attention)."""
    seq = torch.tensor([prefix])
    limit = int(run.net.config.max_seq_len)
    out: list[int] = []
    with torch.no_grad():
        for _ in range(opts["max_new_tokens"]):
            if seq.shape[1] >= limit and run.net.config.pos.length_bounded:
                break
            mask = prefix_lm_mask(torch.tensor([len(prefix)]), seq.shape[1])
            logits = run.net(seq, attention_mask=mask).logits
            assert logits is not None  # compute_logits defaults to True
            token = int(_sample(run, logits[:, -1], opts, generator)[0])
            if token == run.ids.eos:
                break
            out.append(token)
            seq = torch.cat([seq, torch.tensor([[token]])], 1)
    return out


def _decode(run: Run, context: list[int], opts: DecodeOptions, generator: torch.Generator) -> list[int]:
    """``families.generation.generate`` from ``context`` (a causal decoder's prompt, continued with its KV cache; a T5
    encoder's input, its decoder started from the start token), up to ``[EOS]``."""
    out = generate(
        run.net,
        torch.tensor([context]),
        max_new_tokens=opts["max_new_tokens"],
        eos_id=run.ids.eos,
        temperature=opts["temperature"],
        top_k=opts["top_k"],
        top_p=opts["top_p"],
        generator=generator,
    )[0].tolist()
    return out[: out.index(run.ids.eos)] if run.ids.eos in out else out


def _unfit(run: Run, rule: Rule, what: str) -> ConfigInputError:
    return ConfigInputError(f"objective {run.objective}'s {what} rule ({rule.reading.value}) cannot run on a "
                            f"{run.family} ({run.arch.value}) network")


def generate_text(run: Run, prompt: str, opts: DecodeOptions) -> str:
    """The continuation of ``prompt`` (without the prompt), by the run's objective's generation rule."""
    generator = torch.Generator().manual_seed(opts["seed"])
    tokens, ids = run.encode(prompt), run.ids
    rules = run.rules
    rule = rules.generate
    if rule is None:
        hint = '; use famlab fill <run_dir> text="... [MASK] ..."' if rules.fill is not None else ""
        raise ConfigInputError(f"objective {run.objective} declares no generation rule: a {run.family} run trained "
                               f"with it cannot generate{hint}")
    if rule.reading is Reading.SENTINEL and run.arch is not Arch.ENCODER:  # fill one masked span at the end
        return infill(run, [prompt, ""], opts, rule)[0]
    context = rule.lead_ids(ids) + tokens
    if rule.reading is Reading.PREFIX and run.arch is Arch.ENCODER_DECODER:  # the encoder reads the prompt
        return run.decode(_decode(run, context + [ids.eos], opts, generator))
    if rule.reading is Reading.PREFIX and run.arch is Arch.DECODER:
        return run.decode(_prefix_decode(run, context, opts, generator))
    if rule.reading is Reading.CAUSAL and run.arch is Arch.DECODER:
        return run.decode(_decode(run, context, opts, generator))
    raise _unfit(run, rule, "generation")


def _spans(tokens: list[int], sentinels: list[int], count: int) -> list[list[int]]:
    """Split ``s0 span0 s1 span1 ...`` into ``count`` spans (missing ones empty)."""
    spans: list[list[int]] = [[] for _ in range(count)]
    current = -1
    for token in tokens:
        if token in sentinels:
            current = sentinels.index(token)
        elif 0 <= current < count:
            spans[current].append(token)
    return spans


def _fillers(family_name: str) -> str:
    """The objectives that can fill a ``[MASK]`` of a ``family_name`` run, as ``a, b or c``."""
    names = [o for o in objectives_of(family_name) if _can_fill(rules_of(family_name, o))]
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else "".join(names)


def _can_fill(rules: ObjectiveRules) -> bool:
    """Whether ``famlab fill`` can run: a fill rule, or a prefix LM's continuation (one [MASK] at the end)."""
    return rules.fill is not None or (rules.generate is not None and rules.generate.reading is Reading.PREFIX)


def fill_text(run: Run, text: str, opts: DecodeOptions) -> str:
    """``text`` with every ``[MASK]`` filled, each fill in brackets, by the run's objective's fill rule (a prefix LM
    without one fills only a ``[MASK]`` at the end, as a continuation)."""
    pieces = text.split(MASK)
    if len(pieces) == 1:
        raise ConfigInputError(f"text= has no {MASK} to fill")
    rules = run.rules
    if not _can_fill(rules):
        instead = "use famlab generate, or " if rules.generate is not None else ""
        raise ConfigInputError(f"a {run.family} run trained with {run.objective} cannot infill; {instead}pretrain "
                               f"with objective.name={_fillers(run.family)}")
    if rules.fill is None:  # a prefix LM: the one [MASK] at the end is the continuation of the text before it
        if len(pieces) > 2 or pieces[-1].strip():
            raise ConfigInputError(f"a {run.objective} run can only fill one {MASK} at the end of text= "
                                   "(a continuation)")
        fills = [generate_text(run, pieces[0], opts)]
    else:
        fills = infill(run, pieces, opts, rules.fill)
    filled = pieces[0]
    for fill, piece in zip(fills, pieces[1:], strict=True):
        filled += f"[{fill.strip()}]" + piece
    return filled


def infill(run: Run, pieces: list[str], opts: DecodeOptions, rule: Rule) -> list[str]:
    """The decoded text of each gap between ``pieces`` by ``rule`` (masked: one token each, an encoder's argmax;
    sentinel: one sentinel span each, the rule's lead tokens first, e.g. UL2's ``[R]``)."""
    ids, count = run.ids, len(pieces) - 1
    encoded = [run.encode(p) for p in pieces]
    if rule.reading is Reading.MASKED and run.arch is Arch.ENCODER:  # [CLS] piece [MASK] piece ... [SEP]
        body = []
        for piece in encoded[:-1]:
            body += piece + [ids.mask]
        seq = family(run.family).input_format.wrap(body + encoded[-1], ids)
        with torch.no_grad():
            logits = run.net(torch.tensor([seq])).logits
        assert logits is not None  # compute_logits defaults to True
        return [run.decode([int(logits[0, i].argmax())]) for i, t in enumerate(seq) if t == ids.mask]
    if rule.reading is not Reading.SENTINEL or run.arch is Arch.ENCODER:
        raise _unfit(run, rule, "fill")
    if count > len(ids.sentinel_ids):
        raise ConfigInputError(f"text= has {count} {MASK}s but the tokenizer has {len(ids.sentinel_ids)} sentinels")
    corrupted = rule.lead_ids(ids)
    for piece, sentinel in zip(encoded[:-1], ids.sentinel_ids[:count], strict=True):
        corrupted += piece + [sentinel]
    corrupted += encoded[-1] + [ids.eos]
    generator = torch.Generator().manual_seed(opts["seed"])
    if run.arch is Arch.ENCODER_DECODER:
        out = _decode(run, corrupted, opts, generator)
    else:
        out = _prefix_decode(run, corrupted, opts, generator)
    return [run.decode(span) for span in _spans(out, list(ids.sentinel_ids), count)]


__all__ = ["DecodeOptions", "Run", "fill_text", "generate_text", "infill", "load_run"]

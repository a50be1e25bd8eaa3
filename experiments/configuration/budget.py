"""Budget matching across families: training FLOPs, parameter counts or corpus tokens (``compare.match``).

The unit matched is a comparison *arm* (a family, or with ``compare.objectives`` a family x objective pair):
the functions below take dicts keyed by arm name, and each arm's per-step cost comes from its own objective.

- ``flops``: per-step training FLOPs come from :func:`famlab.families.flops.train_flops` on the shapes of a real
  collated batch of the family's objective (encoder tokens, decoder tokens, label positions of the output
  head); steps per family = round(target / flops_per_step), so the mismatch is at most half a step.
- ``params``: :func:`solve_params` picks ``model.dim`` (in steps of ``num_heads``, head_dim derived) and
  ``model.ffn_dim`` so that the **non-embedding** parameter count (everything except ``nn.Embedding``
  tables: token / position / type embeddings and T5's relative-bias table; the tied heads add nothing)
  matches the target; all families then train the same steps on the same batches.
- ``tokens``: steps per family = round(target / corpus tokens per step), corpus tokens being the raw
  block length x batch size (what each objective consumes from the token file).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.configuration.plans import ComparePlan
from famlab.families import Network, build_network
from famlab.families.config import ModelConfig
from famlab.families.flops import batch_shape, train_flops
from torch import nn

if TYPE_CHECKING:
    from famlab.objectives.objective import Objective


class BudgetError(ConfigInputError):
    """A budget that cannot be matched within ``compare.tolerance``."""


@dataclass
class StepCost:
    """What one optimizer step of a family costs (one rank, accumulation included)."""

    flops: int  # training FLOPs (forward + backward) of one optimizer step
    corpus_tokens: int  # corpus tokens consumed (raw block length x batch size x accumulation)
    shape: str  # readable batch shape, e.g. "B=32 S=64 T=16 labels=320"


def probe_batch(objective: Objective, batch_size: int, vocab_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A collated batch of the objective on random ordinary tokens (ids 10 .. vocab/2), for shape counting."""
    g = torch.Generator().manual_seed(seed)
    hi = max(11, vocab_size // 2)  # far below T5's sentinels (top of the vocabulary) and above the specials
    samples = [torch.randint(10, hi, (objective.raw_block_len,), generator=g) for _ in range(batch_size)]
    with torch.random.fork_rng(devices=[]):  # an objective without its own generator draws from the global RNG
        return objective.collate(samples)


def step_cost(model: ModelConfig, objective: Objective, batch_size: int, accumulate: int = 1) -> StepCost:
    """FLOPs and corpus tokens of one optimizer step, from a probe batch's real shapes.

    The output head is counted only where there are labels: BERT's sparse MLM head projects the labelled
    positions; GPT (every position labelled, or the targets for span / prefix LM, whose logits are
    computed for the whole sequence) and T5 (decoder positions) project every output position.
    """
    batch = probe_batch(objective, batch_size, model.vocab_size)
    seq, dec_len, labels = batch_shape(model, batch)
    flops = train_flops(model, batch_size=batch_size, seq_len=seq, dec_len=dec_len, num_label_tokens=labels)
    shape = f"B={batch_size} S={seq}" + (f" T={dec_len}" if dec_len else "") + (f" labels={labels}" if labels else "")
    return StepCost(int(flops) * accumulate, objective.raw_block_len * batch_size * accumulate, shape)


def match_steps(costs: dict[str, int], target: float, tolerance: float, what: str) -> dict[str, int]:
    """Steps per arm (family, or family x objective) so that ``steps * cost`` is within ``tolerance`` of ``target``.

    Raises:
        BudgetError: when an arm cannot get within the tolerance (its step is too coarse).
    """
    steps = {}
    for family, cost in costs.items():
        n = max(1, round(target / cost))
        error = abs(n * cost - target) / target
        if error > tolerance:
            raise BudgetError(
                f"compare.match={what}: {family} cannot get within compare.tolerance={tolerance} of the budget "
                f"(one step is {cost / target:.1%} of it); raise trainer.max_steps"
            )
        steps[family] = n
    return steps


def non_embedding_params(net: Network | nn.Module) -> int:
    """Parameters outside ``nn.Embedding`` tables (tied heads share the embedding, so add nothing)."""
    embedded = {id(p) for m in net.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    seen: set[int] = set()
    total = 0
    for p in net.parameters():
        if id(p) not in embedded and id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def count_params(model: ModelConfig) -> tuple[int, int]:
    """``(total, non-embedding)`` parameter counts of the network ``model`` describes (built on meta)."""
    with torch.device("meta"):
        net = build_network(model)
    total = sum(p.numel() for p in net.parameters())
    return total, non_embedding_params(net)


def _with(model: ModelConfig, *, dim: int, ffn_dim: int) -> ModelConfig:
    # derived fields are recomputed by __post_init__ when reset to None
    return dataclasses.replace(model, head_dim=None, dim=dim, ffn_dim=ffn_dim)


def solve_params(model: ModelConfig, target: int, *, ffn_ratio: float = 4.0) -> tuple[ModelConfig, int]:
    """Pick ``dim`` and ``ffn_dim`` so the non-embedding parameter count is as close as possible to ``target``.

    The count is linear in ``ffn_dim`` at a fixed ``dim``, so for each candidate ``dim`` (multiples of
    ``num_heads``) two meta-device builds give the exact ``ffn_dim``; among candidates within 0.5 %
    the one whose ``ffn_dim / dim`` is closest to ``ffn_ratio`` wins (keeps the shape conventional).

    Returns:
        (the solved ModelConfig, its non-embedding parameter count).
    """
    step = model.num_heads
    best: tuple[float, float, ModelConfig, int] | None = None
    base_dim = model.dim
    for mult in range(max(1, base_dim // step // 4), base_dim // step * 4 + 1):
        dim = mult * step
        try:
            lo = count_params(_with(model, dim=dim, ffn_dim=step))[1]
            hi = count_params(_with(model, dim=dim, ffn_dim=2 * step))[1]
        except ValueError:
            continue
        per_unit = (hi - lo) / step
        if per_unit <= 0:
            continue
        ffn = round(step + (target - lo) / per_unit)
        if ffn < 1:
            continue
        cand = _with(model, dim=dim, ffn_dim=ffn)
        got = count_params(cand)[1]
        error = abs(got - target) / target
        shape_penalty = abs(ffn / dim - ffn_ratio)
        key = (0.0 if error <= 0.005 else error, shape_penalty)
        if best is None or key < (best[0], best[1]):
            best = (key[0], key[1], cand, got)
    if best is None:
        raise BudgetError(f"compare.match=params: no size of model.family={model.family.value} reaches {target}")
    return best[2], best[3]


def relative_spread(values: dict[str, float]) -> float:
    """(max - min) / min over families: the budget mismatch the report states."""
    lo, hi = min(values.values()), max(values.values())
    return (hi - lo) / lo if lo else float("inf")


def describe(cfgs: dict[str, ComparePlan]) -> str:
    """One line per arm: size, steps, batch (for progress output)."""
    return "; ".join(
        f"{f}: dim {c.model.dim} ffn {c.model.ffn_dim} x{c.model.num_layers} steps {c.trainer.max_steps}"
        for f, c in cfgs.items()
    )

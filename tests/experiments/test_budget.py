"""Budget matching: FLOPs per step from real batches, steps within 2 %, the parameter solver within 2 %."""

import pytest
import torch
from famlab.experiments.configuration.budget import (
    BudgetError,
    count_params,
    match_steps,
    non_embedding_params,
    solve_params,
    step_cost,
)
from famlab.families import build_network
from famlab.families.config import ModelConfig
from famlab.objectives import OBJECTIVES, TokenIds, make_objective
from torch.utils.flop_counter import FlopCounterMode

V = 512


def ids() -> TokenIds:
    special = dict(pad=0, unk=1, cls=2, sep=3, mask=4, bos=5, eos=6, r=7, x=8, s=9)
    return TokenIds(vocab_size=V, sentinel_ids=list(range(V - 1, V - 21, -1)), **special)


def model(family: str, **kw) -> ModelConfig:
    return ModelConfig(family=family, vocab_size=V, dim=32, num_layers=2, num_heads=2, max_seq_len=64,
                       dropout=0.0, attn_impl="math", **kw)


@pytest.mark.parametrize(("family", "name"), [(f, o) for f in ("bert", "gpt", "t5") for o in OBJECTIVES[f]])
def test_step_cost_matches_the_flop_counter_on_a_real_training_step(family, name):
    """step_cost's FLOPs (an analytic count) equal torch's FlopCounterMode over one forward + backward of the
    objective's batch exactly: both count the matmuls alone (no bias adds, norms or softmax)."""
    cfg = model(family)
    objective = make_objective(name, ids(), seq_len=32, family=family, generator=torch.Generator().manual_seed(0))
    cost = step_cost(cfg, objective, batch_size=4)
    from famlab.experiments.configuration.budget import probe_batch

    torch.manual_seed(0)
    net = build_network(cfg)
    batch = probe_batch(objective, 4, V)
    with FlopCounterMode(display=False) as counter:
        objective.loss(net, batch).loss.backward()
    assert cost.flops == counter.get_total_flops()
    assert cost.corpus_tokens == 4 * objective.raw_block_len


def test_flops_match_holds_within_two_percent_for_all_families():
    costs = {}
    for family in ("bert", "gpt", "t5"):
        objective = make_objective(OBJECTIVES[family][0], ids(), seq_len=64, family=family)
        costs[family] = step_cost(model(family), objective, batch_size=8).flops
    target = 200 * sorted(costs.values())[1]
    steps = match_steps(costs, target, 0.02, "flops")
    totals = [steps[f] * costs[f] for f in costs]
    assert max(totals) / min(totals) - 1 <= 0.02
    assert len(set(steps.values())) == 3  # the families really train different step counts


def test_a_too_coarse_budget_is_an_error():
    with pytest.raises(BudgetError, match="compare.tolerance"):
        match_steps({"gpt": 100, "t5": 170}, 250, 0.02, "flops")


def test_non_embedding_params_leave_out_embedding_tables():
    net = build_network(model("gpt"))
    emb = sum(p.numel() for n, p in net.named_parameters() if "emb" in n)
    assert emb > 0
    assert non_embedding_params(net) == sum(p.numel() for p in net.parameters()) - emb


@pytest.mark.parametrize("family", ["bert", "t5"])
def test_param_solver_matches_gpt_within_two_percent(family):
    """T5 (two stacks) and BERT get a size whose non-embedding count is within 2 % of GPT's."""
    target = count_params(model("gpt", pos="learned"))[1]
    solved, got = solve_params(model(family), target)
    real = non_embedding_params(build_network(solved))  # a real build, not the solver's meta one
    assert real == got
    assert abs(real - target) / target <= 0.02
    assert solved.dim % solved.num_heads == 0

"""AdamW parameter groups and the warmup + cosine schedule."""

import math

import pytest
import torch
from famlab.objectives import ObjectiveError, OptimSettings, configure_optimizer, decay_groups, lr_factor


def test_decay_only_matrices(tiny_net):
    """>= 2-D weights (linears, embeddings) decay; biases and norm scales do not; each parameter appears once."""
    net = tiny_net("bert")
    decay, no_decay = decay_groups(net, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    ids = [id(p) for g in (decay, no_decay) for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(net.parameters()))
    names = {id(p): n for n, p in net.named_parameters()}
    assert any("norm" in names[id(p)] for p in no_decay["params"])
    assert any("embed" in names[id(p)] for p in decay["params"])


def test_schedule_values():
    """nanoGPT's warmup (step + 1) / (warmup + 1), cosine to min_lr_ratio at max_steps, flat after."""
    s = OptimSettings(lr=1.0, warmup_steps=10, max_steps=110, min_lr_ratio=0.1)
    assert lr_factor(0, s) == pytest.approx(1 / 11)
    assert lr_factor(9, s) == pytest.approx(10 / 11)
    assert lr_factor(10, s) == pytest.approx(1.0)
    assert lr_factor(60, s) == pytest.approx(0.1 + 0.9 * 0.5)  # half way: cos(pi / 2) = 0
    assert lr_factor(35, s) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.25)))
    assert lr_factor(110, s) == pytest.approx(0.1) and lr_factor(500, s) == pytest.approx(0.1)
    values = [lr_factor(i, s) for i in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))


def test_scheduler_steps_per_optimizer_step(tiny_net):
    """The Lightning config steps every optimiser step; group rates follow lr * factor, head rate too."""
    net = tiny_net("gpt")
    s = OptimSettings(lr=1e-3, warmup_steps=2, max_steps=10)
    head = torch.nn.Linear(32, 3)
    config = configure_optimizer(decay_groups(net, 0.1) + decay_groups(head, 0.1, lr=5e-3), s)
    assert config["lr_scheduler"]["interval"] == "step"
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    assert optimizer.defaults["fused"] is True  # auto: float parameters on the CPU have the fused kernel
    for step in range(5):
        lrs = [g["lr"] for g in optimizer.param_groups]
        assert lrs[0] == pytest.approx(1e-3 * lr_factor(step, s))
        assert lrs[-1] == pytest.approx(5e-3 * lr_factor(step, s))
        optimizer.step()
        scheduler.step()


@pytest.mark.parametrize(
    "kwargs,key", [({"lr": 0}, "optim.lr"), ({"min_lr_ratio": 2}, "optim.min_lr_ratio"), ({"max_steps": 0}, "max")]
)
def test_bad_settings(kwargs, key):
    with pytest.raises(ObjectiveError, match=key):
        OptimSettings(**kwargs)


def test_auto_fused_adamw_matches_the_foreach_update():
    """The automatic fused kernel takes the same AdamW step as the reference foreach implementation."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)
    b.load_state_dict(a.state_dict())
    s = OptimSettings(lr=1e-2, warmup_steps=0, max_steps=10)
    fused = configure_optimizer(decay_groups(a, 0.1), s)["optimizer"]
    ref = torch.optim.AdamW(decay_groups(b, 0.1), lr=1e-2, betas=s.betas, eps=s.eps, foreach=True)
    x = torch.randn(16, 8)
    for _ in range(3):
        for net, opt in ((a, fused), (b, ref)):
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_adafactor_steps_are_relative_to_each_parameter_scale():
    """optim.name=adafactor: the same gradient moves a parameter 10x larger by a step 10x larger (RMS scaling),
    which AdamW does not; the schedule still sets the cap on the relative step."""
    small, large = torch.nn.Parameter(torch.full((4, 4), 0.1)), torch.nn.Parameter(torch.full((4, 4), 1.0))
    s = OptimSettings(name="adafactor", lr=1e-2, warmup_steps=0, max_steps=10, weight_decay=0.0)
    config = configure_optimizer([{"params": [small, large], "weight_decay": 0.0}], s)
    optimizer = config["optimizer"]
    assert isinstance(optimizer, torch.optim.Adafactor)
    grad = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    small.grad, large.grad = grad.clone(), grad.clone()
    before = small.detach().clone(), large.detach().clone()
    optimizer.step()
    step_small, step_large = (small.detach() - before[0]).norm(), (large.detach() - before[1]).norm()
    torch.testing.assert_close(step_large / step_small, torch.tensor(10.0), rtol=1e-4, atol=0)
    config["lr_scheduler"]["scheduler"].step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-2 * lr_factor(1, s))


def test_adafactor_lowers_the_loss_of_a_tiny_network(tiny_net):
    torch.manual_seed(0)
    net = tiny_net("t5")
    s = OptimSettings(name="adafactor", lr=1e-2, warmup_steps=0, max_steps=30, weight_decay=0.0)
    optimizer = configure_optimizer(decay_groups(net, 0.0), s)["optimizer"]
    ids = torch.randint(5, 60, (4, 12))
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(ids, decoder_input_ids=ids).logits.flatten(0, 1), ids.flatten())
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def test_unknown_optimizer_is_refused():
    with pytest.raises(ObjectiveError, match="optim.name=sgd"):
        OptimSettings(name="sgd")

"""`famlab bench`: runs end to end at tiny shapes, prints every field, and compares like with like."""

import re
from collections import defaultdict

import pytest
import torch
from famlab.experiments.commands import cli
from famlab.experiments.perf.bench import (
    BenchError,
    BenchSettings,
    build_sides,
    hf_batch,
    parse_flags,
    quartiles,
)

pytest.importorskip("transformers")

TINY = ["--dim=32", "--layers=2", "--heads=4", "--ffn=64", "--vocab=400", "--batch=2", "--seq=16", "--pairs=2",
        "--warmup=1", "--threads=1", "--peak-size=512"]


def test_bench_runs_end_to_end_and_prints_every_field(capsys):
    """Two pairs per family: tokens/s, MFU, ratio with IQR and a verdict for each family, the peak, a verdict."""
    assert cli.main(["bench", *TINY, "--no-data"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"peak: [\d.]+ GFLOP/s \(measured fp32 matmul 512x512x512", out)
    for family in ("bert", "gpt", "t5"):
        block = out.split(f"\n{family} [", 1)[1]
        assert re.search(r"famlab +\d+ tok/s +step +[\d.]+ ms +MFU [\d.]+%", block)
        assert re.search(r"hf +\d+ tok/s +step +[\d.]+ ms +MFU [\d.]+%", block)
        assert re.search(r"ratio famlab/hf median [\d.]+ +IQR \[[\d.]+, [\d.]+\] +target >= [\d.]+ +(PASS|FAIL)", block)
    assert re.search(r"verdict: (PASS|FAIL) \(bert [\d.]+ .+; gpt .+; t5 .+\)", out)


@pytest.mark.slow
def test_bench_reports_tokenization_and_loader_share(capsys):
    """With the data measurement on, the bundled corpus's tokenization time and the loader's share are printed."""
    assert cli.main(["bench", *TINY, "--families=gpt"]) == 0
    out = capsys.readouterr().out
    match = re.search(r"data: bundled corpus tokenized in ([\d.]+) s .*= ([\d.]+)% of step time", out)
    assert match and float(match.group(1)) > 0 and 0 < float(match.group(2)) < 100


@pytest.mark.parametrize("family", ["bert", "t5"])
def test_both_sides_start_from_the_same_model_and_batch(family):
    """Same weights, same batch: HF's own loss equals famlab's objective loss (BERT MLM, T5 span corruption)."""
    s = BenchSettings(dim=32, layers=2, heads=4, ffn=64, vocab=400, batch=2, seq=16)
    _, _, info = build_sides(family, s, torch.device("cpu"))
    ours = info["objective"].loss(info["net"], info["batch"]).loss
    theirs = info["ref"](**hf_batch(family, info["batch"])).loss
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert not any(m.p for m in info["ref"].modules() if isinstance(m, torch.nn.Dropout))  # dropout 0 on HF too


def test_gpt_sides_read_the_same_tokens():
    """GPT: HF gets famlab's CLM inputs as labels (it shifts inside its loss), so both read identical inputs."""
    s = BenchSettings(dim=32, layers=2, heads=4, ffn=64, vocab=400, batch=2, seq=16)
    _, _, info = build_sides("gpt", s, torch.device("cpu"))
    batch, ref_batch = info["batch"], info["ref_batch"]
    assert torch.equal(ref_batch["input_ids"], batch["input_ids"])
    torch.testing.assert_close(batch["labels"][:, :-1], ref_batch["labels"][:, 1:])  # same next-token targets


def test_bad_flags_raise_one_line_errors_naming_the_flag():
    with pytest.raises(BenchError, match="--pairs=0"):
        parse_flags([], [], ["--pairs=0"])
    with pytest.raises(BenchError, match="unknown bench option --colour"):
        parse_flags([], [], ["--colour=red"])
    with pytest.raises(BenchError, match="--families=bert,xlnet"):
        parse_flags([], [], ["--families=bert,xlnet"])
    assert parse_flags([], ["pairs=3"], ["--no-data"]) == BenchSettings(pairs=3, data=False)


def test_quartiles_match_numpy():
    values = [1.3, 0.9, 1.1, 1.7, 1.0, 1.2]
    np = pytest.importorskip("numpy")
    assert quartiles(values) == pytest.approx(tuple(np.percentile(values, [25, 50, 75])))


def test_profile_breaks_down_real_steps_of_both_sides():
    """`--profile` times the forward's aten ops and the backward's autograd nodes inside real train steps."""
    from famlab.experiments.perf.breakdown import MATMUL_NODES, breakdown, format_breakdown

    s = BenchSettings(dim=32, layers=2, heads=4, ffn=64, vocab=400, batch=2, seq=16)
    ours, theirs, _ = build_sides("t5", s, torch.device("cpu"))
    results = breakdown({"famlab": ours.step, "hf": theirs.step}, rounds=2, warmup=0)
    for side in results.values():
        assert set(side.phases) == {"forward", "backward", "optimizer"} and min(side.phases.values()) > 0
        assert side.forward_ops["mm"] > 0 and any(side.backward_nodes.get(n, 0) > 0 for n in MATMUL_NODES)
        assert 0 < side.matmul_s() < sum(side.forward_ops.values()) + sum(side.backward_nodes.values())
    assert "_RMSNormFunctionBackward" in results["famlab"].backward_nodes  # famlab's own backward is a node
    assert "_RMSNormFunctionBackward" not in results["hf"].backward_nodes
    table = "\n".join(format_breakdown(results, rows=3))
    assert re.search(r"backward +[\d.]+ +[\d.]+", table) and "others)" in table
    assert re.search(r"matmul .*: famlab [\d.]+ ms = \d+%, hf [\d.]+ ms = \d+%", table)


def test_profile_hooks_do_not_outlive_their_step():
    """The per-node hooks go with their backward: parameters' AccumulateGrad nodes are reused by later steps."""
    from famlab.experiments.perf.breakdown import _backward_timed

    layer = torch.nn.Linear(4, 4)
    first: dict[str, float] = defaultdict(float)
    _backward_timed(layer(torch.ones(2, 4)).sum(), first)
    assert first["torch::autograd::AccumulateGrad"] > 0
    before = dict(first)
    layer(torch.ones(2, 4)).sum().backward()
    assert first == before


def test_bench_profile_flag_prints_the_table(capsys):
    assert cli.main(["bench", *TINY, "--no-data", "--families=gpt", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "profile (ms per step" in out and re.search(r"MmBackward0 +[\d.]+ +[\d.]+", out)

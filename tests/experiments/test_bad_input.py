"""The bad-input catalogue: each case exits with status 2 and one line naming the key / file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from famlab.experiments.commands import cli

from tests.experiments.reliability_helpers import write_corpus

ROOT = Path(__file__).resolve().parents[2]
BASE = ["trainer.max_steps=2", "trainer.progress_bar=false", "wandb.mode=disabled", "data.batch_size=8",
        "data.seq_len=32"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAMLAB_CACHE", str(d / "cache"))
        (d / "empty.txt").write_text("")
        (d / "binary.bin").write_bytes(bytes(range(256)) * 8)
        (d / "binary.txt").write_bytes(b"\xff\xfe\x00\x81" * 500)  # no decodable line at all
        (d / "tiny.txt").write_text("one short line.\n")
        (d / "tok.json").write_text("not json\n")
        (d / "afile").write_text("")
        (d / "nolabel.csv").write_text("sentence,topic\nhi there,a\n")
        write_corpus(d / "corpus.txt")
        yield d


# (case, args, expected fragment of the one-line message); {d} = the fixture's directory
CASES = [
    ("unknown key", ["pretrain", "gpt", "tiny", "model.dimm=32"], "model.dimm: Key 'dimm' not in 'ModelConfig'"),
    ("unknown section", ["pretrain", "gpt", "tiny", "trainr.max_steps=3"], "Key 'trainr' not in 'Config'"),
    ("bad enum value", ["pretrain", "gpt", "tiny", "model.pos=sinusoidalx"], "model.pos='sinusoidalx' is not one of"),
    ("unknown preset / family", ["pretrain", "rnn", "tiny"], "unknown preset 'rnn'"),
    ("wrong type", ["pretrain", "gpt", "tiny", "trainer.max_steps=abc"], "trainer.max_steps: Value 'abc'"),
    ("family x objective", ["pretrain", "bert", "tiny", "objective.name=clm"],
     "objective.name=clm cannot train model.family=bert"),
    ("dim not divisible by heads", ["pretrain", "gpt", "tiny", "model.dim=30", "model.num_heads=4"],
     "model.dim=30 is not divisible by model.num_heads=4"),
    ("sequence > max_seq_len", ["pretrain", "gpt", "tiny", "data.seq_len=100000"],
     "data.seq_len=100000 exceeds model.max_seq_len"),
    ("empty corpus", ["pretrain", "gpt", "tiny", "data.corpus={d}/empty.txt", *BASE], "empty corpus"),
    ("binary file", ["pretrain", "gpt", "tiny", "data.corpus={d}/binary.bin", *BASE], "unsupported corpus file type"),
    ("non-UTF-8 text file", ["pretrain", "gpt", "tiny", "data.corpus={d}/binary.txt", *BASE], "no UTF-8 text"),
    ("missing corpus", ["pretrain", "gpt", "tiny", "data.corpus={d}/nope.txt", *BASE], "no such corpus file"),
    ("corpus too small for a batch", ["pretrain", "gpt", "tiny", "data.corpus={d}/tiny.txt", *BASE],
     "fewer than one batch"),
    ("tokenizer file not a tokenizer", ["pretrain", "gpt", "tiny", "data.corpus={d}/corpus.txt",
                                        "data.tokenizer.path={d}/tok.json", *BASE], "not a tokenizers tokenizer.json"),
    ("vocab_size vs tokenizer", ["pretrain", "gpt", "tiny", "data.corpus={d}/corpus.txt", "model.vocab_size=777",
                                 *BASE], "model.vocab_size=777 does not match the tokenizer"),
    ("missing init run", ["finetune", "init={d}/norun", "data.task={d}/nolabel.csv"], "init={d}/norun is not a run"),
    ("no init", ["finetune", "data.task={d}/nolabel.csv"], "init= is required"),
    ("more selecting seeds than seeds", ["finetune", "gpt", "tiny", "init=scratch", "finetune.seeds=[0,1]",
                                         "finetune.select_seeds=3"],
     "finetune.select_seeds=3 is more than the 2 finetune.seeds=[0, 1]"),
    ("missing text / label column", ["finetune", "gpt", "tiny", "init=scratch", "data.task={d}/nolabel.csv",
                                     "finetune.max_steps=2", "trainer.progress_bar=false", "wandb.mode=disabled",
                                     "data.batch_size=8"],
     "no column"),
    ("unwritable run_dir", ["pretrain", "gpt", "tiny", "run_dir={d}/afile/sub", *BASE], "is not writable"),
    ("devices > machine", ["pretrain", "gpt", "tiny", "trainer.accelerator=cpu",
                           f"trainer.devices={(os.cpu_count() or 1) + 1}", "data.corpus={d}/corpus.txt",
                           "run_dir={d}/dev", *BASE], "but this machine has"),
    ("missing resume checkpoint", ["pretrain", "gpt", "tiny", "resume={d}/none.ckpt"], "resume={d}/none.ckpt"),
    ("max_bad_steps < 1", ["pretrain", "gpt", "tiny", "trainer.max_bad_steps=0", "data.corpus={d}/corpus.txt",
                           "run_dir={d}/mbs", *BASE], "trainer.max_bad_steps=0 must be in [1, "),
    ("no compare workers", ["compare", "compare.workers=0", "data.corpus={d}/corpus.txt"],
     "compare.workers=0 must be in [1, "),
    ("compare device ids", ["compare", "compare.workers=2", "trainer.devices=0,1", "data.corpus={d}/corpus.txt"],
     "trainer.devices=0,1: famlab compare gives each worker its own devices; give a count"),
]


@pytest.mark.parametrize("case,args,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(files, capsys, case, args, fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default run directories go to ./runs
    capsys.readouterr()
    assert cli.main([a.format(d=files) for a in args]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("famlab:")]
    assert len(err) == 1 and err[0].startswith("famlab: error: "), err
    assert fragment.format(d=files) in err[0]
    assert not list(tmp_path.iterdir()), "a refused run left an empty run directory behind"


def test_existing_run_dir_is_not_overwritten(files, capsys):
    run_dir = files / "taken"
    run_dir.mkdir()
    (run_dir / "results.json").write_text("{}")
    assert cli.main(["pretrain", "gpt", "tiny", f"run_dir={run_dir}", *BASE]) == 2
    assert "exists and is not empty; pass resume=auto" in capsys.readouterr().err
    assert (run_dir / "results.json").read_text() == "{}"


@pytest.mark.parametrize("args,fragment", [
    (["pretrain", "gpt", "tiny", "model.dimm=32"], "model.dimm"),
    (["pretrain", "bert", "tiny", "objective.name=clm"], "objective.name=clm"),
])
def test_bad_input_in_a_real_process(args, fragment):
    """The console entry itself: exit status 2, one stderr line, no traceback."""
    done = subprocess.run([sys.executable, "-m", "famlab", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr and len(lines) == 1 and fragment in lines[0], done.stderr[-1000:]


@pytest.fixture(scope="module")
def gpt_run(files):
    """A real 2-step GPT pretraining run to misuse below."""
    run_dir = files / "gpt-run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAMLAB_CACHE", str(files / "cache"))
        assert cli.main(["pretrain", "gpt", "tiny", f"data.corpus={files}/corpus.txt", f"run_dir={run_dir}",
                         "trainer.val_check_interval=2", *BASE]) == 0
    return run_dir


@pytest.mark.slow
def test_checkpoint_of_another_family_is_refused(files, gpt_run, capsys, monkeypatch):
    """Resuming a BERT pretrain from a GPT checkpoint, or naming t5 for a GPT run's fine-tune: exit 2, one line."""
    monkeypatch.setenv("FAMLAB_CACHE", str(files / "cache"))
    capsys.readouterr()
    ckpt = gpt_run / "checkpoints" / "last.ckpt"
    assert cli.main(["pretrain", "bert", "tiny", f"data.corpus={files}/corpus.txt", f"resume={ckpt}",
                     f"run_dir={files}/bert-from-gpt", *BASE]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("famlab:")]
    assert len(err) == 1 and f"resume={ckpt} does not fit this model (model.family=bert)" in err[0], err
    assert cli.main(["finetune", "t5", f"init={gpt_run}", f"data.task={files}/nolabel.csv"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("famlab:")]
    assert len(err) == 1 and f"init={gpt_run} is a gpt model; model.family=t5 contradicts it" in err[0], err

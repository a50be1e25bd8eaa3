"""Plugins from the command line: ``--plugin <module>`` (or ``plugins=[...]``) imports the user's module in every
process famlab starts (docs/architecture.md, Plugins).

``tests.plugins.toy_plugin`` registers the toy position scheme ``clock``, the toy objective ``half_clm`` and its
encoder-decoder pieces (tests/plugins/toy_plugin/encdec.py): the family ``toy_t5``, its architecture's objective
``lead_lm`` with its own setting ``objective.split`` and its rules, and the norm ``scalenorm`` (chosen by ``model.norm``
like a built-in norm). The commands that import
it run as subprocesses, as a user runs them: a registration is for the whole process, and the toy tests register the
same names in this one (the sweep's dry run imports it here, its registrations undone after).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from famlab.experiments.commands import cli
from famlab.experiments.plumbing import plugins

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "tests.plugins.toy_plugin"
# what only the plugin makes valid: its encoder-decoder family, trained by its objective (its own setting set) with
# its positions
FAMILY = "toy_t5"
ENCDEC = ["model.pos=clock", "objective.name=lead_lm", "objective.split=0.25"]
SCALENORM = "model.norm=scalenorm"  # the plugin's norm, in place of the family's rmsnorm
DDP = ["trainer.devices=2", "trainer.accelerator=cpu", "trainer.strategy=ddp"]


def famlab(args: list[str], cwd: Path, program: tuple[str, ...] = ("-m", "famlab")) -> subprocess.CompletedProcess[str]:
    """``python -m famlab <args>`` in ``cwd`` (a user's directory, not the repository: ``tests`` is importable
    through PYTHONPATH, as a user's package would be installed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "FAMLAB_CACHE": str(cwd / "cache"), "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("FAMLAB_RUN_DIR", None)
    return subprocess.run([sys.executable, *program, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)


def objectives_of_gpt(listing: str) -> list[str]:
    table = listing.split("family x objective")[1]
    (line,) = [line for line in table.splitlines() if line.split()[:1] == ["gpt"]]
    return [name.strip() for name in line.split(None, 1)[1].split(",")]


@pytest.mark.slow
def test_presets_lists_what_the_plugin_registers(tmp_path, capsys):
    assert cli.main(["presets"]) == 0
    without = objectives_of_gpt(capsys.readouterr().out)
    done = famlab(["presets", "--plugin", PLUGIN], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert objectives_of_gpt(done.stdout) == [*without, "half_clm"]
    table = done.stdout.split("family x objective")[1].splitlines()
    assert [line.split(None, 1)[1] for line in table if line.split()[:1] in (["t5"], [FAMILY])] == [
        "span, prefix_lm, ul2, lead_lm"] * 2  # the objectives of its architecture, T5's default first
    keys = ("model.family", "model.pos", "objective.name", "model.norm")
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.split()[:1] in [[k] for k in keys]
            and line.startswith("  ")}  # the registries' rows: what the plugin added, marked, by whom
    assert rows["model.family"].endswith(f"bert, gpt, t5, + {FAMILY} ({PLUGIN})")
    assert rows["model.pos"].endswith(f"t5_bias, none, + clock ({PLUGIN})")
    assert f"ul2, + half_clm ({PLUGIN}); encoder_decoder: span" in rows["objective.name"]
    assert rows["objective.name"].endswith(f"encoder_decoder: span, prefix_lm, ul2, + lead_lm ({PLUGIN})")
    assert rows["model.norm"].endswith(f"layernorm, rmsnorm, + scalenorm ({PLUGIN})")


@pytest.fixture
def fresh_plugins(monkeypatch):
    """This process's record of imported plugins, emptied for the test and put back after."""
    monkeypatch.setattr(plugins, "_LOADED", [])


def test_the_flags_and_the_key_compose_into_one_list(fresh_plugins, capsys):
    """``plugins=[...]`` first, then each ``--plugin`` (``<module>`` or ``=<module>``) appended, duplicates once; the
    config records the list (importable modules of the standard library stand in for plugins)."""
    args = ["config", "tiny", "plugins=[json]", "--plugin", "string", "--plugin=json", "--plugin=textwrap"]
    assert cli.main(args) == 0
    assert yaml.safe_load(capsys.readouterr().out)["plugins"] == ["json", "string", "textwrap"]
    assert plugins.loaded() == ["json", "string", "textwrap"]
    assert plugins.take(["gpt", "--plugin", "a.b", "x=1", "--dry-run"]) == (["a.b"], ["gpt", "x=1", "--dry-run"])


@pytest.mark.slow
def test_a_preset_files_plugins_are_imported_before_it_is_composed(tmp_path):
    """A preset may name a plugin and use what it registers; ``--plugin`` appends to the preset's list."""
    (tmp_path / "base.yaml").write_text(f"plugins: [{PLUGIN}]\nmodel: {{pos: clock}}\n")
    (tmp_path / "mine.yaml").write_text("extends: base.yaml\nobjective: {name: half_clm}\n")
    done = famlab(["config", "gpt", "tiny", "mine.yaml", "--plugin", "json"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    config = yaml.safe_load(done.stdout)
    assert (config["model"]["pos"], config["objective"]["name"], config["plugins"]) == (
        "clock", "half_clm", [PLUGIN, "json"])


@pytest.fixture
def plugin_here(fresh_plugins):
    """The toy plugin imported in this process by the command (``--plugin``), each of its registrations undone after
    (the toy tests register the same names here)."""
    from famlab.families.blocks.norms import NORMS
    from famlab.families.blocks.positions import unregister_positions
    from famlab.families.config import PosScheme
    from famlab.families.formats import Arch
    from famlab.families.registry import unregister_family
    from famlab.objectives.registry import unregister_objective

    from tests.test_toy_position_scheme import ClockPositions

    assert PLUGIN not in sys.modules
    undo = [lambda: unregister_family(FAMILY), lambda: NORMS.unregister("scalenorm"),
            lambda: unregister_objective(Arch.ENCODER_DECODER, "lead_lm"),
            lambda: unregister_objective(Arch.DECODER, "half_clm"), lambda: unregister_positions("clock")]
    try:
        yield
    finally:
        if sys.modules.pop(PLUGIN, None) is not None:
            for step in undo:
                with contextlib.suppress(ValueError):  # a name the plugin did not register
                    step()
            ClockPositions.scheme = PosScheme.NONE


def test_a_sweep_passes_its_plugins_to_every_trial(plugin_here, tmp_path, monkeypatch, capsys):
    """Each trial is a ``famlab`` process of its own: its command line carries the sweep's plugins, and the sweep's
    settings file keeps them for a resume. The trials train the plugin's family with its objective (its own setting
    set) and positions, composed (and so checked) by the sweep before it runs any: only with the plugin."""
    monkeypatch.chdir(tmp_path)
    spec = {"method": "grid", "parameters": {"optim.lr": {"values": [0.001, 0.002]}},
            "command": ["famlab", "pretrain", FAMILY, "tiny", *ENCDEC, "${args_no_hyphens}"]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    assert cli.main(["sweep", "s.yaml", "--dry-run", "--plugin", PLUGIN, "run_dir=sw"]) == 0
    commands = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("    famlab")]
    assert [command[:4] for command in commands] == [["famlab", "pretrain", FAMILY, "tiny"]] * 2, commands
    assert all(set(ENCDEC) <= set(command) for command in commands), commands
    assert all(command.count(f"'plugins=[\"{PLUGIN}\"]'") == 1 for command in commands), commands
    from famlab.experiments.commands.sweep import SETTINGS_FILE, write_settings
    from famlab.experiments.configuration.compose import compose

    cfg = compose([], ["plugins=[json]"]).cfg
    write_settings(tmp_path, cfg.sweep, cfg.wandb, cfg.plugins)
    assert plugins.stored(tmp_path) == (tmp_path / SETTINGS_FILE, ["json"])


def test_an_objectives_own_setting_reaches_the_arms_whose_objective_declares_it(plugin_here, capsys):
    """A comparison of T5's span corruption against the plugin's ``lead_lm``: ``objective.split`` is ``lead_lm``'s own
    setting, so its arm trains with it and the span arm (which declares none) without it; given to a comparison
    where no arm's objective declares it, it is one line naming the key and each arm's objective."""
    from famlab.experiments.configuration.config import ConfigInputError
    from famlab.experiments.steps.comparison import compose_all

    assert cli.main(["presets", "--plugin", PLUGIN]) == 0
    capsys.readouterr()
    arms = ["compare.families=[t5]", "compare.objectives=[span,lead_lm]"]
    _, cfgs = compose_all(["tiny"], [*arms, "objective.split=0.25"])
    assert {arm: cfg.objective.own for arm, cfg in cfgs.items()} == {"t5-span": {}, "t5-lead_lm": {"split": 0.25}}
    _, defaults = compose_all(["tiny"], arms)
    assert defaults["t5-lead_lm"].objective.own == {"split": 0.5}  # its declared default
    with pytest.raises(ConfigInputError) as refused:
        compose_all(["tiny"], ["compare.families=[t5]", "compare.objectives=[span]", "objective.split=0.25"])
    assert str(refused.value) == ("objective.split is a setting of no arm's objective (their own settings: "
                                  "t5-span: span (none))")


def test_the_plugins_norm_is_built_by_its_name(plugin_here, capsys):
    """Imported by a command, the plugin's ``scalenorm`` is a norm famlab builds by name (``make_norm``, what the
    stacks call with ``model.norm``): each row scaled to norm sqrt(C), times its one gain (1 at init)."""
    import torch
    from famlab.families.blocks.norms import make_norm

    assert cli.main(["presets", "--plugin", PLUGIN]) == 0
    capsys.readouterr()
    norm = make_norm("scalenorm", 32, eps=0.0)
    x = torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(0))
    assert type(norm).__name__ == "ScaleNorm" and [p.shape for p in norm.parameters()] == [torch.Size([])]
    torch.testing.assert_close(norm(x), x / x.norm(dim=-1, keepdim=True) * 32**0.5)


def test_the_plugins_norm_is_chosen_by_model_norm_and_an_unregistered_norm_is_one_line(plugin_here, capsys):
    """``model.norm`` is checked against the registered norms, the plugin's included: ``model.norm=scalenorm`` is
    recorded and built into every norm of the network; a name nobody registered is one line naming ``model.norm`` and
    listing the registered norms."""
    from famlab.experiments.configuration.compose import compose
    from famlab.families import build_network
    from famlab.families.blocks.norms import RMSNorm
    from torch import nn

    from tests.plugins.toy_plugin.encdec import ScaleNorm

    assert cli.main(["config", FAMILY, "tiny", SCALENORM, "--plugin", PLUGIN]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["model"]["norm"] == "scalenorm"
    net = build_network(compose([FAMILY, "tiny"], [SCALENORM, "model.vocab_size=512"]).cfg.model)
    norms = [type(m) for m in net.modules() if isinstance(m, (nn.LayerNorm, RMSNorm, ScaleNorm))]
    assert norms and set(norms) == {ScaleNorm}, norms
    assert cli.main(["config", FAMILY, "tiny", "model.norm=batchnorm", "--plugin", PLUGIN]) == 2
    assert capsys.readouterr().err == (
        "famlab: error: model.norm='batchnorm' is not one of: layernorm, rmsnorm, scalenorm\n")


def test_a_registered_activation_and_ffn_kind_are_chosen_on_the_command_line(capsys):
    """``model.activation`` and ``model.ffn`` are registered names like ``model.norm``: an activation and a gated
    feed-forward kind registered here are composed from the command line, the gated kind gets the gated default
    width, and every feed-forward block of the network applies them."""
    import torch
    from famlab.experiments.configuration.checks import approx_params
    from famlab.experiments.configuration.compose import compose
    from famlab.families import build_network
    from famlab.families.blocks.feedforward import ACTIVATIONS, FFN_KINDS, FeedForward, FFNShape

    ACTIVATIONS.register("probe_tanh", torch.tanh)
    FFN_KINDS.register("probe_glu", FFNShape(gated=True))
    try:
        cfg = compose(["gpt", "tiny"],
                      ["model.activation=probe_tanh", "model.ffn=probe_glu", "model.vocab_size=512"]).cfg
        model = cfg.model
        # the memory fit check counts its three projections, as the built-in gated kind's
        gated = compose(["gpt", "tiny"], ["model.activation=silu", "model.ffn=gated", "model.vocab_size=512"]).cfg
        plain = compose(["gpt", "tiny"], ["model.vocab_size=512"]).cfg
        assert approx_params(cfg.model, 0) == approx_params(gated.model, 0) > approx_params(plain.model, 0)
        assert (model.activation, model.ffn, model.ffn_dim) == ("probe_tanh", "probe_glu", 8 * -(-model.dim // 3))
        blocks = [m for m in build_network(model).modules() if isinstance(m, FeedForward)]
        assert blocks and all(b.act is torch.tanh and b.gated for b in blocks)
        assert cli.main(["config", "gpt", "tiny", "model.activation=swish"]) == 2
        assert capsys.readouterr().err == (
            "famlab: error: model.activation='swish' is not one of: relu, gelu, gelu_tanh, silu, probe_tanh\n")
    finally:
        ACTIVATIONS.unregister("probe_tanh")
        FFN_KINDS.unregister("probe_glu")


@pytest.mark.parametrize(("args", "message"), [
    (["presets", "--plugin", "tests.plugins.broken_plugin"],
     "plugin tests.plugins.broken_plugin cannot be imported: RuntimeError: this plugin needs a setting that is "
     "missing"),
    (["config", "--plugin=tests.plugins.no_such_plugin"],
     "plugin tests.plugins.no_such_plugin cannot be imported: ModuleNotFoundError: No module named "
     "'tests.plugins.no_such_plugin'"),
    (["pretrain", "tiny", "--plugin"], "--plugin needs a module name"),
    (["config", "plugins={a: 1}"], "cannot parse override 'plugins={a: 1}': plugins is a list of module names"),
])
def test_a_plugin_that_cannot_be_imported_is_one_line_naming_it(fresh_plugins, args, message, capsys):
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"famlab: error: {message}"), err


@pytest.mark.parametrize(("command", "stored", "content"), [
    (["pretrain", "gpt", "tiny"], "config.yaml", {"plugins": [PLUGIN], "model": {"pos": "clock"}}),
    (["compare", "tiny"], "comparison.yaml", {"arms": {"gpt": {"plugins": [PLUGIN]}, "bert": {"plugins": []}}}),
    (["sweep", "pos_x_family"], "sweep_config.yaml", {"sweep": {}, "plugins": [PLUGIN]}),
])
def test_resuming_a_directory_written_with_a_plugin_needs_the_plugin(fresh_plugins, tmp_path, command, stored,
                                                                     content, capsys):
    """Refused before composing (which, without the plugin, would fail on the value it registers, not name it)."""
    (tmp_path / stored).write_text(yaml.safe_dump(content))
    assert cli.main([*command, f"run_dir={tmp_path}", "resume=auto"]) == 2
    assert capsys.readouterr().err == (
        f"famlab: error: resume=auto: {tmp_path / stored} was written with plugins=['{PLUGIN}']; this command does "
        f"not import {PLUGIN}: resume with --plugin {PLUGIN}\n")
    assert plugins.loaded() == []


def assert_recorded(run_dir: Path) -> None:
    """The run trained the plugin's family with its objective (its own setting as given) and scheme, and its
    config.yaml names the plugin and its file."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    model, objective = config["model"], config["objective"]
    assert (model["family"], model["pos"], model["norm"], objective["name"], objective["own"], config["plugins"]) == (
        FAMILY, "clock", "scalenorm", "lead_lm", {"split": 0.25}, [PLUGIN])
    assert (model["ffn"], model["activation"], model["dropout"]) == ("gated", "silu", 0.0)  # the family's defaults
    assert config["provenance"]["plugins"] == {
        PLUGIN: {"file": str(ROOT / "tests" / "plugins" / "toy_plugin" / "__init__.py"), "version": "0.1"}}


NORMS_OF = """import sys
from famlab.experiments.plumbing import plugins
from famlab.experiments.steps.generate import load_run
from famlab.families.blocks.norms import RMSNorm
from torch import nn
plugins.load([sys.argv[2]])
from tests.plugins.toy_plugin.encdec import ScaleNorm
net = load_run(sys.argv[1]).net
print(" ".join(type(m).__name__ for m in net.modules() if isinstance(m, (nn.LayerNorm, RMSNorm, ScaleNorm))))
"""


def assert_trained_with_scalenorm(run_dir: Path, cwd: Path) -> None:
    """The run's checkpoint, loaded into the network its config.yaml describes, holds the plugin's ScaleNorm in place
    of every norm (its one scalar gain per norm, not rmsnorm's per-feature weight)."""
    done = famlab([str(run_dir), PLUGIN], cwd, program=("-c", NORMS_OF))
    assert done.returncode == 0, done.stderr[-3000:]
    norms = done.stdout.split()
    assert norms and set(norms) == {"ScaleNorm"}, done.stdout


def assert_refused_without_the_plugin(done: subprocess.CompletedProcess[str], stored: Path) -> None:
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert done.stderr == (f"famlab: error: resume=auto: {stored} was written with plugins=['{PLUGIN}']; this command "
                           f"does not import {PLUGIN}: resume with --plugin {PLUGIN}\n")


@pytest.mark.slow
def test_a_comparison_in_two_spawned_workers_runs_with_the_plugin_and_resumes_only_with_it(tmp_path):
    """``compare.workers=2``: each spawned worker unpickles configs holding ``PosScheme('clock')``, which it can
    only after importing the plugin; resuming without the plugin is refused naming it, with it the comparison is
    read back whole."""
    from tests.experiments.test_compare import tiny_inputs

    inputs = [*tiny_inputs(tmp_path), f"compare.families=[{FAMILY}]", "compare.seeds=[0]", "compare.probe=false",
              "compare.zero_shot_items=8", "compare.bpb_docs=8", "trainer.max_steps=6", "compare.workers=2",
              f"model.family={FAMILY}", *ENCDEC, SCALENORM]  # the family first: objective.name is checked against it
    done = famlab(["compare", *inputs, "--plugin", PLUGIN, "run_dir=cmp"], tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert list(json.loads((tmp_path / "cmp" / "results.json").read_text())["families"]) == [FAMILY]
    assert_recorded(tmp_path / "cmp" / f"{FAMILY}-pretrain-s0")
    assert_trained_with_scalenorm(tmp_path / "cmp" / f"{FAMILY}-pretrain-s0", tmp_path)

    resumed = [*inputs, "run_dir=cmp", "resume=auto"]
    assert_refused_without_the_plugin(famlab(["compare", *resumed], tmp_path), Path("cmp") / "comparison.yaml")
    done = famlab(["compare", *resumed, f"plugins=[{PLUGIN}]"], tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_a_ddp_pretraining_imports_the_plugin_on_every_rank_and_resumes_only_with_it(tmp_path):
    """Lightning re-executes the command line for rank 1, ``--plugin`` included; a resume without it is refused.
    ``famlab generate`` continues a prompt from the run by its objective's generation rule (the encoder reads
    ``[X] prompt [EOS]``): the text a greedy decoding from that input gives."""
    from tests.experiments.reliability_helpers import fast_args, write_corpus

    corpus = write_corpus(tmp_path / "corpus.txt")
    run_dir = tmp_path / "ddp"
    args = fast_args(corpus, run_dir, 4)
    assert args[:2] == ["pretrain", "gpt"]
    args[1] = FAMILY
    done = famlab([*args, *ENCDEC, SCALENORM, *DDP, "--plugin", PLUGIN], tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert json.loads((run_dir / "results.json").read_text())["steps"] == 4
    assert_recorded(run_dir)
    assert_trained_with_scalenorm(run_dir, tmp_path)
    refused = famlab([*args, *ENCDEC, SCALENORM, *DDP, "resume=auto"], tmp_path)
    assert_refused_without_the_plugin(refused, run_dir / "config.yaml")
    generated = famlab([str(run_dir), "--plugin", PLUGIN], tmp_path, program=("-c", GENERATE))
    assert generated.returncode == 0, generated.stderr[-3000:]
    by_cli, by_rule = generated.stdout.splitlines()
    assert by_cli == by_rule and by_cli.startswith(PROMPT), generated.stdout


PROMPT = "the quick brown"
# ``famlab generate <run> prompt=...`` (the command line, as ``python -m famlab`` runs it), then the same continuation
# by lead_lm's generation rule, by hand: greedy T5 decoding of the encoder input ``[X] prompt [EOS]``.
GENERATE = f"""import sys
import torch
from famlab.experiments.commands import cli
from famlab.experiments.steps.generate import load_run
from famlab.families.generation import generate
code = cli.main(["generate", sys.argv[1], "prompt={PROMPT}", "max_new_tokens=8", *sys.argv[2:]])
sys.stdout.flush()
run = load_run(sys.argv[1])
context = [run.ids.x, *run.encode("{PROMPT}"), run.ids.eos]
out = generate(run.net, torch.tensor([context]), max_new_tokens=8, eos_id=run.ids.eos)[0].tolist()
print("{PROMPT}" + run.decode(out[: out.index(run.ids.eos)] if run.ids.eos in out else out))
sys.exit(code)
"""


JOB = """import sys
from pathlib import Path
from famlab.experiments.configuration.compose import compose, to_plain
from famlab.experiments.plumbing import plugins, process_group
plugins.load([sys.argv[1]])
cfg = compose(["gpt", "tiny"], ["model.pos=clock"]).cfg
print(process_group.run(to_plain, cfg.model, spec=Path("job.spec"))["pos"])
"""


@pytest.mark.slow
def test_a_job_process_group_imports_the_plugins_before_it_reads_its_job(tmp_path):
    """A comparison job on several devices runs as its own process group (``python -m ...process_group <spec>``):
    its arguments hold ``PosScheme('clock')``, which the group reads only after importing the spec's plugins."""
    done = famlab([PLUGIN], tmp_path, program=("-c", JOB))
    assert done.returncode == 0 and done.stdout == "clock\n", done.stderr[-3000:]

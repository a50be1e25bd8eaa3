"""Each family's defaults live in one place, ``famlab.families.faithful``: nothing else writes a copy, and every
consumer (config composition, HF conversion, bench, the objective registry, fine-tuning, the test fixtures) returns
exactly its values."""

import ast
from pathlib import Path

import pytest
import yaml
from famlab.experiments.configuration.compose import compose, family_settings
from famlab.experiments.perf.bench import BenchSettings, model_config
from famlab.experiments.steps.init import default_pooling
from famlab.families import ModelConfig, build_network, family_defaults, family_model_settings
from famlab.objectives import OBJECTIVES, default_objective

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("bert", "gpt", "t5")
SOURCE = ROOT / "families" / "faithful.py"
# ModelConfig keys whose per-family values make a family faithful to its Hugging Face original
BLOCK_KEYS = {"pos", "norm", "norm_position", "activation", "norm_eps", "init", "qk_scale"}


def _python_files() -> list[Path]:
    folders = ("families", "objectives", "datamodules", "experiments", "tests", "benchmarks", "scripts", "famlab")
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py") if p != SOURCE)


def _literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) or (
        isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant))


def _setting_words() -> set[str]:
    """Values a per-family table of defaults would hold: objective, pooling and block-choice names."""
    from famlab.families import config
    from famlab.objectives import OBJECTIVES

    enums = (config.NormPosition, config.InitScheme)
    registries = (config.POSITIONS, config.NORMS, config.ACTIVATIONS, config.FFN_KINDS)
    words = {m.value for e in enums for m in e} | {n for r in registries for n in r.builtins()}
    words |= {"cls", "last", "mean", "decoder"}
    return words | {name for names in OBJECTIVES.values() for name in names}


def _copies(tree: ast.AST) -> list[int]:
    """Lines of a per-family table of objective / pooling / block names or of block settings, and of a literal
    set of four or more block choices."""
    words, lines = _setting_words(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {k.value: v for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant)}
            per_family = [keys[f] for f in FAMILIES if f in keys]
            if len(per_family) == 3 and all(
                    (isinstance(v, ast.Constant) and v.value in words) or _settings(v) >= 2 for v in per_family):
                lines.append(node.lineno)
        if _settings(node) >= 4:
            lines.append(node.lineno)
    return lines


def _settings(node: ast.AST) -> int:
    """How many block-choice keys a dict display or a call sets to literal values."""
    if isinstance(node, ast.Dict):
        pairs = [(k.value, v) for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant)]
    elif isinstance(node, ast.Call):
        pairs = [(k.arg, k.value) for k in node.keywords if k.arg]
    else:
        return 0
    return len(BLOCK_KEYS & {k for k, v in pairs if _literal(v)})


def test_no_module_writes_a_copy_of_the_family_defaults():
    """A per-family dict of objectives / poolings / block settings anywhere but families/faithful.py fails here."""
    found = {str(p.relative_to(ROOT)): _copies(ast.parse(p.read_text(encoding="utf-8"))) for p in _python_files()}
    found = {path: lines for path, lines in found.items() if lines}
    assert not found, f"family defaults written outside families/faithful.py: {found}"


@pytest.mark.parametrize("family", FAMILIES)
def test_family_presets_do_not_repeat_the_defaults(family):
    """experiments/configs/<family>.yaml names its family and holds the optimiser and objective rates only."""
    preset = yaml.safe_load((ROOT / "experiments" / "configs" / f"{family}.yaml").read_text(encoding="utf-8"))
    assert preset["model"] == {"family": family}
    assert "name" not in preset.get("objective", {}) and "pooling" not in preset.get("finetune", {})


def test_the_scanner_sees_a_copy():
    """The scan is not vacuous: the tables it looks for are found in the source itself and in written copies."""
    assert _copies(ast.parse(SOURCE.read_text(encoding="utf-8")))
    assert _copies(ast.parse('OBJECTIVE = {"bert": "mlm", "gpt": "clm", "t5": "span"}'))
    assert _copies(ast.parse('ModelConfig(pos="learned", norm="layernorm", norm_position="post", norm_eps=1e-12)'))
    assert _copies(ast.parse('W = {"bert": dict(pos="learned", init="bert"), "gpt": dict(norm="layernorm", '
                             'init="gpt2"), "t5": dict(pos="t5_bias", qk_scale=1.0)}'))
    assert not _copies(ast.parse('TARGETS = {"bert": 1.4, "gpt": 1.05, "t5": 1.10}'))
    assert not _copies(ast.parse('COLOR = {"bert": "tab:blue", "gpt": "tab:orange", "t5": "tab:green"}'))


def _values(cfg: ModelConfig) -> dict:
    return {k: getattr(getattr(cfg, k), "value", getattr(cfg, k)) for k in family_model_settings(cfg.family.value)}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_consumer_returns_the_source_values(family):
    d = family_defaults(family)
    composed = compose([family], []).cfg
    assert _values(composed.model) == family_model_settings(family)
    assert composed.objective.name == d.objective == default_objective(family) == OBJECTIVES[family][0]
    assert composed.finetune.pooling.value == d.pooling == default_pooling(family)
    assert family_settings(family) == family_model_settings(family) == {"family": family, **d.model}
    bench = _values(model_config(family, BenchSettings()))
    assert bench == family_model_settings(family) | {"dropout": 0.0}  # bench: dropout off, a deterministic comparison
    # no preset named: cross_checks fills the objective from the same source
    assert compose([], [f"model.family={family}", "objective.name=null"]).cfg.objective.name == d.objective


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_conversion_reads_the_source(family):
    """from_hf(to_hf(net)) of a faithful network gives back the source's block choices."""
    pytest.importorskip("transformers")
    from famlab.families import from_hf, to_hf

    net = build_network(ModelConfig(**family_settings(family), vocab_size=61, dim=32, num_layers=1,
                                    num_heads=2, max_seq_len=32))
    assert _values(from_hf(to_hf(net)).config) == family_model_settings(family)

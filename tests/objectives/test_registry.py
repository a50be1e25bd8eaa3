"""The objective registry is the one table of family x objective pairs: every consumer reads it."""

import dataclasses

import pytest
import torch
from famlab.experiments.configuration.compose import compose
from famlab.experiments.configuration.config import ObjectiveConfig
from famlab.experiments.configuration.specs import objective_settings
from famlab.families import family_defaults
from famlab.objectives import OBJECTIVES, REGISTRY, ObjectiveError, check_pair, make_objective
from famlab.objectives.registry import SETTINGS, entry, valid_pairs


def test_objectives_table_is_the_registry_with_the_default_first():
    assert set(OBJECTIVES) == set(REGISTRY) == {"bert", "gpt", "t5"}
    for family, names in OBJECTIVES.items():
        assert names[0] == family_defaults(family).objective
        assert sorted(names) == sorted(REGISTRY[family])
    assert valid_pairs().startswith("bert x mlm, bert x span_mlm, gpt x clm")


@pytest.mark.parametrize(("family", "name"), [(f, n) for f, names in OBJECTIVES.items() for n in names])
def test_every_registered_pair_builds_its_class_and_composes(family, name, make_ids):
    """Each pair builds the registered class with its defaults, passes config validation, and collates a batch."""
    e = REGISTRY[family][name]
    assert set(e.settings) <= set(SETTINGS) and e.defaults() == {k: SETTINGS[k] for k in e.settings}
    objective = make_objective(name, make_ids(), seq_len=24, family=family, generator=torch.Generator().manual_seed(0))
    assert type(objective) is e.cls and objective.name == name
    check_pair(family, name)
    assert compose([family], [f"objective.name={name}"]).cfg.objective.name == name
    raw = torch.randint(10, 800, (2, objective.raw_block_len), generator=torch.Generator().manual_seed(1))
    assert objective.collate(list(raw))["input_ids"].shape[0] == 2


def test_config_defaults_are_the_registry_settings():
    """ObjectiveConfig's defaults and the settings pretrain passes are exactly the registry's."""
    cfg = dataclasses.replace(compose(["gpt"], []).cfg, objective=ObjectiveConfig())
    settings = objective_settings(cfg.objective)
    assert settings == {k: tuple(v) if isinstance(v, list) else v for k, v in SETTINGS.items()}


def test_pairs_outside_the_registry_fail_on_one_line(make_ids):
    with pytest.raises(ObjectiveError, match=r"^objective.name=mlm needs model.family bert, got gpt$"):
        make_objective("mlm", make_ids(), seq_len=16, family="gpt")
    with pytest.raises(ObjectiveError, match=r"^objective.span_q is not an objective setting"):
        make_objective("clm", make_ids(), seq_len=16, span_q=0.3)
    with pytest.raises(ObjectiveError, match="cannot train model.family=bert"):
        compose(["bert"], ["objective.name=clm"])


def test_without_a_family_a_name_means_its_owner():
    """`span` is T5's (its default), `span_mlm` BERT's (the only family), `ul2` needs a family."""
    assert entry("span", None) is REGISTRY["t5"]["span"]
    assert entry("span_mlm", None) is REGISTRY["bert"]["span_mlm"]
    with pytest.raises(ObjectiveError, match="needs model.family gpt or t5, got None"):
        entry("ul2", None)

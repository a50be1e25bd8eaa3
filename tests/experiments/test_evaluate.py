"""famlab eval: every bad input exits 2 with one line naming the file and line; accuracy, ties and chance."""

import json

import pytest
from famlab.experiments.commands.cli import main
from famlab.experiments.commands.evaluate import table
from famlab.experiments.steps.evaluate import BUNDLED, read_items, summarise
from famlab.objectives.zeroshot import ChoiceScores, Item, chance, headline, length_only

GOOD = {"text": "a ___ sat", "choices": ["cat", "dog"], "label": 0}


@pytest.mark.parametrize(
    "rows,line,message",
    [
        ([GOOD, {"text": "no blank here", "choices": ["a", "b"], "label": 0}], 2, "exactly one blank"),
        ([{"text": "___ and ___", "choices": ["a", "b"], "label": 0}], 1, "exactly one blank"),
        ([GOOD, GOOD, {"text": "a ___", "choices": ["a"], "label": 0}], 3, "at least 2"),
        ([{"text": "a ___", "choices": ["a", "b"], "label": 2}], 1, "label=2"),
        ([{"text": "a ___", "choices": ["a", "b"], "label": -1}], 1, "label=-1"),
        ([{"text": "a ___", "choices": ["a", ""], "label": 0}], 1, "non-empty"),
    ],
)
def test_bad_items_exit_2_naming_file_and_line(tmp_path, capsys, rows, line, message):
    """No blank, two blanks, < 2 choices, label out of range, empty choice: exit 2, one line with file:line."""
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("model: {}\n")
    assert main(["eval", str(tmp_path / "run"), f"data.eval={path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}:{line}:" in err[0] and message in err[0], err


def test_empty_file_and_bad_json_exit_2(tmp_path, capsys):
    """An empty file and a line that is not JSON are refused naming the file (and line)."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("model: {}\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(["eval", str(tmp_path / "run"), f"data.eval={empty}"]) == 2
    assert f"{empty}: no items" in capsys.readouterr().err
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(GOOD) + "\n{oops\n")
    assert main(["eval", str(tmp_path / "run"), f"data.eval={broken}"]) == 2
    assert f"{broken}:2: not JSON" in capsys.readouterr().err


def test_bad_options_exit_2(tmp_path, capsys):
    """Missing data.eval, unknown option, a directory that is not a run: exit 2 naming the key or path."""
    assert main(["eval", str(tmp_path)]) == 2
    assert "data.eval= is required" in capsys.readouterr().err
    assert main(["eval", str(tmp_path), "data.eval=wordnet", "rules=full"]) == 2
    assert "famlab eval does not read rules" in capsys.readouterr().err
    assert main(["eval", str(tmp_path), "data.eval=wordnet"]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["eval", str(tmp_path), "data.eval=wordnet", "headline=per_word"]) == 2
    assert "headline=per_word must be one of raw, per_token, per_byte" in capsys.readouterr().err


def test_summary_counts_ties_as_wrong_and_reports_chance_per_group(tmp_path):
    """Accuracy per normalisation with ties wrong; chance = mean 1/K; groups reported separately."""
    items = [Item("a ___", ("x", "y"), 0, "g1"), Item("a ___", ("x", "y", "z", "w"), 1, "g2"),
             Item("a ___", ("x", "y"), 1, "g1")]
    scores = [ChoiceScores([-1.0, -2.0], [1, 1], [1, 4]),  # right on raw and per token; per byte -1 vs -0.5: wrong
              ChoiceScores([-3.0, -3.0, -5.0, -6.0], [1, 1, 1, 1], [1, 1, 1, 1]),  # a tie at the top: wrong
              ChoiceScores([-2.0, -1.0], [1, 2], [1, 1])]  # right raw, per token -2 vs -0.5: right
    r = summarise(items, scores)
    raw, groups = r.accuracy("raw"), r.groups or {}
    assert raw.acc == pytest.approx(2 / 3) and r.accuracy("per_byte").acc == pytest.approx(1 / 3)
    assert r.chance == pytest.approx((0.5 + 0.25 + 0.5) / 3)
    assert groups["g2"].accuracy("raw").acc == 0.0 and groups["g1"].chance == 0.5
    assert raw.low is not None and raw.high is not None and raw.low <= raw.acc <= raw.high


def test_bundled_tasks_parse():
    """The shipped zero-shot tasks are valid item files: 1000 K = 5 cloze items (chance 0.2) split by part of
    speech, and 400 pairs (chance 0.5) per construction whose two fillers differ only in form or order."""
    cloze = read_items(BUNDLED["wordnet-reverse-dictionary"])
    assert len(cloze) == 1000 and all(len(it.choices) == 5 for it in cloze)
    assert {it.group for it in cloze} <= {"noun", "verb", "adj", "adv"}
    assert chance(cloze) == pytest.approx(0.2)
    pairs = read_items(BUNDLED["wordnet-minimal-pairs"])
    groups = {it.group: 0 for it in pairs}
    for it in pairs:
        groups[it.group] += 1
        good, bad = it.choices[it.label], it.choices[1 - it.label]
        if it.group == "determiner_noun_order":
            assert bad.split() == good.split()[::-1], it
        else:  # agreement: singular/plural or 3rd-person/base form of one word, either right (is/are: irregular)
            assert " " not in good + bad and good != bad, it
            assert good[:2] == bad[:2] or {good, bad} in ({"is", "are"}, {"has", "have"}, {"was", "were"}), it
    assert groups == {"determiner_noun_agreement": 400, "determiner_noun_order": 400, "subject_verb_agreement": 400}
    assert {it.label for it in pairs} == {0, 1} and chance(pairs) == pytest.approx(0.5)


def test_length_alone_and_the_headline_of_each_task():
    """length_only: the right candidate strictly shortest in bytes (ties lose); minimal pairs are headlined raw, other
    tasks per byte, and the table bolds the headline's column and adds the length-only row."""
    items = [Item("a ___", ("cat", "cats"), 0, "g"), Item("a ___", ("cat", "cats"), 1, "g"),
             Item("a ___", ("cat", "dog"), 0, "h"), Item("a ___", ("é", "ab", "abc"), 1, "h")]  # é is two bytes
    assert length_only(items) == [1.0, 0.0, 0.0, 0.0]
    scores = [ChoiceScores([-1.0, -2.0], [1, 1], [4, 5])] * 2 + [ChoiceScores([-1.0, -2.0], [1, 1], [4, 4]),
                                                                 ChoiceScores([-3.0, -2.0, -1.0], [1, 1, 1], [2, 3, 4])]
    r = summarise(items, scores)
    assert r.length_only == 0.25 and (r.groups or {})["g"].length_only == 0.5
    assert headline("wordnet-minimal-pairs") == "raw" and headline("wordnet-reverse-dictionary") == "per_byte"
    assert headline("my-items") == "per_byte"
    md = table({"run": {**r.to_json(), "family": "gpt", "headline": "raw"}}).splitlines()
    assert md[0] == "| model | family | items | chance | **raw** | per token | per byte |"
    assert md[-1] == f"| shortest candidate (length alone) | - | 4 | {r.chance:.3f} | 0.250 | 0.250 | 0.250 |"

"""Reference scores of a classification task that need no network: majority class, TF-IDF, overlap and length.

- majority: the training split's most frequent label, predicted for every test example;
- TF-IDF + logistic regression on word 1-2 grams (:func:`tfidf`, the one TF-IDF reference: the baselines, a
  suite's references and the report's all call it). For a sentence pair the features are
  ``[v(a), v(b), v(a) * v(b)]`` (the element-wise product lets a linear model see which words the two texts share);
- overlap + length: logistic regression on ``[Jaccard(a, b), shared words, len(a), len(b), len(b) - len(a)]``
  (words), or on the text's length alone for a single-sentence task. A pair task whose labels this predicts
  well would be solvable without reading the texts.

Every model is fit on the train split and scored once on the test split, with the metrics fine-tuning reports.
``python -m famlab.experiments.analysis.baselines <task>...`` prints them as markdown rows.
"""

from __future__ import annotations

import collections
import re
import sys
from typing import TYPE_CHECKING

from famlab.datamodules.tasks import Example, Task

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    from scipy.sparse import csr_matrix

WORD = re.compile(r"\w+")


def scores(y_true: list[int], y_pred: list[int], num_labels: int) -> dict[str, float]:
    """``test/acc``, macro ``test/f1`` (over every label) and ``test/mcc``."""
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    labels = list(range(num_labels))
    return {
        "test/acc": float(accuracy_score(y_true, y_pred)),
        "test/f1": float(f1_score(y_true, y_pred, average="macro", labels=labels, zero_division=0)),
        "test/mcc": float(matthews_corrcoef(y_true, y_pred)),
    }


def majority(task: Task) -> dict[str, float]:
    """Always the most frequent training label."""
    label = collections.Counter(e.label for e in task.train).most_common(1)[0][0]
    return scores([e.label for e in task.test], [label] * len(task.test), task.num_classes)


def _fit_score(task: Task, x_train: csr_matrix | NDArray[np.float64], x_test: csr_matrix | NDArray[np.float64],
               c: float) -> dict[str, float]:
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=1000, C=c).fit(x_train, [e.label for e in task.train])
    return scores([e.label for e in task.test], clf.predict(x_test).tolist(), task.num_classes)


TFIDF_RULE = "tfidf/v1: word 1-2 grams, min_df 2, sublinear tf, LR C=10; pair = [v(a), v(b), v(a)*v(b)]"
"""Names the rule :func:`tfidf` follows; a cached TF-IDF score is keyed by it, so changing the rule (and this
string with it) recomputes every cached reference instead of reusing one computed the old way."""


def tfidf(task: Task, *, second_only: bool = False) -> dict[str, float]:
    """TF-IDF (word 1-2 grams) + logistic regression; pairs as ``[v(a), v(b), v(a) * v(b)]``.

    The reference every caller reports (``test/acc``, ``test/f1``, ``test/mcc``, see :func:`scores`). A sentence
    pair is vectorised one text at a time with one vectorizer fit on both sides of the training pairs, and the
    classifier reads ``[v(a), v(b), v(a) * v(b)]``. Not the pair joined into one text (``a [SEP] b``): one bag of
    both texts loses which text a word came from, so a label that depends on it cannot be learned (a word in the
    hypothesis alone giving an NLI label away, Gururangan et al. 2018, "Annotation Artifacts in Natural Language
    Inference Data"; any asymmetric pair); it also learns bigrams that straddle the two texts and reads the
    separator as the word "sep". With the sides apart a linear model still sees nearly what the joined bag shows
    (one weight on a word in ``v(a)`` and in ``v(b)``), the product gives each word the two texts share a feature
    of its own, and ``second_only`` is this same rule restricted to ``v(b)``.

    Args:
        second_only: pair tasks: read only the second text (does it alone give the label away?).
    """
    import scipy.sparse as sp
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True, max_features=100_000)
    pair = task.train[0].text_pair is not None
    if not pair:
        vec.fit([e.text for e in task.train])
        return _fit_score(task, vec.transform([e.text for e in task.train]),
                          vec.transform([e.text for e in task.test]), c=10.0)
    vec.fit([e.text for e in task.train] + [e.text_pair or "" for e in task.train])

    def features(examples: list[Example]) -> csr_matrix:
        b = vec.transform([e.text_pair or "" for e in examples])
        if second_only:
            return b
        a = vec.transform([e.text for e in examples])
        return sp.hstack([a, b, a.multiply(b)]).tocsr()

    return _fit_score(task, features(task.train), features(task.test), c=10.0)


def _shallow(e: Example) -> list[float]:
    a = WORD.findall(e.text.lower())
    if e.text_pair is None:
        return [len(a), len(e.text)]
    b = WORD.findall(e.text_pair.lower())
    sa, sb = set(a), set(b)
    return [len(sa & sb) / max(1, len(sa | sb)), len(sa & sb), len(a), len(b), len(b) - len(a)]


def overlap_length(task: Task) -> dict[str, float]:
    """Logistic regression on word overlap and lengths only (standardised)."""
    from sklearn.preprocessing import StandardScaler

    scale = StandardScaler().fit([_shallow(e) for e in task.train])
    return _fit_score(task, scale.transform([_shallow(e) for e in task.train]),
                      scale.transform([_shallow(e) for e in task.test]), c=1.0)


def reference_scores(task: Task) -> dict[str, dict[str, float]]:
    """``{"majority", "tfidf", "overlap_length"}`` (+ ``"tfidf_second_only"`` for pair tasks) -> test scores."""
    out = {"majority": majority(task), "tfidf": tfidf(task), "overlap_length": overlap_length(task)}
    if task.train[0].text_pair is not None:
        out["tfidf_second_only"] = tfidf(task, second_only=True)
    return out


def main(argv: list[str]) -> int:
    """Print one markdown row per task and reference: ``| task | reference | acc | macro-F1 | MCC |``."""
    from famlab.datamodules.tasks import load_task

    print("| task | reference | test acc | test macro-F1 | test MCC |\n|---|---|---|---|---|")
    for spec in argv:
        task = load_task(spec)
        for name, s in reference_scores(task).items():
            print(f"| {task.name} | {name} | {s['test/acc']:.3f} | {s['test/f1']:.3f} | {s['test/mcc']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

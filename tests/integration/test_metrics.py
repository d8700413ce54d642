"""test_metrics.py: the validation metrics a prediction head reports (src/train/metrics.c, through
tests/tools/metrics_check): AUROC per class and macro against scikit-learn (ties included), accuracy, Harrell's C
and the Cox loss (Breslow ties, censoring) against references written here."""
import math
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, os.environ.get("BUILD", "build"), "tests", "tools", "metrics_check")


def run(args, numbers):
    text = " ".join("%.9g" % x for x in numbers)
    p = subprocess.run([TOOL, *map(str, args)], input=text, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [float(v) for v in p.stdout.split()]


def test_auroc_against_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn is ci/deps.sh's python3-sklearn")
    rng = np.random.default_rng(3)
    n, k = 200, 4
    labels = rng.integers(0, k, n)
    scores = rng.normal(size=(n, k)).astype(np.float32)
    scores[np.arange(n), labels] += 0.8  # informative, not perfect
    scores = np.round(scores, 1)  # many ties: they count one half
    got = run(["auroc", n, k, 0], list(scores.reshape(-1)) + list(labels))
    want = [metrics.roc_auc_score(labels == c, scores[:, c]) for c in range(k)]
    assert got[1:] == pytest.approx(want, abs=1e-12)
    assert got[0] == pytest.approx(np.mean(want), abs=1e-12)
    # multi-label: one 0/1 column per label; a column of one class only has no AUROC (nan) and is left out
    y = (rng.random((n, 3)) < [0.3, 0.5, 0.0]).astype(np.float32)
    s = (y + rng.normal(scale=0.8, size=y.shape)).astype(np.float32)
    got = run(["auroc", n, 3, 1], list(s.reshape(-1)) + list(y.reshape(-1)))
    want = [metrics.roc_auc_score(y[:, c], s[:, c]) for c in range(2)]
    assert got[1:3] == pytest.approx(want, abs=1e-12) and math.isnan(got[3])
    assert got[0] == pytest.approx(np.mean(want), abs=1e-12)


def test_accuracy():
    scores = [0.1, 0.9, 0.5, 0.5, 0.7, 0.2]  # 3 samples, 2 classes; the tie goes to class 0
    assert run(["accuracy", 3, 2], scores + [1, 0, 1]) == [pytest.approx(2 / 3)]


def harrell(risk, time, event):
    conc = comp = 0.0
    for i in range(len(risk)):
        if not event[i]:
            continue
        for j in range(len(risk)):
            if time[j] > time[i]:
                comp += 1
                conc += 1.0 if risk[i] > risk[j] else 0.5 if risk[i] == risk[j] else 0.0
    return conc / comp


def breslow(risk, time, event):
    loss, ev = 0.0, 0
    for i in range(len(risk)):
        if event[i]:
            den = sum(math.exp(risk[j]) for j in range(len(risk)) if time[j] >= time[i])
            loss -= risk[i] - math.log(den)
            ev += 1
    return loss / ev if ev else 0.0


@pytest.mark.parametrize("seed", [0, 1])
def test_cindex_and_cox_with_ties_and_censoring(seed):
    rng = np.random.default_rng(seed)
    n = 40
    time = rng.integers(1, 12, n).astype(np.float32)  # many tied times
    event = (rng.random(n) < 0.6).astype(np.float32)  # 40% censored
    risk = np.round(-time / 4 + rng.normal(scale=0.7, size=n), 1).astype(np.float32)  # tied risks too
    pairs = [v for t, e in zip(time, event) for v in (t, e)]
    assert run(["cindex", n], list(risk) + pairs)[0] == pytest.approx(harrell(risk, time, event), abs=1e-12)
    assert run(["cox", n], list(risk) + pairs)[0] == pytest.approx(breslow(risk, time, event), rel=1e-9)
    # a useful risk ranks earlier events higher; its C is well above one half, a reversed one well below
    assert harrell(risk, time, event) > 0.7 and harrell(-risk, time, event) < 0.3
    # no event: no comparable pair (nan) and a loss of 0
    none = [v for t in time for v in (t, 0.0)]
    assert math.isnan(run(["cindex", n], list(risk) + none)[0]) and run(["cox", n], list(risk) + none)[0] == 0

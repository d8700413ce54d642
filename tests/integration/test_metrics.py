"""test_metrics.py: the validation metrics a prediction head reports (src/train/metrics.c, through
tests/tools/metrics_check) against the reference libraries on crafted cases: AUROC per class and macro against
scikit-learn (ties, one class missing, two classes, tiny sets), Harrell's C against lifelines (censoring at the time
of a death, tied deaths, tied risks, tiny sets), the probabilities and the losses against PyTorch (class weights,
pos_weight), accuracy, the Cox loss against a reference written here, and NaN scores: every metric answers NaN, at
once (metric_auroc looped forever on one)."""
import math
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, os.environ.get("BUILD", "build"), "tests", "tools", "metrics_check")


def run(args, numbers):
    text = " ".join("%.9g" % x for x in numbers)
    # (a timeout: a metric that loops on its input must fail the test, not hang it)
    p = subprocess.run([TOOL, *map(str, args)], input=text, capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    return [float(v) for v in p.stdout.split()]


def flat(*arrays):
    return [float(v) for a in arrays for v in np.asarray(a, dtype=np.float64).reshape(-1)]


def softmax32(logits):
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def test_auroc_against_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn is ci/deps.sh's python3-sklearn")
    rng = np.random.default_rng(3)
    n, k = 200, 4
    labels = rng.integers(0, k, n)
    scores = rng.normal(size=(n, k)).astype(np.float32)
    scores[np.arange(n), labels] += 0.8  # informative, not perfect
    scores = np.round(scores, 1)  # many ties: they count one half
    got = run(["auroc", n, k, 0], flat(scores, labels))
    want = [metrics.roc_auc_score(labels == c, scores[:, c]) for c in range(k)]
    assert got[1:] == pytest.approx(want, abs=1e-12)
    assert got[0] == pytest.approx(np.mean(want), abs=1e-12)
    # on probabilities, the macro figure is scikit-learn's one-vs-rest macro AUROC itself
    probs = softmax32(scores)
    got = run(["auroc", n, k, 0], flat(probs, labels))
    assert got[0] == pytest.approx(metrics.roc_auc_score(labels, probs, multi_class="ovr", average="macro"), abs=1e-12)
    # multi-label: one 0/1 column per label; a column of one class only has no AUROC (nan) and is left out
    y = (rng.random((n, 3)) < [0.3, 0.5, 0.0]).astype(np.float32)
    s = (y + rng.normal(scale=0.8, size=y.shape)).astype(np.float32)
    got = run(["auroc", n, 3, 1], flat(s, y))
    want = [metrics.roc_auc_score(y[:, c], s[:, c]) for c in range(2)]
    assert got[1:3] == pytest.approx(want, abs=1e-12) and math.isnan(got[3])
    assert got[0] == pytest.approx(np.mean(want), abs=1e-12)


def test_auroc_crafted_cases():
    metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn is ci/deps.sh's python3-sklearn")
    # two classes: the macro figure is roc_auc_score(y, p[:, 1]), even where p[:, 0]'s rounding ties differently
    logits = np.array([[0, 30], [0, 31], [0, -1], [0, 2], [0, 32]], np.float32)
    y = np.array([1, 0, 0, 1, 0])
    p = softmax32(logits)
    assert p[0, 1] == p[1, 1] == p[4, 1] == 1 and len(set(p[[0, 1, 4], 0])) == 3  # float32 ties class 1 only
    got = run(["auroc", 5, 2, 0], flat(p, y))
    assert got[0] == pytest.approx(metrics.roc_auc_score(y, p[:, 1]), abs=1e-12) and got[0] == 0.5
    assert got[1] == pytest.approx(metrics.roc_auc_score(y == 0, p[:, 0]), abs=1e-12) and got[2] == got[0] != got[1]
    # every score tied: one half; the tiniest set with a positive and a negative
    assert run(["auroc", 4, 2, 1], flat(np.full((4, 2), 0.5), [[0, 1], [1, 0], [0, 1], [1, 0]]))[0] == 0.5
    assert run(["auroc", 2, 1, 1], flat([0.2, 0.7], [0, 1])) == [1.0, 1.0]
    assert run(["auroc", 2, 1, 1], flat([0.7, 0.2], [0, 1])) == [0.0, 0.0]
    # a class no sample has: left out of the macro figure (scikit-learn refuses such a set; its present classes agree)
    probs = softmax32(np.array([[2, 0, 0], [0, 2, 0], [1, 1, 0], [0, 3, 0], [2, 1, 0]], np.float32))
    labels = np.array([0, 1, 0, 1, 1])
    got = run(["auroc", 5, 3, 0], flat(probs, labels))
    want = [metrics.roc_auc_score(labels == c, probs[:, c]) for c in range(2)]
    assert got[1:3] == pytest.approx(want, abs=1e-12) and math.isnan(got[3])
    assert got[0] == pytest.approx(np.mean(want), abs=1e-12)
    # one class only: no figure at all
    assert all(math.isnan(v) for v in run(["auroc", 3, 3, 0], flat(probs[:3], [2, 2, 2])))


@pytest.mark.parametrize("what, args, extra", [
    ("auroc", [6, 2, 0], [0, 1, 0, 1, 1, 0]),
    ("auroc", [6, 2, 1], [0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0]),
    ("accuracy", [6, 2], [0, 1, 0, 1, 1, 0]),
])
def test_nan_scores_make_the_figure_nan_at_once(what, args, extra):
    """issue 34: metric_auroc's tie loop never advanced past a NaN score (SIGKILL was the only way out)"""
    scores = np.array([[0.1, 0.9], [np.nan, 0.2], [0.3, 0.3], [0.8, 0.2], [0.4, np.nan], [0.6, 0.4]])
    got = run([what, *args], flat(scores, extra))
    if what == "auroc":  # the set's figure, and every column with a NaN
        assert math.isnan(got[0]) and math.isnan(got[1]) and math.isnan(got[2]), got
    else:
        assert math.isnan(got[0]), got


def test_nan_risks_make_the_survival_figures_nan():
    risk = [0.3, float("nan"), 0.1, 0.5]
    pairs = [1, 1, 2, 0, 3, 1, 4, 1]
    assert math.isnan(run(["cindex", 4], risk + pairs)[0])
    assert math.isnan(run(["cox", 4], risk + pairs)[0])


def test_accuracy():
    scores = [0.1, 0.9, 0.5, 0.5, 0.7, 0.2]  # 3 samples, 2 classes; the tie goes to class 0
    assert run(["accuracy", 3, 2], scores + [1, 0, 1]) == [pytest.approx(2 / 3)]


def test_probabilities_are_the_float64_ones_rounded():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    z = (rng.normal(size=(7, 3)) * [1, 10, 60]).astype(np.float32)
    got = np.array(run(["probs", 7, 3, 0], flat(z)), np.float32).reshape(7, 3)
    want = torch.softmax(torch.from_numpy(z).double(), dim=1).float().numpy()
    assert (got == want).all()
    got = np.array(run(["probs", 7, 3, 1], flat(z)), np.float32).reshape(7, 3)
    assert (got == torch.sigmoid(torch.from_numpy(z).double()).float().numpy()).all()


def test_losses_against_pytorch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(2)
    n, k = 7, 3
    z = (rng.normal(size=(n, k)) * 3).astype(np.float32)
    y = rng.integers(0, k, n)
    w = np.array([0.5, 2.0, 1.25], np.float32)
    zt = torch.from_numpy(z).double()
    assert run(["ce", n, k, 0], flat(z, y))[0] == pytest.approx(F.cross_entropy(zt, torch.from_numpy(y)).item(),
                                                                 rel=1e-12)
    want = F.cross_entropy(zt, torch.from_numpy(y), weight=torch.from_numpy(w).double()).item()
    assert run(["ce", n, k, 1], flat(z, y, w))[0] == pytest.approx(want, rel=1e-12)
    t = (rng.random((n, k)) < 0.4).astype(np.float32)
    want = F.binary_cross_entropy_with_logits(zt, torch.from_numpy(t).double()).item()
    assert run(["bce", n, k, 0], flat(z, t))[0] == pytest.approx(want, rel=1e-12)
    want = F.binary_cross_entropy_with_logits(zt, torch.from_numpy(t).double(),
                                              pos_weight=torch.from_numpy(w).double()).item()
    assert run(["bce", n, k, 1], flat(z, t, w))[0] == pytest.approx(want, rel=1e-12)
    target = rng.normal(size=n).astype(np.float32)
    want = F.mse_loss(torch.from_numpy(z[:, 0]).double(), torch.from_numpy(target).double()).item()
    assert run(["mse", n], flat(z[:, 0], target))[0] == pytest.approx(want, rel=1e-12)


def lifelines_c(risk, time, event):
    utils = pytest.importorskip("lifelines.utils", reason="lifelines is in ci/deps.sh's .venv")
    return utils.concordance_index(np.asarray(time, np.float64), -np.asarray(risk, np.float64), np.asarray(event))


@pytest.mark.parametrize("risk, time, event", [
    ([0.9, 0.5, 0.1, 0.3], [2, 2, 5, 2], [1, 0, 1, 1]),  # a censoring at the time of a death is comparable
    ([0.9, 0.9, 0.1, 0.3], [1, 1, 1, 3], [1, 1, 0, 0]),  # tied deaths (not comparable), tied risks (one half)
    ([0.2, 0.4], [1, 1], [1, 0]),                        # the tiniest comparable set
    ([0.2, 0.4, 0.7, 0.1, 0.3], [3, 3, 3, 3, 3], [1, 0, 0, 1, 0]),  # one time for all
])
def test_cindex_against_lifelines_on_crafted_cases(risk, time, event):
    pairs = [v for t, e in zip(time, event) for v in (t, e)]
    assert run(["cindex", len(risk)], list(risk) + pairs)[0] == pytest.approx(lifelines_c(risk, time, event),
                                                                                abs=1e-12)


def test_cindex_without_a_comparable_pair_is_nan():
    # two deaths at one time, or censorings only: lifelines raises ZeroDivisionError ("no admissable pairs")
    assert math.isnan(run(["cindex", 2], [0.1, 0.2, 1, 1, 1, 1])[0])
    assert math.isnan(run(["cindex", 3], [0.1, 0.2, 0.3, 1, 0, 2, 0, 3, 0])[0])


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
    time = rng.integers(1, 12, n).astype(np.float32)  # many tied times, deaths and censorings among them
    event = (rng.random(n) < 0.6).astype(np.float32)  # 40% censored
    risk = np.round(-time / 4 + rng.normal(scale=0.7, size=n), 1).astype(np.float32)  # tied risks too
    pairs = [v for t, e in zip(time, event) for v in (t, e)]
    c = lifelines_c(risk, time, event)
    assert run(["cindex", n], list(risk) + pairs)[0] == pytest.approx(c, abs=1e-12)
    assert run(["cox", n], list(risk) + pairs)[0] == pytest.approx(breslow(risk, time, event), rel=1e-9)
    # a useful risk ranks earlier events higher; its C is well above one half, a reversed one well below
    assert c > 0.7 and lifelines_c(-risk, time, event) < 0.3
    # no event: no comparable pair (nan) and a loss of 0
    none = [v for t in time for v in (t, 0.0)]
    assert math.isnan(run(["cindex", n], list(risk) + none)[0]) and run(["cox", n], list(risk) + none)[0] == 0

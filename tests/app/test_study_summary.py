"""The summary's family of tests against independent references: scipy's paired t test on differences read
from the run files here, Holm's adjustment worked by hand, the minimum detectable effect by simulation; and the
committed summary.md is what the run files give."""

import json
import math
import os

import numpy as np
import pytest
from scipy import stats as sps

from isingattn_study import summary

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "results", "reproduce")


@pytest.fixture(scope="module")
def rows():
    return summary.evaluate(summary.tests(ROOT))


def _results(cell):
    return json.load(open(os.path.join(ROOT, cell, "results.json")))


def test_a_headline_row_is_scipys_paired_t_test_on_the_run_files(rows):
    r = _results("brackets-hard/T24")
    d = [100 * (r["hJ"][s] - r["softmax"][s]) for s in sorted(r["hJ"], key=int)]
    row = next(x for x in rows if x["label"] == "T = 24, FFN on, seeds 0–4" and x["group"].startswith("hJ − softmax"))
    assert row["mean"] == pytest.approx(np.mean(d))
    assert row["p"] == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue, rel=1e-6)


def test_a_shakespeare_row_is_the_relative_perplexity_change(rows):
    r = _results("shakespeare/T4")
    d = [100 * (1 - r["hJ"][s] / r["softmax"][s]) for s in sorted(r["hJ"], key=int)]
    row = next(x for x in rows if "(shakespeare/T4)" in x["label"])
    assert row["mean"] == pytest.approx(np.mean(d)) and row["mean"] < 0  # hJ's perplexity is higher there
    assert row["p"] == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue, rel=1e-6)


def test_one_holm_family_over_every_test_run(rows):
    p = np.array([r["p"] for r in rows if "p" in r])
    m = len(p)
    order = np.argsort(p)
    want = np.empty(m)
    running = 0.0
    for i, j in enumerate(order):  # Holm by hand: (m - i) p_(i), made monotone, capped at 1
        running = max(running, min(1.0, (m - i) * p[j]))
        want[j] = running
    got = np.array([r["holm"] for r in rows if "p" in r])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_no_test_pairs_two_code_versions(rows):
    for r in rows:
        if "p" in r:
            assert r["version"] in ("grid", "controls", "today"), r
    mixed = [r for r in rows if r["version"].startswith("not tested")]
    assert all("mean" not in r for r in mixed)


def test_the_minimum_detectable_effect_has_80_percent_power_by_simulation():
    n, half = 5, 2.0
    sd = half / sps.t.ppf(0.975, n - 1) * math.sqrt(n)  # the spread of the differences behind the half-width
    effect = summary.mde(half, n)
    rng = np.random.default_rng(0)
    x = rng.normal(effect, sd, (20000, n))
    power = np.mean(sps.ttest_1samp(x, 0.0, axis=1).pvalue < 0.05)
    assert power == pytest.approx(0.8, abs=4 * math.sqrt(0.8 * 0.2 / 20000))


def test_the_committed_summary_is_what_the_run_files_give(rows):
    with open(os.path.join(ROOT, "summary.md")) as f:
        assert f.read() == summary.table(rows)

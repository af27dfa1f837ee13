"""MQAR's chance level and the accuracy of a predictor that never recalls, as the study states
them (docs/study.md), against the task's generator: the library's vectorized
``counting_baseline`` against a per-string loop written here, and the stated percentages within
the Monte Carlo error of 20,000 generated strings."""

import collections
import pathlib
import re

import numpy as np
import pytest

from isingattn.models import mqar

STUDY = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "study.md").read_text(encoding="utf-8")


def _loop_baseline(split, vocab_size):
    """The same predictor, one string and one query at a time, with Counters."""
    K = (vocab_size - 1) // 2
    credit, count = 0.0, 0
    for tok, tgt in zip(np.asarray(split.tokens), np.asarray(split.targets)):
        queries = [t for t in range(len(tgt)) if tgt[t] >= 0]
        left = collections.Counter(int(tok[2 * j + 1]) for j in range(len(queries)))
        for t in queries:
            top = max(left.values())
            tied = [v for v, c in left.items() if c == top]
            credit += (int(tgt[t]) in tied) / len(tied)
            count += 1
            left[int(tgt[t])] -= 1  # its answer is visible from here on
            assert left[int(tgt[t])] >= 0 and K + 1 <= int(tgt[t]) <= 2 * K
    return credit / count


@pytest.mark.parametrize("T, pairs, vocab", [(64, 8, 65), (64, 16, 65), (64, 8, 129), (128, 16, 65)])
def test_counting_baseline_matches_a_loop_over_strings(T, pairs, vocab):
    split = mqar.sample(np.random.default_rng(1), 300, T, pairs, vocab)
    assert mqar.counting_baseline(split, vocab) == pytest.approx(_loop_baseline(split, vocab), abs=1e-12)


def test_the_levels_the_study_states_hold_for_the_generator():
    assert re.search(r"Chance is 3\.1% \(one of 32\s+values; 1\.6% at vocabulary 129\)", STUDY)
    assert mqar.chance_level(65) == 1 / 32 and mqar.chance_level(129) == 1 / 64
    stated = {(64, 8, 65): "38.7% with 8 pairs", (64, 16, 65): "27.9% with 16 pairs",
              (64, 8, 129): "36.5% with 8 pairs at\n  vocabulary 129"}
    for (T, pairs, vocab), text in stated.items():
        assert text in STUDY, text
        value = float(text.split("%")[0]) / 100
        split = mqar.sample(np.random.default_rng(7), 20000, T, pairs, vocab)
        got = mqar.counting_baseline(split, vocab)
        se = np.sqrt(got * (1 - got) / (20000 * pairs))  # per query; strings are independent
        assert abs(got - value) <= 0.0005 + 4 * se, (text, got)

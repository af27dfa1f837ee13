"""The bracket generator, checked by an independent stack-free reference."""

import jax
import numpy as np
import pytest

from isingattn.models import brackets


def _reference_match(row, k):
    """Matching open position for every close, by scanning depth (no stack)."""
    depth = np.cumsum([1 if t < k else -1 for t in row])
    out = []
    for i, t in enumerate(row):
        if t < k:
            out.append(-1)
            continue
        d_before = depth[i] + 1  # depth of the open it closes, counted after opening
        j = max(p for p in range(i) if row[p] < k and depth[p] == d_before)
        out.append(j)
    return np.array(out)


@pytest.mark.parametrize("T,depth,k", [(2, None, 1), (8, None, 2), (12, 2, 3), (16, 3, 2), (20, None, 4)])
def test_sample_dyck_is_balanced_and_depth_limited(T, depth, k):
    toks = brackets.sample_dyck(np.random.default_rng(0), 300, T, depth, k)
    assert toks.shape == (300, T)
    steps = np.where(toks < k, 1, -1)
    d = np.cumsum(steps, axis=1)
    assert (d >= 0).all() and (d[:, -1] == 0).all()
    assert d.max() <= (T // 2 if depth is None else depth)
    assert toks.min() >= 0 and toks.max() < 2 * k
    targets = brackets.match_targets(toks, k)
    for row, tgt in zip(toks, targets):
        ref = _reference_match(row, k)
        np.testing.assert_array_equal(tgt, ref)
        closes = np.flatnonzero(row >= k)
        # a close matches an open of the same kind
        np.testing.assert_array_equal(row[tgt[closes]], row[closes] - k)
    if depth is not None and T >= 2 * depth:  # the cap is reached, not just respected
        assert d.max() == depth


def test_make_data_is_seeded_and_disjoint():
    key = jax.random.PRNGKey(7)
    a = brackets.make_data(key, 12, n_train=500, n_test=100, num_types=2)
    b = brackets.make_data(key, 12, n_train=500, n_test=100, num_types=2)
    c = brackets.make_data(jax.random.PRNGKey(8), 12, n_train=500, n_test=100, num_types=2)
    np.testing.assert_array_equal(a.train.tokens, b.train.tokens)
    assert not np.array_equal(a.train.tokens, c.train.tokens)
    train = {r.tobytes() for r in a.train.tokens}
    test = {r.tobytes() for r in a.test.tokens}
    assert len(train) == len(a.train.tokens) and len(test) == len(a.test.tokens) == 100
    assert not train & test
    assert a.vocab_size == 4 and a.seq_len == 12


def test_small_T_caps_test_fraction():
    # T=4 with one kind has exactly two words: "(())" and "()()"
    d = brackets.make_data(jax.random.PRNGKey(0), 4, n_train=10, n_test=10, num_types=1, max_test_fraction=0.5)
    assert len(d.train.tokens) + len(d.test.tokens) == 2 and len(d.test.tokens) == 1


def test_bad_lengths():
    with pytest.raises(ValueError, match="even"):
        brackets.sample_dyck(np.random.default_rng(0), 3, 7)
    with pytest.raises(ValueError, match="num_types"):
        brackets.sample_dyck(np.random.default_rng(0), 3, 8, num_types=9)

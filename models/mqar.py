"""Multi-query associative recall (MQAR; Arora et al., "Zoology", 2023).

A string is ``n_pairs`` key-value pairs ``k1 v1 k2 v2 ...`` (distinct keys), then the
query region: every key once more, in a random order, at random even offsets, each
followed by its value (teacher forcing, as in Zoology); token 0 fills the gaps. The
target at a query key is its value: the model must recall which value followed that
key in the context. Every other position has target ``-1`` (ignored).

Tokens: 0 the blank, ``1..K`` keys, ``K+1..K+V`` values, with ``K = V = (vocab_size - 1) // 2``;
targets are value tokens, so the output layer has ``vocab_size`` classes.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import numpy as np

from isingattn.errors import IsingInputError
from isingattn.models.split import Split


class MQARData(NamedTuple):
    train: Split
    test: Split
    vocab_size: int
    seq_len: int
    valid: Optional[Split] = None


def check(T: int, n_pairs: int, vocab_size: int) -> None:
    """Refuse settings with no room for the queries or too few keys for distinct pairs."""
    for name, v in (("T", T), ("n_pairs", n_pairs), ("vocab_size", vocab_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise IsingInputError(f"MQAR's {name} must be a positive integer; got {v!r}.")
    if 4 * n_pairs > T:
        raise IsingInputError(f"MQAR needs T ≥ 4 * n_pairs (the pairs, then every key queried with its value); "
                              f"got T={T}, n_pairs={n_pairs}.")
    if (vocab_size - 1) // 2 < n_pairs:
        raise IsingInputError(f"MQAR's keys are distinct: vocab_size={vocab_size} gives {(vocab_size - 1) // 2} keys, "
                              f"fewer than n_pairs={n_pairs}. Use vocab_size ≥ {2 * n_pairs + 1}.")


def sample(rng: np.random.Generator, num: int, T: int, n_pairs: int, vocab_size: int) -> Split:
    """``num`` MQAR strings of length ``T`` (vectorized), with their targets."""
    check(T, n_pairs, vocab_size)
    K = (vocab_size - 1) // 2
    N, rows = n_pairs, np.arange(num)[:, None]
    keys = np.argsort(rng.random((num, K)), 1)[:, :N] + 1  # (num, N) distinct keys
    values = rng.integers(K + 1, 2 * K + 1, (num, N))  # (num, N), repeats allowed
    tokens = np.zeros((num, T), np.int32)
    targets = np.full((num, T), -1, np.int32)
    tokens[:, 0 : 2 * N : 2], tokens[:, 1 : 2 * N : 2] = keys, values
    slots = (T - 2 * N) // 2  # query slots of two tokens after the pairs
    where = 2 * N + 2 * np.sort(np.argsort(rng.random((num, slots)), 1)[:, :N], 1)  # (num, N) query positions
    order = np.argsort(rng.random((num, N)), 1)  # which pair each query asks for
    tokens[rows, where], tokens[rows, where + 1] = keys[rows, order], values[rows, order]
    targets[rows, where] = values[rows, order]
    return Split(tokens, targets)


def make_data(key: jax.Array, T: int, n_pairs: int, vocab_size: int, n_train: int = 20000, n_test: int = 2000,
              n_valid: int = 0) -> MQARData:
    """Training, test (and with ``n_valid`` validation) strings, each split from its own stream of ``key``
    (random strings: with ``K!/(K-N)! * V^N`` of them, repeats across splits are negligible)."""
    splits = []
    for i, n in enumerate((n_train, n_test, n_valid)):
        rng = np.random.default_rng(np.asarray(jax.random.key_data(jax.random.fold_in(key, i))).ravel())
        splits.append(sample(rng, n, T, n_pairs, vocab_size) if n else None)
    return MQARData(splits[0], splits[1], vocab_size, T, splits[2])


def chance_level(vocab_size: int) -> float:
    """Recall accuracy of a uniform guess among the ``V = (vocab_size - 1) // 2`` value tokens."""
    return 1.0 / ((vocab_size - 1) // 2)


def counting_baseline(split: Split, vocab_size: int) -> float:
    """Accuracy, over the query positions of ``split``, of a predictor that never recalls: at each
    query it guesses the value that occurs most often among the context's values not yet answered
    in the query region (the answers before it are visible, teacher-forced), ties shared equally
    (expected accuracy of a uniform pick among them). A model whose recall does not beat this has
    learned value statistics, not associative recall.

    ``split``: strings from :func:`sample` (tokens and targets ``[num, T]``)."""
    K = (vocab_size - 1) // 2
    tokens, targets = np.asarray(split.tokens), np.asarray(split.targets)
    num, T = tokens.shape
    is_query = targets >= 0
    n_pairs = int(is_query[0].sum())
    rows = np.arange(num)
    counts = np.zeros((num, K), np.int64)  # value tokens K+1..2K -> columns 0..K-1
    for j in range(n_pairs):  # the context's values
        np.add.at(counts, (rows, tokens[:, 2 * j + 1] - K - 1), 1)
    pos = np.sort(np.argwhere(is_query)[:, 1].reshape(num, n_pairs), 1)  # query positions, in order
    credit = 0.0
    for q in range(n_pairs):
        target = targets[rows, pos[:, q]] - K - 1
        top = counts.max(1)
        tied = (counts == top[:, None]).sum(1)
        credit += float(np.sum((counts[rows, target] == top) / tied))
        counts[rows, target] -= 1  # answered: its value is visible from here on
    return credit / (num * n_pairs)

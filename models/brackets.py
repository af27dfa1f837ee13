"""Bracket matching: at every closing bracket, point at its matching opening bracket.

Strings are random balanced bracket words (Dyck words) over ``num_types`` bracket
kinds with nesting depth at most ``max_depth``. Tokens ``0..k-1`` open and
``k..2k-1`` close. The target at a closing bracket is the position of its match;
opening brackets get target ``-1`` (ignored). Accuracy counts closing brackets.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import numpy as np

from isingattn.models.split import Split

BRACKETS = "([{<"


class BracketData(NamedTuple):
    train: Split
    test: Split
    vocab_size: int
    seq_len: int


def sample_dyck(rng: np.random.Generator, num: int, T: int, max_depth: Optional[int] = None, num_types: int = 2):
    """``num`` random Dyck words of even length ``T`` (vectorized random walk).

    Each step opens (with probability 1/2 when both moves are legal) or closes; the
    walk never exceeds ``max_depth`` and always returns to depth 0 at ``T``.
    Returns tokens ``(num, T)`` int32.
    """
    if T % 2 or T < 2:
        raise ValueError(f"bracket strings need an even length ≥ 2; got T={T}.")
    if not 1 <= num_types <= len(BRACKETS):
        raise ValueError(f"num_types must be in 1..{len(BRACKETS)}; got {num_types}.")
    D = T // 2 if max_depth is None else max_depth
    if D < 1:
        raise ValueError(f"max_depth must be ≥ 1; got {max_depth}.")
    tokens = np.zeros((num, T), np.int32)
    stack = np.zeros((num, T // 2 + 1), np.int32)  # open types, by depth
    depth = np.zeros(num, np.int32)
    rows = np.arange(num)
    for t in range(T):
        remaining = T - t
        can_open = (depth + 1 <= D) & (depth + 1 <= remaining - 1)
        can_close = depth > 0
        open_ = can_open & (~can_close | (rng.random(num) < 0.5))
        kind = rng.integers(0, num_types, num)
        top = stack[rows, np.maximum(depth - 1, 0)]
        tokens[:, t] = np.where(open_, kind, num_types + top)
        stack[rows, depth] = np.where(open_, kind, stack[rows, depth])
        depth = depth + np.where(open_, 1, -1)
    return tokens


def match_targets(tokens: np.ndarray, num_types: int) -> np.ndarray:
    """Position of the matching opening bracket at each closing bracket, else -1.  (N, T) -> (N, T)."""
    N, T = tokens.shape
    targets = np.full((N, T), -1, np.int32)
    for n in range(N):
        stack = []
        for t, tok in enumerate(tokens[n]):
            if tok < num_types:
                stack.append(t)
            else:
                targets[n, t] = stack.pop()
    return targets


def make_data(key: jax.Array, T: int, n_train: int = 20000, n_test: int = 2000, max_depth: Optional[int] = None,
              num_types: int = 2, max_test_fraction: float = 0.2) -> BracketData:
    """Disjoint train and test sets of unique strings, seeded by a JAX key.

    When fewer unique strings exist than asked for (short T), the test set takes at
    most ``max_test_fraction`` of those found and training gets the rest.
    """
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel())
    pool = np.unique(sample_dyck(rng, 2 * (n_train + n_test), T, max_depth, num_types), axis=0)
    pool = pool[rng.permutation(len(pool))]
    n_te = min(n_test, int(max_test_fraction * len(pool)))
    test, train = pool[:n_te], pool[n_te : n_te + n_train]
    mk = lambda x: Split(x, match_targets(x, num_types))
    return BracketData(mk(train), mk(test), vocab_size=2 * num_types, seq_len=T)

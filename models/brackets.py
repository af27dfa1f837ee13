"""Bracket matching: at every closing bracket, point at its matching opening bracket.

Strings are random balanced bracket words (Dyck words) over ``num_types`` bracket
kinds with nesting depth at most ``max_depth``. Tokens ``0..k-1`` open and
``k..2k-1`` close. The target at a closing bracket is the position of its match;
opening brackets get target ``-1`` (ignored). Accuracy counts closing brackets.

The ``brackets-hard`` task (``models/experiments.py``) adds three options: filler
tokens ``2k`` (target ``-1``), interleaved kinds (each kind its own Dyck word, so the
closer's kind decides which earlier tokens matter), and a test set of shapes never
seen in training (``split="shape"``). The defaults give the strings they always did.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import numpy as np

from isingattn.errors import IsingInputError
from isingattn.models.split import Split

BRACKETS = "([{<"


class BracketData(NamedTuple):
    train: Split
    test: Split
    vocab_size: int
    seq_len: int
    valid: Optional[Split] = None  # n_valid > 0: a validation split drawn like the test set, apart from both


def sample_dyck(rng: np.random.Generator, num: int, T: int, max_depth: Optional[int] = None, num_types: int = 2,
                filler: float = 0.0, interleaved: bool = False):
    """``num`` random Dyck words of length ``T`` (vectorized random walk).

    Each step opens (with probability 1/2 when both moves are legal) or closes; the
    walk never exceeds ``max_depth`` open brackets and always returns to depth 0 at ``T``.
    With ``filler`` > 0 each step is first a filler token ``2 * num_types`` with that
    probability (whenever the remaining steps can still close every open bracket), so
    ``T`` may be odd. With ``interleaved`` every kind is its own Dyck word, shuffled
    with the others ("([)]" is legal): a close picks uniformly among the kinds with an
    open bracket, and closes that kind's latest one. The defaults draw exactly the
    random numbers they always did. Returns tokens ``(num, T)`` int32.
    """
    if not isinstance(interleaved, (bool, np.bool_)):
        raise IsingInputError(f"interleaved must be True or False; got {interleaved!r}.")
    if not (isinstance(filler, (int, float, np.integer, np.floating)) and not isinstance(filler, (bool, np.bool_))
            and 0.0 <= filler < 1.0):
        raise IsingInputError(f"filler must be a probability in [0, 1) (the chance that a step is a filler token; "
                              f"1 would leave no brackets); got {filler!r}.")
    if T < 2 or (T % 2 and not filler):
        raise IsingInputError(f"bracket strings need an even length ≥ 2 (any length ≥ 2 with filler > 0); got T={T}.")
    if not 1 <= num_types <= len(BRACKETS):
        raise IsingInputError(f"num_types must be in 1..{len(BRACKETS)}; got {num_types}.")
    D = T // 2 if max_depth is None else max_depth
    if D < 1:
        raise IsingInputError(f"max_depth must be ≥ 1 or None (no limit); got {max_depth}.")
    tokens = np.zeros((num, T), np.int32)
    stack = np.zeros((num, T // 2 + 1), np.int32)  # open types, by depth
    depth = np.zeros(num, np.int32)
    count = np.zeros((num, num_types), np.int32)  # open brackets of each kind (interleaved)
    rows = np.arange(num)
    for t in range(T):
        remaining = T - t
        can_open = (depth + 1 <= D) & (depth + 1 <= remaining - 1)
        can_close = depth > 0
        if filler:  # a filler is legal while the rest can still close every open bracket; forced when nothing else is
            fill = (depth <= remaining - 1) & (~(can_open | can_close) | (rng.random(num) < filler))
            can_open, can_close = can_open & ~fill, can_close & ~fill
        else:
            fill = np.zeros(num, bool)
        open_ = can_open & (~can_close | (rng.random(num) < 0.5))
        kind = rng.integers(0, num_types, num)
        if interleaved:  # close a kind that has an open bracket, chosen uniformly
            top = (rng.random((num, num_types)) * (count > 0)).argmax(1)
            close = ~fill & ~open_
            count[rows, kind] += open_
            count[rows, top] -= close
        else:
            top = stack[rows, np.maximum(depth - 1, 0)]
        tokens[:, t] = np.where(fill, 2 * num_types, np.where(open_, kind, num_types + top))
        stack[rows, depth] = np.where(open_, kind, stack[rows, depth])
        depth = depth + np.where(fill, 0, np.where(open_, 1, -1))
    return tokens


def match_targets(tokens: np.ndarray, num_types: int, interleaved: bool = False) -> np.ndarray:
    """Position of the matching opening bracket at each closing bracket, else -1 (openers
    and filler tokens ``>= 2 * num_types``).  (N, T) -> (N, T).

    ``interleaved``: a close matches the latest open bracket of its own kind (one stack per kind)."""
    N, T = tokens.shape
    targets = np.full((N, T), -1, np.int32)
    for n in range(N):
        stacks = [[] for _ in range(num_types)] if interleaved else [[]] * num_types  # one shared stack if nested
        for t, tok in enumerate(tokens[n]):
            if tok < num_types:
                stacks[tok].append(t)
            elif tok < 2 * num_types:
                targets[n, t] = stacks[tok - num_types].pop()
    return targets


def shapes(tokens: np.ndarray, num_types: int, interleaved: bool = False) -> np.ndarray:
    """The shape of each string: what its targets are a function of.  (N, T) -> (N, T) int8.

    Nested words: 0 open, 1 close, 2 filler (the kinds do not move a match). Interleaved
    words: the kinds matter, but not their names, so they are renamed in the order they
    first appear (tokens ``0..k-1`` open, ``k..2k-1`` close, ``2k`` filler)."""
    tokens = np.asarray(tokens)
    k = num_types
    if not interleaved:
        return np.where(tokens < k, 0, np.where(tokens < 2 * k, 1, 2)).astype(np.int8)
    N, T = tokens.shape
    kind = np.where(tokens < 2 * k, tokens % k, k)  # (N, T); k marks a filler
    first = np.stack([np.where((kind == a).any(1), (kind == a).argmax(1), T) for a in range(k)], 1)  # (N, k)
    name = np.argsort(np.argsort(first, 1, kind="stable"), 1, kind="stable")  # kind -> its rank of first appearance
    renamed = np.take_along_axis(np.concatenate([name, np.full((N, 1), k)], 1), kind, 1)  # (N, T)
    return np.where(kind == k, 2 * k, np.where(tokens < k, renamed, k + renamed)).astype(np.int8)


SPLITS = ("string", "shape")


def count_strings(T: int, max_depth: int, num_types: int) -> int:
    """How many distinct bracket strings of length ``T`` with nesting at most ``max_depth`` and
    ``num_types`` bracket kinds exist: balanced shapes times a kind per bracket pair (0 for odd ``T``)."""
    ways = [1] + [0] * max_depth  # ways[d]: prefixes ending at depth d
    for _ in range(T):
        ways = [(ways[d - 1] if d else 0) + (ways[d + 1] if d < max_depth else 0) for d in range(max_depth + 1)]
    return ways[0] * num_types ** (T // 2)


def make_data(key: jax.Array, T: int, n_train: int = 20000, n_test: int = 2000, max_depth: Optional[int] = None,
              num_types: int = 2, max_test_fraction: float = 0.2, *, filler: float = 0.0,
              split: str = "string", interleaved: bool = False, n_valid: int = 0) -> BracketData:
    """Disjoint train and test sets of unique strings, seeded by a JAX key.

    When fewer unique strings exist than asked for (short T), the test set takes at
    most ``max_test_fraction`` of those found and training gets the rest.

    ``filler`` (probability per step, see :func:`sample_dyck`) adds the token
    ``2 * num_types`` (target -1), so the vocabulary is ``2 * num_types + 1``.
    ``interleaved`` draws words whose kinds are matched independently (:func:`sample_dyck`).
    ``split="shape"`` holds out whole shapes (:func:`shapes`): no test string has the
    shape of a training string (the open/close/filler pattern; interleaved, with its
    kinds up to renaming), so the test targets are patterns the model never saw and
    cannot be recalled. Shapes go to the test set in a random order
    until it holds ``n_test`` strings (capped at ``max_test_fraction`` of the pool only when
    fewer than ``n_train + n_test`` distinct strings were found; the string split caps
    always, as it always did); a shape cut off by the cap is dropped from training too.
    The defaults draw what they always did.

    ``n_valid`` > 0 adds a validation split drawn like the test set, from the pool strings
    neither split took, after both are drawn (so they are the same as without it): with
    ``split="shape"`` whole shapes seen neither in training nor in the test set (in a random
    order, the last one cut at ``n_valid``); with ``split="string"`` unseen strings.
    """
    if split not in SPLITS:
        raise IsingInputError(f"split must be one of {', '.join(map(repr, SPLITS))} (hold out strings, or whole "
                              f"open/close/filler shapes); got {split!r}.")
    for name, v, low in (("n_train", n_train, 1), ("n_test", n_test, 1), ("n_valid", n_valid, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise IsingInputError(f"{name} must be a positive integer (a number of strings); got {v!r}.")
    if not (isinstance(max_test_fraction, (int, float)) and not isinstance(max_test_fraction, bool)
            and 0.0 < max_test_fraction < 1.0):
        raise IsingInputError(f"max_test_fraction must be in (0, 1); got {max_test_fraction!r}.")
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel())
    pool = np.unique(sample_dyck(rng, 2 * (n_train + n_test), T, max_depth, num_types, filler, interleaved), axis=0)
    pool = pool[rng.permutation(len(pool))]
    n_te = min(n_test, int(max_test_fraction * len(pool)))
    if split == "shape" and len(pool) >= n_train + n_test:  # the cap is for a short pool only (see above)
        n_te = n_test
    if split == "string":
        test, train = pool[:n_te], pool[n_te : n_te + n_train]
        valid = pool[n_te + n_train : n_te + n_train + n_valid]
    else:
        _, shape_id = np.unique(shapes(pool, num_types, interleaved), axis=0, return_inverse=True)
        shape_id = shape_id.ravel()
        order = rng.permutation(shape_id.max() + 1)  # shapes in a random order
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        size = np.bincount(shape_id)[order]  # strings per shape, in that order
        n_shapes = int(np.searchsorted(np.cumsum(size), n_te))  # shapes wholly before the cap ...
        held = rank[shape_id] <= n_shapes  # ... plus the one the cap cuts
        if n_te < 1 or held.all():
            held = np.zeros(len(pool), bool)  # too few shapes to hold one out: caught below
        by_rank = np.argsort(rank[shape_id], kind="stable")  # test strings grouped by shape, in shape order
        test = pool[by_rank[held[by_rank]]][:n_te]
        train = pool[~held][:n_train]
        valid = _unseen_shapes(rng, pool[~held][n_train:], shape_id[~held][n_train:],
                               shape_id[~held][:n_train], n_valid) if n_valid else pool[:0]
    mk = lambda x: Split(x, match_targets(x, num_types, interleaved))
    vocab = 2 * num_types + (1 if filler else 0)
    return BracketData(mk(train), mk(test), vocab_size=vocab, seq_len=T, valid=mk(valid) if n_valid else None)


def _unseen_shapes(rng, rest: np.ndarray, rest_shape: np.ndarray, train_shape: np.ndarray, n: int) -> np.ndarray:
    """Up to ``n`` strings of ``rest`` whose shapes training never saw, whole shapes in a random order
    (the last cut at ``n``). The test shapes are not in ``rest`` (``make_data`` holds each out whole)."""
    unseen = ~np.isin(rest_shape, train_shape)
    rest, rest_shape = rest[unseen], rest_shape[unseen]
    order = rng.permutation(np.unique(rest_shape)) if len(rest_shape) else rest_shape
    rank = np.searchsorted(np.sort(order), rest_shape)  # each string's shape, as an index into sorted ids
    pos = np.empty(len(order), int)
    pos[np.argsort(order)] = np.arange(len(order))  # sorted index -> place in the random order
    return rest[np.argsort(pos[rank], kind="stable")][:n]

"""brackets-hard: filler tokens, interleaved kinds and the split by shape, against references written here."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from isingattn.errors import IsingInputError, RunFolderError
from isingattn.models import brackets
from isingattn.models.app import experiments


def _stack_match(row, k, interleaved):
    """Brute-force matcher: the matching open position at each close, -1 elsewhere (tokens >= 2k are fillers)."""
    stacks = {}
    out = []
    for t, tok in enumerate(row):
        kind = tok % k if interleaved else 0  # nested words: one stack for every kind
        if tok < k:
            stacks.setdefault(kind, []).append(t)
            out.append(-1)
        elif tok < 2 * k:
            out.append(stacks[kind].pop())  # a KeyError/IndexError here: an unbalanced string
        else:
            out.append(-1)
    assert not any(stacks.values()), "brackets left open"
    return out


def _shape(row, k, interleaved):
    """What the targets depend on, as a string: o/c/. nested; kinds renamed by first appearance if interleaved."""
    if not interleaved:
        return "".join("o" if x < k else "c" if x < 2 * k else "." for x in row)
    names = {}
    for x in row:
        if x < 2 * k:
            names.setdefault(x % k, str(len(names)))
    return "".join(("o" + names[x % k]) if x < k else ("c" + names[x % k]) if x < 2 * k else "." for x in row)


def _strip(row, k):
    """The brackets alone, and where each sat in ``row``."""
    keep = [t for t, x in enumerate(row) if x < 2 * k]
    return [row[t] for t in keep], keep


@pytest.mark.parametrize("interleaved", [False, True])
def test_filler_never_changes_targets(interleaved):
    k, T = 3, 14
    d = brackets.make_data(jax.random.PRNGKey(3), T, 300, 100, None, k, filler=0.4, interleaved=interleaved)
    assert d.vocab_size == 2 * k + 1
    for split in (d.train, d.test):
        assert (split.tokens == 2 * k).any()  # there are fillers to test
        for row, tgt in zip(split.tokens.tolist(), split.targets.tolist()):
            assert tgt == _stack_match(row, k, interleaved)
            bare, where = _strip(row, k)  # the same brackets without fillers match the same brackets
            expect = [-1] * T
            for i, m in enumerate(_stack_match(bare, k, interleaved)):
                if m >= 0:
                    expect[where[i]] = where[m]
            assert tgt == expect
    # fillers inserted anywhere into filler-free words move the targets with the brackets, nothing else
    rng = np.random.default_rng(0)
    words = brackets.sample_dyck(rng, 200, 10, None, k, interleaved=interleaved)
    assert not (words == 2 * k).any()
    for w in words.tolist():
        slots = np.sort(rng.choice(16, 10, replace=False))  # the brackets' positions in a string of 16
        padded = np.full(16, 2 * k, np.int32)
        padded[slots] = w
        got = brackets.match_targets(padded[None], k, interleaved)[0]
        expect = np.full(16, -1)
        for i, m in enumerate(_stack_match(w, k, interleaved)):
            if m >= 0:
                expect[slots[i]] = slots[m]
        np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("T,filler,interleaved,k", [(8, 0.0, False, 2), (10, 0.0, True, 2), (16, 0.0, False, 3),
                                                     (12, 0.3, False, 3), (13, 0.25, True, 3), (16, 0.25, True, 3)])
def test_split_by_shape_is_disjoint(T, filler, interleaved, k):
    n_test = 100
    d = brackets.make_data(jax.random.PRNGKey(T), T, 2000, n_test, None, k, filler=filler, split="shape",
                           interleaved=interleaved)
    train = [r for r in d.train.tokens.tolist()]
    test = [r for r in d.test.tokens.tolist()]
    assert train and test and len(test) <= n_test
    assert not {_shape(r, k, interleaved) for r in train} & {_shape(r, k, interleaved) for r in test}
    assert not {tuple(r) for r in train} & {tuple(r) for r in test}
    assert len({tuple(r) for r in train}) == len(train)  # unique strings, as the string split
    for row, tgt in zip(test, d.test.targets.tolist()):  # valid words, matched by the reference
        assert tgt == _stack_match(row, k, interleaved)


def test_split_by_string_shares_shapes_and_shape_split_fills_the_test_set():
    """The split matters: holding out strings leaves test shapes in training (T=16 has 1,430 nested shapes)."""
    kw = dict(T=16, n_train=5000, n_test=500, max_depth=None, num_types=3)
    by_string = brackets.make_data(jax.random.PRNGKey(0), **kw)
    shared = {_shape(r, 3, False) for r in by_string.train.tokens.tolist()} & \
             {_shape(r, 3, False) for r in by_string.test.tokens.tolist()}
    assert len(shared) > 100
    by_shape = brackets.make_data(jax.random.PRNGKey(0), **kw, split="shape")
    assert len(by_shape.test.tokens) == 500 and len(by_shape.train.tokens) == 5000
    # a test set larger than the training set is filled (brackets-hard: 1000 / 2000); the string split caps it
    # at 20% of the pool, as it always did
    small = dict(kw, n_train=200, n_test=400)
    assert len(brackets.make_data(jax.random.PRNGKey(0), **small, split="shape").test.tokens) == 400
    assert len(brackets.make_data(jax.random.PRNGKey(0), **small).test.tokens) == int(0.2 * 2 * 600)
    # a short pool (T=6, one kind: 5 words, 5 shapes) keeps the cap: one shape held out, the rest trained on
    short = brackets.make_data(jax.random.PRNGKey(0), 6, 10, 10, None, 1, split="shape")
    assert len(short.test.tokens) == 1 and len(short.train.tokens) == 4


def test_interleaved_words_cross_and_nested_words_do_not():
    """Interleaved: every kind alone is a Dyck word, and kinds cross ("([)]"); nested: a close matches the last open."""
    rng = np.random.default_rng(1)
    for interleaved in (False, True):
        words = brackets.sample_dyck(rng, 400, 12, None, 2, filler=0.2, interleaved=interleaved)
        crossings = 0
        for row in words.tolist():
            tgt = _stack_match(row, 2, interleaved)
            pairs = [(m, t) for t, m in enumerate(tgt) if m >= 0]
            crossings += sum(a < c < b < e for a, b in pairs for c, e in pairs)
            assert all(row[t] == row[m] + 2 for m, t in pairs)  # a close matches an open of its own kind
        assert (crossings > 0) == interleaved


@pytest.mark.parametrize("interleaved", [False, True])
def test_seeded_by_the_jax_key(interleaved):
    kw = dict(T=12, n_train=400, n_test=80, num_types=3, filler=0.25, split="shape", interleaved=interleaved)
    a = brackets.make_data(jax.random.PRNGKey(5), **kw)
    b = brackets.make_data(jax.random.PRNGKey(5), **kw)
    c = brackets.make_data(jax.random.PRNGKey(6), **kw)
    for x, y in zip((a.train, a.test), (b.train, b.test)):
        np.testing.assert_array_equal(x.tokens, y.tokens)
        np.testing.assert_array_equal(x.targets, y.targets)
    assert not np.array_equal(a.train.tokens[:50], c.train.tokens[:50])
    cell = experiments.Cell("bh", "brackets-hard", 12, n_train=400, n_test=80, interleaved=interleaved)
    _, data_for_seed, _ = experiments.cell_data(cell)
    (tr1, te1), (tr2, te2), (tr3, _) = data_for_seed(0), data_for_seed(0), data_for_seed(1)
    np.testing.assert_array_equal(tr1.tokens, tr2.tokens)
    np.testing.assert_array_equal(te1.targets, te2.targets)
    assert not np.array_equal(tr1.tokens[:50], tr3.tokens[:50])


BAD_DATA = [
    (dict(filler=1.0), "filler must be a probability in \\[0, 1\\).*got 1.0"),
    (dict(filler=-0.1), "filler must be a probability.*got -0.1"),
    (dict(filler=True), "filler must be a probability.*got True"),
    (dict(filler="0.25"), "filler must be a probability.*got '0.25'"),
    (dict(filler=float("nan")), "filler must be a probability.*got nan"),
    (dict(split="shapes"), "split must be one of 'string', 'shape'.*got 'shapes'"),
    (dict(interleaved="yes"), "interleaved must be True or False; got 'yes'"),
    (dict(T=7), "even length ≥ 2 \\(any length ≥ 2 with filler > 0\\); got T=7"),
    (dict(T=1, filler=0.5), "got T=1"),
    (dict(n_train=0), "n_train must be a positive integer.*got 0"),
    (dict(n_test=0), "n_test must be a positive integer.*got 0"),
    (dict(max_test_fraction=1.5), "max_test_fraction must be in \\(0, 1\\); got 1.5"),
    (dict(num_types=5), "num_types must be in 1..4; got 5"),
    (dict(max_depth=0), "max_depth must be ≥ 1 or None"),
]


@pytest.mark.parametrize("kw,match", BAD_DATA)
def test_bad_data_settings_are_refused(kw, match):
    args = {**dict(T=8, n_train=50, n_test=10), **kw}
    with pytest.raises(IsingInputError, match=match):
        brackets.make_data(jax.random.PRNGKey(0), **args)


BAD_CELLS = [
    (dict(task="brackets", filler=0.25), "filler=0.25 apply to task 'brackets-hard' only; task 'brackets'"),
    (dict(task="brackets", split="shape", interleaved=True), "split='shape', interleaved=True apply to task"),
    (dict(task="shakespeare", interleaved=False), "interleaved=False apply to task 'brackets-hard' only"),
    (dict(filler=1.0), "Cell: filler must be a finite number ≥ 0 and < 1; got 1.0"),
    (dict(filler="0.1"), "Cell: filler must be .*got the string '0.1'"),
    (dict(split="nested"), "Cell: split must be one of \\('string', 'shape'\\); got 'nested'"),
    (dict(interleaved=1), "Cell: interleaved must be True or False; got int 1"),
    (dict(seq_len=1), "seq_len must be an integer >= 2 for brackets-hard; got 1"),
    (dict(seq_len=7, filler=0.0), "seq_len must be an even integer >= 2 .* for brackets-hard; got 7"),
    (dict(n_train=0), "Cell: n_train must be an integer ≥ 1; got 0"),
]


@pytest.mark.parametrize("kw,match", BAD_CELLS)
def test_bad_cells_are_refused(kw, match):
    args = {**dict(part="bh", task="brackets-hard", seq_len=8), **kw}
    with pytest.raises(IsingInputError, match=match):
        experiments.Cell(**args)


def test_task_defaults_and_the_old_task_untouched():
    hard = experiments.Cell("bh", "brackets-hard", 15)  # odd: fillers pad it
    assert (hard.n_train, hard.filler, hard.split, hard.interleaved) == (1000, 0.25, "shape", True)
    vocab, _, meta = experiments.cell_data(hard)
    assert vocab == 7 and meta["chars"] == "([{)]}." and meta["task"] == "brackets-hard"
    assert {k: meta[k] for k in ("filler", "split", "interleaved")} == {"filler": 0.25, "split": "shape",
                                                                       "interleaved": True}
    old = experiments.Cell("brackets", "brackets", 8, n_train=300, n_test=50)
    assert (old.filler, old.split, old.interleaved) == (None, None, None)
    assert experiments.Cell("brackets", "brackets", 8).n_train == 20000
    vocab, data_for_seed, meta = experiments.cell_data(old)
    # the run spec's data part is what checkpoints of the committed cells hold: no new key may appear
    assert meta == {"task": "brackets", "chars": "([{)]}", "n_train": 300, "n_test": 50, "depth": None, "types": 3}
    train, test = data_for_seed(2)
    ref = brackets.make_data(jax.random.fold_in(jax.random.PRNGKey(2), 0xB4AC), 8, 300, 50, None, 3)
    np.testing.assert_array_equal(train.tokens, ref.train.tokens)
    np.testing.assert_array_equal(test.targets, ref.test.targets)


def test_a_brackets_hard_cell_trains_resumes_and_refuses_other_data(tmp_path):
    cell = experiments.Cell("bh", "brackets-hard", 7, variants=("softmax",), seeds=1, steps=4, eval_every=2,
                            batch_size=8, d_model=8, n_train=60, n_test=20)
    out = str(tmp_path / "cell")
    first = experiments.run_cell(cell, out, progress=False)
    rows = [json.loads(line) for line in open(tmp_path / "cell" / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [2, 4] and first["softmax"][0] == rows[-1]["test_acc"]
    assert json.load(open(tmp_path / "cell" / "config.json"))["data"]["filler"] == 0.25
    again = experiments.run_cell(cell, out, progress=False)  # finished: read back, nothing retrained
    assert again == first and len(open(tmp_path / "cell" / "metrics.jsonl").readlines()) == 2
    with pytest.raises(RunFolderError, match="filler: 0.25 -> 0.5"):
        experiments.run_cell(dataclasses.replace(cell, filler=0.5), out, progress=False)

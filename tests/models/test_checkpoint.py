"""Checkpoints: exact round trips, clear errors, atomic writes."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from isingattn.models import checkpoint
from isingattn.models import Config, Transformer


def _state(seed):
    m = Transformer(Config(vocab_size=4, seq_len=6, n_out=6, d_model=8), key=jax.random.PRNGKey(seed))
    opt = optax.adamw(1e-3).init(jax.tree_util.tree_leaves(m))
    return {"model": m, "opt": opt, "key": jax.random.PRNGKey(seed + 7), "step": jnp.asarray(seed)}


def test_round_trip_is_exact(tmp_path):
    a, b = _state(1), _state(2)
    p = str(tmp_path / "c.npz")
    checkpoint.save(p, a, {"step": 1, "config": {"T": 6}})
    back, meta = checkpoint.load(p, b)
    assert meta == {"step": 1, "config": {"T": 6}} and checkpoint.read_meta(p) == meta
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(back)):
        np.testing.assert_array_equal(x, y)
        assert np.asarray(x).dtype == np.asarray(y).dtype


def test_errors(tmp_path):
    p = str(tmp_path / "c.npz")
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint"):
        checkpoint.load(p, _state(0))
    checkpoint.save(p, _state(0))
    data = open(p, "rb").read()
    open(p, "wb").write(data[: len(data) // 2])
    with pytest.raises(checkpoint.CheckpointError, match="corrupt|truncated"):
        checkpoint.load(p, _state(0))
    checkpoint.save(p, {"a": jnp.zeros(3)})
    with pytest.raises(checkpoint.CheckpointError, match="different configuration"):
        checkpoint.load(p, _state(0))
    with pytest.raises(checkpoint.CheckpointError, match="shape"):
        checkpoint.load(p, {"a": jnp.zeros(4)})


def test_files_that_are_not_checkpoints_are_refused_clearly(tmp_path, capsys):
    """A bare .npy array (np.load returns an ndarray, not an archive) and a text file get a
    CheckpointError that says what the file is, and the CLI a one-line exit 2."""
    from isingattn.cli import run

    npy, text = str(tmp_path / "a.npy"), str(tmp_path / "notes.npz")
    np.save(npy, np.zeros(3))
    open(text, "w").write("not an archive\n")
    with pytest.raises(checkpoint.CheckpointError, match=r"single NumPy array \(\.npy\)"):
        checkpoint.read_meta(npy)
    with pytest.raises(checkpoint.CheckpointError, match=r"single NumPy array \(\.npy\)"):
        checkpoint.load(npy, {"a": jnp.zeros(3)})
    with pytest.raises(checkpoint.CheckpointError, match="not a readable checkpoint") as e:
        checkpoint.read_meta(text)
    assert "allow_pickle" not in str(e.value)
    assert run(["export-bqm", npy, "--text", "()", "--query", "1", "--out", str(tmp_path / "q.bqm")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and npy in err[0] and ".npy" in err[0]
    assert not (tmp_path / "q.bqm").exists()


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    p = str(tmp_path / "c.npz")
    checkpoint.save(p, {"a": jnp.arange(3.0)}, {"v": 1})

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(OSError):
        checkpoint.save(p, {"a": jnp.arange(3.0) + 1}, {"v": 2})
    back, meta = checkpoint.load(p, {"a": jnp.zeros(3)})
    assert meta == {"v": 1} and list(np.asarray(back["a"])) == [0, 1, 2]
    assert [f for f in tmp_path.iterdir() if f.suffix == ".tmp"] == []


def test_killed_and_resumed_run_ends_like_an_uninterrupted_one(tmp_path):
    from isingattn.models import brackets
    from isingattn.models.train import TrainConfig, train

    d = brackets.make_data(jax.random.PRNGKey(0), 6, n_train=200, n_test=20, num_types=2)
    cfg = Config(vocab_size=4, seq_len=6, n_out=6, d_model=8, variant="h")
    tc = TrainConfig(steps=60, batch_size=16, eval_every=20, warmup=5)
    m1, r1 = train(cfg, d.train, d.test, tc, seed=3, progress=False)
    ck = str(tmp_path / "ck.npz")
    train(cfg, d.train, d.test, tc, seed=3, progress=False, ckpt_path=ck, stop_after=40)
    assert checkpoint.read_meta(ck)["step"] == 40
    m2, r2 = train(cfg, d.train, d.test, tc, seed=3, progress=False, ckpt_path=ck, resume=True)
    assert r1["step"] == r2["step"] == 60
    assert r1["test_loss"] == r2["test_loss"] and r1["test_acc"] == r2["test_acc"]
    for x, y in zip(jax.tree_util.tree_leaves(m1), jax.tree_util.tree_leaves(m2)):
        np.testing.assert_array_equal(x, y)

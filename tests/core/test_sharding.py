"""Data parallelism over several devices (``isingattn.sharding``, ``Exact(mesh=...)``,
``train(mesh=...)``) against the single-device results.

XLA fixes the number of (fake CPU) devices when jax starts, and this session's jax has
already started with one, so the multi-device runs happen once, in a subprocess with
``--xla_force_host_platform_device_count=4``; it prints the measured differences as JSON
and the tests below check them. Everything runs in float64, so the only differences are
the order of float summation (psum over devices against one GEMM).
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

DEVICES = 4
TOL = 1e-11

WORKER = textwrap.dedent(
    """
    import json, time
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    import equinox as eqx
    from isingattn import IsingModel
    from isingattn.inference.exact import Exact
    from isingattn.models import brackets
    from isingattn.models.train import TrainConfig, train
    from isingattn.models.transformer import Config, Transformer
    from isingattn.sharding import data_mesh, replicate, shard_batch
    from isingattn.instances import random_model

    out = {"devices": len(jax.devices())}
    mesh = data_mesh()
    maxdiff = lambda a, b: max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
                               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))

    # Exact, non-causal, n=13 (NB = 2^7 columns, 32 per device), masked; the last query's
    # scale sends it through the log-space fallback. Marginals, corr, log Z and gradients.
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    n = 13
    h, J = random_model(rng, n)
    h = np.stack([h, 3 * h, rng.normal(size=n), rng.normal(size=n) * 1e-3])
    J = np.broadcast_to(J, (4, n, n)).copy()
    J[3] *= 1e3  # |J| ~ 1e3 against |h| ~ 1e-3: the fast path underflows
    mask = rng.random((4, n)) < 0.85
    w = rng.normal(size=n)

    def run(engine, h, J, mask):
        def loss(h, J):
            m = engine.marginals(IsingModel(h, J, mask=mask))
            return jnp.sum(m.mean * w) + jnp.sum(m.log_z), m
        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(h, J)

    (_, m0), g0 = run(Exact(corr=True), h, J, mask)
    (_, m1), g1 = run(Exact(corr=True, mesh=mesh), h, J, mask)
    out["exact"] = {"mean": maxdiff(m0.mean, m1.mean), "log_z": maxdiff(m0.log_z, m1.log_z),
                    "corr": maxdiff(m0.corr, m1.corr), "grad_h": maxdiff(g0[0], g1[0]), "grad_J": maxdiff(g0[1], g1[1]),
                    "stable_path": np.asarray(m1.info["stable_path"]).tolist(),
                    "same_stable_path": bool(np.all(m0.info["stable_path"] == m1.info["stable_path"]))}
    out["seconds"] = {"exact": time.perf_counter() - t0}
    t0 = time.perf_counter()

    # Exact, causal, n=8 with 3 devices: every bucket's NB pads to a multiple of 3
    # (down to NB = 4 at the shortest: 2 columns per device, one device only padding).
    hq = rng.normal(size=(2, 8, 8))
    Jq = random_model(rng, 8)[1]
    mesh3 = data_mesh(3)

    def run_causal(engine):
        def loss(h, J):
            m = engine.marginals(IsingModel(h, J, causal=True))
            return jnp.sum(m.mean * w[:8]) + jnp.sum(m.log_z), m
        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(hq, Jq)

    (_, c0), gc0 = run_causal(Exact())
    (_, c1), gc1 = run_causal(Exact(mesh=mesh3))
    out["causal"] = {"mean": maxdiff(c0.mean, c1.mean), "log_z": maxdiff(c0.log_z, c1.log_z),
                     "grad": maxdiff(gc0, gc1)}
    out["seconds"]["causal"] = time.perf_counter() - t0
    t0 = time.perf_counter()

    # Training: 3 AdamW steps of the hJ Transformer (Exact engine) with the batch split
    # over 4 devices against one device; 10 test strings do not split over 4 devices, so
    # evaluation also covers the replicated fallback.
    d = brackets.make_data(jax.random.PRNGKey(0), 4, 64, 10, None, 2)
    cfg = Config(vocab_size=4, seq_len=4, n_out=4, d_model=16, variant="hJ")
    tc = TrainConfig(steps=3, batch_size=8, warmup=1, eval_every=3)
    runs = [train(cfg, d.train, d.test, tc, 0, progress=False, mesh=mm) for mm in (None, mesh)]
    (p0, r0), (p1, r1) = runs
    init = Transformer(cfg, key=jax.random.split(jax.random.PRNGKey(0), 3)[0])  # as train() initializes
    leaf = jax.tree.leaves(eqx.filter(p1, eqx.is_array))[0]
    out["train"] = {"params": maxdiff(eqx.filter(p0, eqx.is_array), eqx.filter(p1, eqx.is_array)),
                    "train_loss": abs(r0["train_loss"] - r1["train_loss"]), "test_loss": abs(r0["test_loss"] - r1["test_loss"]),
                    "moved": maxdiff(eqx.filter(p0, eqx.is_array), eqx.filter(init, eqx.is_array)),
                    "replicated": bool(leaf.sharding.is_fully_replicated), "n_devices": len(leaf.sharding.device_set)}

    out["seconds"]["train"] = time.perf_counter() - t0

    # the helpers
    x = shard_batch(np.arange(8 * 3).reshape(8, 3), mesh)
    out["shard_batch"] = {"shape": list(x.shape), "shard_rows": [s.data.shape[0] for s in x.addressable_shards]}
    try:
        shard_batch(np.zeros((6, 2)), mesh)
        out["shard_batch"]["error"] = None
    except ValueError as e:
        out["shard_batch"]["error"] = str(e)
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def result():
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES} --xla_backend_optimization_level=0"
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"worker failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def test_worker_sees_the_fake_devices(result):
    assert result["devices"] == DEVICES


def test_exact_sharded_matches_single_device(result):
    r = result["exact"]
    for k in ("mean", "log_z", "corr", "grad_h", "grad_J"):
        assert r[k] < TOL, (k, r[k])
    assert r["stable_path"][3] and not any(r["stable_path"][:3])  # both paths ran, on the same queries
    assert r["same_stable_path"]


def test_exact_sharded_causal_with_padding(result):
    r = result["causal"]
    for k in ("mean", "log_z", "grad"):
        assert r[k] < TOL, (k, r[k])


def test_training_data_parallel_matches_single_device(result):
    r = result["train"]
    assert r["moved"] > 1e-4  # the steps changed the parameters, so equality means something
    assert r["params"] < TOL and r["train_loss"] < TOL and r["test_loss"] < TOL, r
    assert r["replicated"] and r["n_devices"] == DEVICES


def test_shard_batch(result):
    r = result["shard_batch"]
    assert r["shape"] == [8, 3] and r["shard_rows"] == [2] * DEVICES
    assert r["error"] and "multiple of 4" in r["error"]


def test_exact_rejects_a_non_mesh():
    from isingattn.errors import IsingInputError
    from isingattn.inference.exact import Exact

    with pytest.raises(IsingInputError, match="jax.sharding.Mesh"):
        Exact(mesh=4)

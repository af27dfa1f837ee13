"""Data parallelism over several devices (``isingattn.sharding``, ``Exact(mesh=...)``,
``train(mesh=...)``, ``ParallelTempering(mesh=...)``) against the single-device results.

XLA fixes the number of (fake CPU) devices when jax starts, and this session's jax has
already started with one, so the multi-device runs happen once, in a subprocess with
``--xla_force_host_platform_device_count=4``; it prints the measured differences as JSON
and the tests below check them. Everything runs in float64, so the only differences are
the order of float summation (psum over devices against one GEMM); parallel tempering's
chains must match exactly. One more test runs PT in two processes under ``jax.distributed``.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

DEVICES = 4
TOL = 1e-11

# The model and settings of the PT checks, shared by the 4-device worker, the two-process run
# and the single-process reference.
PT_LATTICE = textwrap.dedent(
    """
    import numpy as np

    def pt_lattice():
        # two 4x4 open lattices, ±1 couplings, fields N(0, 0.3²): h [2, 16], J [2, 16, 16]
        rng = np.random.default_rng(1)
        h, J = rng.normal(0, 0.3, (2, 16)), np.zeros((2, 16, 16))
        for i in range(16):
            for j in ([i + 1] if i % 4 < 3 else []) + ([i + 4] if i < 12 else []):
                J[:, i, j] = J[:, j, i] = rng.choice([-1.0, 1.0], 2)
        return h, J

    PT_SETTINGS = dict(num_warmup=64, num_samples=256, num_chains=8, num_replicas=5)
    PA_SETTINGS = dict(num_replicas=16, num_populations=3, min_families=1)

    def pa_cases():
        # population annealing: the pair above (Gibbs moves), a 4x4 ferromagnetic torus (Swendsen–Wang)
        import jax
        from isingattn import IsingModel, graphs
        h, J = pt_lattice()
        Jt = graphs.random_couplings(jax.random.key(0), graphs.lattice([4, 4], periodic=True), "ferro", 1.0,
                                     dtype=np.float64)
        return {"gibbs": IsingModel(h, J, beta=1.5), "swendsen-wang": IsingModel(np.zeros(16), Jt, beta=0.6)}

    def pa_summary(m):
        # what a sharded and an unsharded run must share: digests of the arrays, log Z, the moves
        import hashlib
        digest = lambda x: hashlib.sha256(np.asarray(x).tobytes()).hexdigest()
        out = {k: digest(m.info[k]) for k in ("ladder", "ess", "moves", "families_eff", "log_z_populations",
                                              "log_z_se", "num_temps")}
        dec = np.asarray(m.info["decorrelation"])
        return {**out, "samples": digest(m.samples), "mean": digest(m.mean), "log_z": np.asarray(m.log_z).tolist(),
                "moves_total": int(np.asarray(m.info["moves"]).sum()), "decorrelation": dec[np.isfinite(dec)].tolist(),
                "distinct": int(np.unique(np.asarray(m.samples).reshape(-1, 16), axis=0).shape[0])}
    """
)

WORKER = PT_LATTICE + textwrap.dedent(
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

    def error_of(f):  # the message of the ValueError that f() raises, None when it raises none
        try:
            f()
        except ValueError as e:
            return str(e)
        return None

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
    t0 = time.perf_counter()

    # Parallel tempering with its 8 chains split over the 4 devices (2 per device) against
    # one device: a batch of two 4x4 ±J lattices at β = 1.5 (so the batch axes trail the
    # chains), 5 replicas, an adapted ladder. Everything must be equal, bit for bit. (Without
    # the R-hat/ESS diagnostics, half the compile time: they are computed after the loop from
    # the gathered draws, so equal draws give equal diagnostics.)
    from isingattn.inference.mcmc import ParallelTempering
    from isingattn.inference.mcmc.pt_run import run_tempering
    hp, Jp = pt_lattice()
    pt_model = IsingModel(hp, Jp, beta=1.5)
    p0, p1 = (ParallelTempering(**PT_SETTINGS, diagnostics=False, mesh=mm).marginals(pt_model, key=jax.random.key(3))
              for mm in (None, mesh))
    same = lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))
    out["pt"] = {k: same(getattr(p0, k), getattr(p1, k)) for k in ("samples", "mean", "corr", "log_z")}
    out["pt"].update({k: same(p0.info[k], p1.info[k]) for k in p0.info if k != "log_z_kind"})
    out["pt"]["swap_rate"] = [np.asarray(p0.info["swap_rate"]).tolist(), np.asarray(p1.info["swap_rate"]).tolist()]
    out["pt"]["samples_shape"] = list(p1.samples.shape)
    out["pt"]["distinct_draws"] = int(np.unique(np.asarray(p1.samples).reshape(-1, 16), axis=0).shape[0])
    # the loop really runs split: inside it, the only collective is the all-gather of the
    # swap rejections ([R-1, C, *batch], for the ladder's mean over chains); the spins stay put
    txt = jax.jit(lambda k: run_tempering(k, jnp.asarray(hp), jnp.asarray(Jp), 1.5, None, hp.shape, num_warmup=8,
                                          num_samples=8, num_chains=8, num_replicas=5, mesh=mesh)).lower(
        jax.random.key(0)).compile().as_text()
    ops = ("all-gather(", "all-reduce(", "all-to-all(", "collective-permute(")
    out["pt"]["loop_collectives"] = [l.split(" = ")[1].split(" ")[0] for l in txt.splitlines()
                                     if "while/body" in l and any(o in l for o in ops)]
    out["pt"]["error"] = error_of(lambda: ParallelTempering(num_chains=6, mesh=mesh))
    out["seconds"]["pt"] = time.perf_counter() - t0

    # Population annealing with each population's 16 replicas split over the 4 devices (the
    # test compares it with one device, run in the test process meanwhile)
    from isingattn.inference.mcmc import PopulationAnnealing
    out["pa"] = {name: pa_summary(PopulationAnnealing(**PA_SETTINGS, mesh=mesh).marginals(model, key=jax.random.key(3)))
                 for name, model in pa_cases().items()}
    out["pa"]["error"] = error_of(lambda: PopulationAnnealing(num_replicas=6, mesh=mesh))
    out["seconds"]["pa"] = time.perf_counter() - t0

    # the helpers
    x = shard_batch(np.arange(8 * 3).reshape(8, 3), mesh)
    out["shard_batch"] = {"shape": list(x.shape), "shard_rows": [s.data.shape[0] for s in x.addressable_shards]}
    out["shard_batch"]["error"] = error_of(lambda: shard_batch(np.zeros((6, 2)), mesh))
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def result():
    env = dict(os.environ)
    # the suite's XLA_FLAGS (conftest.py: quick compilation, most of the worker's time) plus the device count
    env["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}"
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.Popen([sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        # while it runs: the one-device population annealing runs that the worker's must equal
        import jax

        from isingattn.inference.mcmc import PopulationAnnealing

        ns = {}
        exec(PT_LATTICE, ns)
        reference = {name: ns["pa_summary"](PopulationAnnealing(**ns["PA_SETTINGS"]).marginals(model,
                                                                                              key=jax.random.key(3)))
                     for name, model in ns["pa_cases"]().items()}
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"worker failed (rc {proc.returncode}):\n{stdout[-3000:]}\n{stderr[-5000:]}"
    return {**json.loads(lines[-1][len("RESULT "):]), "pa_reference": reference}


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


def test_pt_sharded_chains_match_single_device(result):
    """ParallelTempering(mesh=...) splits its chains over the devices; the noise is drawn
    for the global arrays, so samples, marginals, log Z, swap rates, ladder and energy trace
    are the single-device run's, bit for bit."""
    r = result["pt"]
    assert r["samples_shape"] == [2, 8 * 256, 16] and r["distinct_draws"] > 100  # real draws, not a constant
    unequal = [k for k, v in r.items() if v is False]
    assert not unequal, unequal
    assert {"samples", "mean", "corr", "log_z", "swap_rate", "ladder", "energy", "round_trip_rate", "log_z_se"} <= set(r)
    assert r["swap_rate"][0] == r["swap_rate"][1] and min(min(x) for x in r["swap_rate"][0]) > 0.1
    # the sweeps run split: the one collective in the loop gathers the swap rejections
    assert len(r["loop_collectives"]) == 1 and r["loop_collectives"][0].startswith("f64[4,8,2]"), r["loop_collectives"]


def test_pa_sharded_replicas_match_single_device(result):
    """PopulationAnnealing(mesh=...) splits each population's replicas over the devices and
    resamples from the whole population; with Gibbs moves (a batch of two glassy lattices) and
    Swendsen–Wang moves (a torus) the samples, marginals, log Z, ladder, ESS, moves, families
    and SE are the one-device run's, bit for bit (the autocorrelation that decides the moves
    is a float reduction: equal to rounding)."""
    for name in ("gibbs", "swendsen-wang"):
        got, ref = result["pa"][name], result["pa_reference"][name]
        np.testing.assert_allclose(got.pop("decorrelation"), ref["decorrelation"], rtol=0, atol=1e-12)
        unequal = [k for k in ref if k != "decorrelation" and got[k] != ref[k]]
        assert not unequal, (name, unequal)
        assert ref["moves_total"] > 0
    assert result["pa_reference"]["gibbs"]["distinct"] > 20  # real draws (the ordered torus has few states)
    assert result["pa"]["error"] and "num_replicas = 6" in result["pa"]["error"]


def test_pt_refuses_chains_that_do_not_split(result):
    assert result["pt"]["error"] and "num_chains = 6" in result["pt"]["error"] and "multiple of 4" in result["pt"]["error"]


# Two processes, 2 fake CPU devices each, one global mesh over their 4 devices: JAX's own
# distributed runtime (a coordinator on localhost; CPU collectives through gloo).
DIST_WORKER = PT_LATTICE + textwrap.dedent(
    """
    import hashlib, json, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.distributed.initialize(coordinator_address="127.0.0.1:" + sys.argv[2], num_processes=2,
                               process_id=int(sys.argv[1]))
    from isingattn import IsingModel
    from isingattn.inference.mcmc import ParallelTempering
    from isingattn.sharding import data_mesh

    h, J = pt_lattice()
    m = ParallelTempering(**PT_SETTINGS, diagnostics=False, mesh=data_mesh()).marginals(
        IsingModel(h, J, beta=1.5), key=jax.random.key(3))
    digest = lambda x: hashlib.sha256(np.asarray(x).tobytes()).hexdigest()
    from isingattn.inference.mcmc import PopulationAnnealing
    pa = pa_summary(PopulationAnnealing(**PA_SETTINGS, mesh=data_mesh()).marginals(pa_cases()["gibbs"],
                                                                                    key=jax.random.key(3)))
    out = {"pa_samples": pa["samples"], "pa_log_z": pa["log_z"], "pa_moves": pa["moves"],
           "processes": jax.process_count(), "devices": jax.device_count(), "local": jax.local_device_count(),
           "samples": digest(m.samples), "energy": digest(m.info["energy"]),
           **{k: np.asarray(v).tolist() for k, v in [("mean", m.mean), ("log_z", m.log_z),
                                                      ("swap_rate", m.info["swap_rate"]), ("ladder", m.info["ladder"])]}}
    print("RESULT " + json.dumps(out), flush=True)
    jax.distributed.shutdown()
    """
)


def test_pt_two_processes_jax_distributed_match_one_process(tmp_path, result):
    """ParallelTempering(mesh=data_mesh()) after jax.distributed.initialize in two processes
    on localhost (2 CPU devices each, 8 chains over the 4 global devices) gives, in both
    processes, the samples, marginals, swap rates, ladder and log Z of a one-process,
    one-device run, bit for bit; so does PopulationAnnealing(mesh=data_mesh()) (16 replicas
    per population over the 4 devices, global resampling): samples, log Z and moves."""
    import hashlib
    import socket

    import jax
    import numpy as np

    from isingattn import IsingModel
    from isingattn.inference.mcmc import ParallelTempering

    with socket.socket() as sock:  # a free port for the coordinator
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    env["JAX_PLATFORMS"] = "cpu"
    # output to files, not pipes: a process blocked on a full pipe would hold the other at the
    # shutdown barrier
    logs = [(tmp_path / f"out{i}", tmp_path / f"err{i}") for i in range(2)]
    procs = []
    try:
        for i, (o, e) in enumerate(logs):
            with open(o, "w") as fo, open(e, "w") as fe:
                procs.append(subprocess.Popen([sys.executable, "-c", DIST_WORKER, str(i), port], env=env, stdout=fo,
                                              stderr=fe))
        # the one-process reference, while they run
        ns = {}
        exec(PT_LATTICE, ns)
        h, J = ns["pt_lattice"]()
        ref = ParallelTempering(**ns["PT_SETTINGS"], diagnostics=False).marginals(IsingModel(h, J, beta=1.5),
                                                                                 key=jax.random.key(3))
        for p in procs:
            p.wait(timeout=300)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = []
    for p, (o, e) in zip(procs, logs):
        stdout, stderr = o.read_text(), e.read_text()
        lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
        assert p.returncode == 0 and lines, f"process failed (rc {p.returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}"
        results.append(json.loads(lines[-1][len("RESULT "):]))

    digest = lambda x: hashlib.sha256(np.asarray(x).tobytes()).hexdigest()
    for r in results:
        assert (r["processes"], r["devices"], r["local"]) == (2, 4, 2)
        assert r["samples"] == digest(ref.samples) and r["energy"] == digest(ref.info["energy"])
        ref_pa = result["pa_reference"]["gibbs"]  # population annealing, replicas over the 4 devices
        assert (r["pa_samples"], r["pa_log_z"], r["pa_moves"]) == (ref_pa["samples"], ref_pa["log_z"], ref_pa["moves"])
        for k, v in [("mean", ref.mean), ("log_z", ref.log_z), ("swap_rate", ref.info["swap_rate"]),
                     ("ladder", ref.info["ladder"])]:
            np.testing.assert_array_equal(np.asarray(r[k]), np.asarray(v), err_msg=k)

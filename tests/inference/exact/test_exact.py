"""The Exact (meet-in-the-middle) engine against the float64 brute-force reference
``isingattn.testing.brute_force`` (plain numpy enumeration, independent of the engine).

Compilation dominates the cost of these tests, so the engine is called through a few
jitted wrappers and each test batches its cases into as few shapes as possible; values
(fields, couplings, masks, β) change without recompiling. The wrappers compile with
XLA's backend (LLVM) optimization level 0, which compiles about 2.5x faster; only the
LLVM pass pipeline changes (XLA keeps fast-math off). The float32 extreme-scale test
also runs the engine as users get it (from the registry, through its own default jit).
"""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import isingattn
from isingattn import IsingModel, TooManySpinsError, inference
from isingattn.inference.exact import Exact
from isingattn.testing import brute_force
from isingattn.instances import random_model

from _exact_helpers import BETAS, F64_TOL, assert_close, reference, solve  # noqa: E402

# ---- against brute force ------------------------------------------------------------------


def query_masks(rng, batch, n):
    """Per-query masks covering: all active, all masked but one, all masked, random."""
    mask = rng.random(batch + (n,)) < 0.6
    flat = mask.reshape(-1, n)
    flat[0] = True
    flat[1] = False
    flat[1, rng.integers(n)] = True  # all masked but one
    flat[2] = False
    flat[2, n - 1] = True  # all masked but the last one
    if n > 1:
        flat[3] = False  # nothing active: mean 0, log Z = 0
    return flat.reshape(mask.shape)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 13])
def test_matches_brute_force_masked_grouped_batch(n):
    """h [2, 5, n] with J [2, 1, n, n]: J differs along the first axis and is shared
    along the second (both grouping paths), with per-query masks; mean, corr, log Z."""
    rng = np.random.default_rng(100 + n)
    h = rng.normal(size=(2, 5, n)) * 1.5
    J = np.stack([random_model(rng, n, J_scale=1.2 / np.sqrt(n))[1] for _ in range(2)])[:, None]
    mask = query_masks(rng, (2, 5), n)
    for beta in BETAS:
        m = solve(h, J, beta, mask, corr=True)
        ref = reference(h, J, beta, mask)
        assert m.mean.shape == (2, 5, n) and m.corr.shape == (2, 5, n, n) and m.log_z.shape == (2, 5)
        assert m.mean.dtype == jnp.float64
        assert_close(m.mean, ref["mean"], F64_TOL, f"mean n={n} beta={beta}")
        assert_close(m.corr, ref["corr"], F64_TOL, f"corr n={n} beta={beta}")
        assert_close(m.log_z, ref["log_z"], F64_TOL * (1 + np.abs(ref["log_z"])), f"log_z n={n} beta={beta}")
        assert not np.any(np.asarray(m.info["stable_path"]))  # benign scales take the fast path


@pytest.mark.parametrize("n", [1, 2, 13])  # the unmasked path at other n: tests below
def test_matches_brute_force_J_per_batch_element_unmasked(n):
    rng = np.random.default_rng(200 + n)
    h = rng.normal(size=(4, n))
    J = np.stack([random_model(rng, n, J_scale=1.0)[1] for _ in range(4)])
    for beta in BETAS:
        m = solve(h, J, beta)
        ref = reference(h, J, beta)
        assert m.corr is None
        assert_close(m.mean, ref["mean"], F64_TOL, f"mean n={n} beta={beta}")
        assert_close(m.log_z, ref["log_z"], F64_TOL * (1 + np.abs(ref["log_z"])), f"log_z n={n} beta={beta}")


@settings(max_examples=25)
@given(
    log_h=st.floats(-3, 3),
    log_J=st.floats(-3, 2),
    beta=st.floats(0.1, 3.0),
    graph=st.sampled_from(["dense", "chain", "lattice"]),
    dtype=st.sampled_from([np.float64, np.float32]),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_random_scales_shared_J(log_h, log_J, beta, graph, dtype, seed):
    """h [4, 8] sharing one J [8, 8], scales from 1e-3 to 1e3: finite and within the
    rounding bound of ``tolerances`` (below) of the brute force on the same inputs."""
    rng = np.random.default_rng(seed)
    n = 8
    _, J = random_model(rng, n, J_scale=10.0**log_J, graph=graph)
    h = rng.normal(size=(4, n)) * 10.0**log_h
    h, J = h.astype(dtype), J.astype(dtype)
    m = solve(h, J, beta)
    assert m.mean.dtype == dtype and m.log_z.dtype == dtype
    beta_r = float(np.asarray(beta, dtype))  # the model rounds beta to the model dtype
    ref = reference(h, J, beta_r)
    for q in range(4):
        t_mean, t_logz = tolerances(dtype, beta_r, h[q], J)
        assert_close(m.mean[q], ref["mean"][q], t_mean, f"mean q={q}")
        assert_close(m.log_z[q], ref["log_z"][q], t_logz, f"log_z q={q}")


# ---- extreme scales ------------------------------------------------------------------------


def tolerances(dtype, beta, h, J):
    """Error bound for one model evaluated in ``dtype``, against the float64 brute force of
    the same (already rounded) inputs.

    The engine computes every configuration's log-weight -βE(s) from the terms β h_j s_j
    and β J_jk s_j s_k; the rounding error of such sums is a small multiple of
    eps·(sum of the magnitudes of the terms), so every log-weight is off by at most
        δ = 8·eps·β·(Σ_j |h_j| + Σ_{j<k} |J_jk|)      (Σ_{j<k} |J_jk| = Σ|J| / 2).
    Shifting every log-weight by at most δ moves log Z by at most δ, scales each
    probability by a factor in [e^-2δ, e^2δ], so it changes the expectation of any
    quantity bounded by 1 (s_j, s_j s_k) by at most e^{2δ} - 1. The floor covers the
    final reductions (softmax, GEMM sums of positive terms) that are relative to O(1).
    """
    eps = np.finfo(dtype).eps
    floor = 1e-5 if dtype == np.float32 else F64_TOL
    delta = 8 * eps * beta * (np.abs(np.asarray(h, np.float64)).sum() + np.abs(np.asarray(J, np.float64)).sum() / 2)
    return floor + np.expm1(2 * delta), floor + delta


# (h scale, J scale); J_scale None means 1/sqrt(n)
EXTREME = [(1e3, 1e2), (1e-3, 1e2), (30.0, 30.0), (1e3, 1e-3), (1e2, 1e2), (3.0, 10.0)]
BENIGN = [(1.0, None), (1e-3, 1e-3)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_extreme_scales_finite_and_accurate(dtype):
    rng = np.random.default_rng(300)
    n = 10
    cases = EXTREME + BENIGN
    hs, Js = zip(*[random_model(rng, n, h_scale=a, J_scale=b) for a, b in cases])
    h, J = np.stack(hs).astype(dtype), np.stack(Js).astype(dtype)  # one model per case
    stable = {}
    for beta in BETAS:
        m = solve(h, J, beta, corr=True)
        assert m.mean.dtype == dtype and m.log_z.dtype == dtype and m.corr.dtype == dtype
        ref = reference(h, J, beta)  # float64 brute force of the rounded inputs
        for c, case in enumerate(cases):
            t_mean, t_logz = tolerances(dtype, beta, h[c], J[c])
            what = f"{case} beta={beta} {np.dtype(dtype).name}"
            assert_close(m.mean[c], ref["mean"][c], t_mean, "mean " + what)
            assert_close(m.corr[c], ref["corr"][c], t_mean, "corr " + what)
            assert_close(m.log_z[c], ref["log_z"][c], t_logz, "log_z " + what)
            stable[case, beta] = bool(m.info["stable_path"][c])
        if dtype == np.float32 and beta == 2.0:
            # the engine as users get it: from the registry, compiled by its own jit with
            # XLA's default optimization
            eng = inference.get("exact", max_n=n)
            d = eng.marginals(IsingModel(h, J, beta=beta))
            assert d.corr is None
            for c in range(len(cases)):
                t_mean, t_logz = tolerances(dtype, beta, h[c], J[c])
                assert_close(d.mean[c], ref["mean"][c], t_mean, f"default-compiled mean {cases[c]}")
                assert_close(d.log_z[c], ref["log_z"][c], t_logz, f"default-compiled log_z {cases[c]}")
    # the log-space fallback is exercised by some extreme inputs, and never by benign ones
    assert any(stable[c, b] for c in EXTREME for b in BETAS), stable
    assert not any(stable[c, b] for c in BENIGN for b in BETAS), stable


def test_extreme_scales_with_masks_float32():
    """Per-query masks at extreme scale. The engine keeps one cross kernel per J for every
    query and pins masked spins (cancelling their couplings in the fields), so the
    rounding of the masked spins' couplings enters: the bound uses the active fields and
    all of J."""
    dtype = np.float32
    rng = np.random.default_rng(301)
    n = 10
    cases = [(1e3, 1e2), (1e-3, 1e2), (30.0, 30.0), (1.0, None)]
    for a, b in cases:
        h0, J = random_model(rng, n, h_scale=a, J_scale=b)
        h = (h0 * rng.uniform(0.5, 1.5, size=(5, n))).astype(dtype)
        J = J.astype(dtype)
        mask = query_masks(rng, (5,), n)
        for beta in (0.5, 2.0):
            m = solve(h, J, beta, mask)
            ref = reference(h, J, beta, mask)
            for q in range(5):
                t_mean, t_logz = tolerances(dtype, beta, h[q] * mask[q], J)
                assert_close(m.mean[q], ref["mean"][q], t_mean, f"mean {(a, b)} beta={beta} q={q}")
                assert_close(m.log_z[q], ref["log_z"][q], t_logz, f"log_z {(a, b)} beta={beta} q={q}")
            assert np.all(np.asarray(m.mean)[~mask] == 0)


# ---- causal -------------------------------------------------------------------------------


def causal_reference(h, J, beta, mask=None):
    """Query i of h [B, T, T] sees spins 0..i (and the mask [B, 1 or T, T])."""
    B, T, _ = h.shape
    Jb = np.broadcast_to(J, (B, T, T, T))
    mean, corr, log_z = np.zeros((B, T, T)), np.zeros((B, T, T, T)), np.zeros((B, T))
    for b in range(B):
        for i in range(T):
            L = i + 1
            mk = None if mask is None else np.broadcast_to(mask, (B, T, T))[b, i, :L]
            r = brute_force(h[b, i, :L], Jb[b, i, :L, :L], beta, mk)
            mean[b, i, :L], corr[b, i, :L, :L], log_z[b, i] = r["mean"], r["corr"], r["log_z"]
    return dict(mean=mean, corr=corr, log_z=log_z)


def test_causal_matches_prefix_brute_force():
    rng = np.random.default_rng(400)
    B, T = 2, 8  # Exact groups prefix lengths in buckets (8), (7), (5, 6), (1..4)
    h = rng.normal(size=(B, T, T)) * 2
    _, J = random_model(rng, T, J_scale=0.8)
    for beta in BETAS:
        m = solve(h, J, beta, causal=True)
        ref = causal_reference(h, J, beta)
        assert m.mean.shape == (B, T, T) and m.log_z.shape == (B, T)
        assert_close(m.mean, ref["mean"], F64_TOL, f"mean beta={beta}")
        assert_close(m.log_z, ref["log_z"], F64_TOL * (1 + np.abs(ref["log_z"])), f"log_z beta={beta}")
        # strictly-future spins have marginal exactly 0
        assert np.all(np.asarray(m.mean)[:, np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0)


def test_causal_with_padding_mask_and_J_per_batch():
    rng = np.random.default_rng(401)
    B, T = 3, 6
    h = rng.normal(size=(B, T, T))
    J = np.stack([random_model(rng, T, J_scale=1.0)[1] for _ in range(B)])[:, None]  # [B, 1, T, T]
    pad = np.ones((B, 1, T), bool)
    pad[1, 0, 4:] = False  # right padding
    pad[2, 0, :2] = False  # left padding: queries 0 and 1 see nothing
    for beta in (0.5, 2.0):
        m = solve(h, J, beta, pad, causal=True)
        ref = causal_reference(h, J, beta, pad)
        assert_close(m.mean, ref["mean"], F64_TOL, f"mean beta={beta}")
        assert_close(m.log_z, ref["log_z"], F64_TOL * (1 + np.abs(ref["log_z"])), f"log_z beta={beta}")


def test_causal_float32_dtype_and_accuracy():
    """float32 in, float32 out (mean, corr, log Z); one benign sequence and one at |h|, |J| ~ 30."""
    rng = np.random.default_rng(402)
    T = 3
    h = np.stack([rng.normal(size=(T, T)) * 3, rng.normal(size=(T, T)) * 30]).astype(np.float32)
    J = np.stack([random_model(rng, T, J_scale=s)[1] for s in (1.0, 30.0)])[:, None].astype(np.float32)
    m = solve(h, J, 1.0, corr=True, causal=True)
    assert m.mean.dtype == jnp.float32 and m.log_z.dtype == jnp.float32 and m.corr.dtype == jnp.float32
    ref = causal_reference(h, J, 1.0)
    for b in range(2):
        for i in range(T):
            # the bound of the longest prefix of the bucket (pinned spins' couplings included)
            t_mean, t_logz = tolerances(np.float32, 1.0, h[b, i], J[b, 0])
            assert_close(m.mean[b, i], ref["mean"][b, i], t_mean, f"mean b={b} i={i}")
            assert_close(m.corr[b, i], ref["corr"][b, i], t_mean, f"corr b={b} i={i}")
            assert_close(m.log_z[b, i], ref["log_z"][b, i], t_logz, f"log_z b={b} i={i}")


# ---- configuration, errors, registry -------------------------------------------------------


def test_too_many_spins_raises_and_names_alternatives():
    n = 11
    model = IsingModel(np.zeros(n), np.zeros((n, n)))
    with pytest.raises(TooManySpinsError) as info:
        Exact(max_n=10).marginals(model)
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert "n = 11" in msg and "max_n = 10" in msg
    for alt in ("Banded", "MeanField", "Gibbs", "SQA"):
        assert alt in msg
    assert isingattn.TooManySpinsError is TooManySpinsError


def test_registry_builds_exact_and_rejects_unknown_names():
    # (the registry-built engine is run against brute force in
    # test_extreme_scales_finite_and_accurate[float32])
    eng = inference.get("exact")
    assert isinstance(eng, Exact) and eng == Exact()
    eng = inference.get("exact", max_n=4, corr=True)
    assert isinstance(eng, Exact) and eng.max_n == 4 and eng.corr
    assert "exact" in inference.available()
    with pytest.raises(TooManySpinsError):
        eng.marginals(IsingModel(np.zeros(5), np.zeros((5, 5))))
    with pytest.raises(ValueError, match="unknown engine 'no-such-engine'.*exact"):
        inference.get("no-such-engine")


def test_h_only_model_closed_form_and_spin_flip_symmetry():
    """Two closed forms (DESIGN.md §2): J = 0 gives <s_j> = tanh(β h_j) and
    log Z = Σ log(2 cosh β h_j); h = 0 gives <s> = 0 by spin-flip symmetry."""
    rng = np.random.default_rng(601)
    n, beta = 8, 1.7  # the shapes of test_property_random_scales_shared_J: no new compile
    h = rng.normal(size=(4, n)) * 2
    m = solve(h, np.zeros((n, n)), beta)
    np.testing.assert_allclose(np.asarray(m.mean), np.tanh(beta * h), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(m.log_z), np.log(2 * np.cosh(beta * h)).sum(-1), rtol=1e-12)
    _, J = random_model(rng, n, J_scale=1.0)
    m = solve(np.zeros((4, n)), J, beta)
    np.testing.assert_allclose(np.asarray(m.mean), 0.0, rtol=0, atol=1e-12)


def test_one_exact_size_limit_is_quoted_everywhere():
    """Exact's default, compare's exact reference, the distribution's exact draws and fit's
    automatic choice share EXACT_MAX_N, and the README and the engines page quote it."""
    import pathlib

    import isingattn.compare as cmp
    import isingattn.learn.exact_ml as ml
    from isingattn.inference.exact import EXACT_MAX_N

    root = pathlib.Path(__file__).resolve().parents[3]
    assert Exact().max_n == EXACT_MAX_N and cmp.EXACT_MAX_N is EXACT_MAX_N and ml.MAX_LOG2_COST == EXACT_MAX_N
    assert ml.exact_engine(EXACT_MAX_N) is not None and ml.exact_engine(EXACT_MAX_N + 1, J=np.ones((25, 25))) is None
    for doc, start in (("README.md", "| `from isingattn.inference import Exact`"), ("docs/engines.md", "| `Exact()`")):
        row = next(line for line in (root / doc).read_text().splitlines() if line.startswith(start))
        assert f"n ≤ {EXACT_MAX_N}" in row and "~" not in row, (doc, row)

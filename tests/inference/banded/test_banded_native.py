"""The native CPU kernel of Banded (inference/native.cc) against independent references: float64
enumeration of all 2^n states (values, and autodiff through the enumeration for gradients), with causal
prefixes, several J groups, row counts that are not a multiple of the kernel's block of 8 rows, w = 1 to 8,
float32 and float64; its underflow bound against the float64 truth; and how it is enabled and disabled.
test_banded_vjp.py and test_banded.py run their blocked-path comparisons through both the native kernel and
the XLA graph (the ``banded_kernel`` fixture)."""

import math
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.inference.banded import Banded, native as banded_native
from isingattn.inference.banded.blocked import blocked_layout
from isingattn.inference.exact.engine import LOST_MASS_TOL

native_only = pytest.mark.skipif(banded_native._library() is None, reason="no C++ compiler: no native kernel")


def band_J(rng, G, n, w, scale):
    """[G, 1, 1, n, n] symmetric, zero diagonal, zero beyond distance w (one J per group)."""
    A = rng.normal(size=(G, n, n)) * scale
    d = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    J = np.where((d >= 1) & (d <= w), (A + np.swapaxes(A, 1, 2)) / 2, 0.0)
    return J[:, None, None]


def brute(h, J, beta, causal):
    """float64 enumeration: mean and log Z of p(s) ∝ exp(β (h·s + Σ_{j<k} J_jk s_j s_k)) per model;
    causal: model i keeps spins 0..i (the others are removed, not free)."""
    n = h.shape[-1]
    S = 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1)  # [2^n, n]
    S = jnp.asarray(S)
    if causal:
        keep = jnp.asarray(np.tril(np.ones((n, n))))  # [query, spin]
        h = h * keep
        J = J * keep[:, :, None] * keep[:, None, :]
    e = beta * (jnp.einsum("...j,cj->...c", h, S) + 0.5 * jnp.einsum("cj,...jk,ck->...c", S, J, S))
    log_z = jax.nn.logsumexp(e, axis=-1)
    p = jnp.exp(e - log_z[..., None])
    mean = jnp.einsum("...c,cj->...j", p, S)
    if causal:
        mean = mean * keep
        log_z = log_z - (n - 1 - jnp.arange(n)) * math.log(2.0)  # the removed spins were summed as free ones
    return mean, log_z


def case(seed, G, B, n, w, causal, h_scale=1.5, J_scale=0.6):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(G, B, n, n) if causal else (G, B, n)) * h_scale
    J = band_J(rng, G, n, w, J_scale)
    J = J if causal else J[:, 0]
    return jnp.asarray(h), jnp.asarray(J), jnp.asarray(0.9)


def objective(fn, c):
    return lambda h, J, beta: jnp.sum(c * fn(h, J, beta)[0]) + 0.3 * jnp.sum(jnp.sin(fn(h, J, beta)[1]))


@native_only
@pytest.mark.parametrize("G,B,n,w,causal", [(3, 15, 9, 3, True),  # 135 rows per group: 16 blocks of 8 plus 7,
                                            # dealt to the kernel's 16 slices per group (the first gets two)
                                            (2, 5, 10, 8, True),
                                            (2, 3, 8, 1, True),
                                            (3, 5, 11, 5, False)])
def test_values_and_gradients_match_enumeration(G, B, n, w, causal):
    """mean, log Z and the gradient (h, J, β) of Σ c·mean + 0.3 Σ sin(log Z) equal float64 enumeration
    (autodiff through it) to 1e-10; masked entries of causal models are exactly 0."""
    h, J, beta = case(G * 100 + n, G, B, n, w, causal)
    layout = blocked_layout(h.shape, J.shape, w, causal, None, False)
    mine = lambda h, J, beta: banded_native.native(h, J, beta, w, causal, layout)
    ref = lambda h, J, beta: brute(h, J, beta, causal)
    (m, lz, lost), (mr, lzr) = mine(h, J, beta), ref(h, J, beta)
    np.testing.assert_allclose(m, mr, rtol=0, atol=1e-12)
    np.testing.assert_allclose(lz, lzr, rtol=1e-13, atol=1e-11)
    assert np.all(np.asarray(lost) < math.log(LOST_MASS_TOL))
    c = jnp.asarray(np.random.default_rng(n).normal(size=h.shape))
    g, gr = (jax.grad(objective(f, c), argnums=(0, 1, 2))(h, J, beta) for f in (mine, ref))
    if B * n > 16 * 8:  # more blocks than slices: the threads take them in any order, the bits stay the same
        again = jax.grad(objective(mine, c), argnums=(0, 1, 2))(h, J, beta)
        assert all(np.array_equal(a, b) for a, b in zip(g, again))
    dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    inside = (dist >= 1) & (dist <= w)
    gr = (gr[0], jnp.where(inside, gr[1], 0.0), gr[2])  # the band's couplings are the only parameters
    gJ_sym = (g[1] + jnp.swapaxes(g[1], -1, -2)) / 2  # enumeration sees J_jk and J_kj separately
    for name, a, b in zip(("h", "J", "beta"), (g[0], gJ_sym, g[2]), gr):
        b = (b + jnp.swapaxes(b, -1, -2)) / 2 if name == "J" else b
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10 * (1 + float(np.abs(b).max())), err_msg=name)
    if causal:
        iu = np.triu_indices(n, 1)
        assert np.all(np.asarray(m)[..., iu[0], iu[1]] == 0)


@native_only
def test_float32_matches_float64_enumeration():
    h, J, beta = case(5, 2, 3, 12, 6, True)
    layout = blocked_layout(h.shape, J.shape, 6, True, None, False)
    m, lz, _ = banded_native.native(h.astype(jnp.float32), J.astype(jnp.float32), beta.astype(jnp.float32), 6, True,
                                    layout)
    mr, lzr = brute(h, J, beta, True)
    assert m.dtype == jnp.float32
    np.testing.assert_allclose(m, mr, rtol=0, atol=2e-5)
    np.testing.assert_allclose(lz, lzr, rtol=2e-6, atol=2e-5)


@native_only
def test_float32_accuracy_does_not_degrade_with_the_window():
    """The sums over the 2^(w-1) state pairs of a step accumulate in double: at w = 10, float32 means stay
    within a few float32 ulps of float64 enumeration (summed in float32 they were off by 6e-6)."""
    n, w = 12, 10
    rng = np.random.default_rng(120)
    h = rng.normal(size=(16, n))
    J = band_J(rng, 1, n, w, 0.3)[0, 0, 0]
    mr, lzr = brute(jnp.asarray(h), jnp.asarray(J), 0.9, False)
    m, lz, _ = banded_native.native(jnp.asarray(h, jnp.float32), jnp.asarray(J, jnp.float32), jnp.float32(0.9), w,
                                    False, blocked_layout(h.shape, J.shape, w, False, None, False))
    np.testing.assert_allclose(np.asarray(m, np.float64), mr, rtol=0, atol=5e-7)
    np.testing.assert_allclose(np.asarray(lz, np.float64), lzr, rtol=0, atol=5e-6)


@native_only
def test_underflow_bound_flags_every_inaccurate_float32_row():
    """float32 with |h| ~ 60 and |J| ~ 25 competing: every row whose bound passes (lost below LOST_MASS_TOL)
    is accurate against float64 enumeration, some rows fail it, and the engine (which recomputes those
    rows by the sweep's log-space path) is accurate for every row."""
    n, w = 10, 4
    h, J, beta = case(11, 2, 4, n, w, True, h_scale=60.0, J_scale=25.0)
    h32, J32, b32 = (x.astype(jnp.float32) for x in (h, J, beta))
    m, _, lost = banded_native.native(h32, J32, b32, w, True, blocked_layout(h.shape, J.shape, w, True, None, False))
    mr, _ = brute(h, J, beta, True)
    passed = np.asarray(lost) <= math.log(LOST_MASS_TOL)
    err = np.abs(np.asarray(m, np.float64) - np.asarray(mr)).max(-1)
    assert (~passed).any() and passed.any()
    assert np.all(err[passed] < 1e-3)
    eng = Banded(bandwidth=w).marginals(IsingModel(h32, J32, beta=b32, causal=True))
    np.testing.assert_allclose(eng.mean, mr, rtol=0, atol=1e-3)


@native_only
def test_underflow_bound_holds_where_a_message_max_is_far_below_one():
    """Strong couplings (|J| ~ 25) against moderate fields (|h| ~ 5) in float32: a stored message's max can
    be far below 1, and a kernel that multiplied it before rescaling flushed products the bound did not
    count (found by a scan over random models: this one was off by 2.9e-2 with the bound passing). Every
    row whose bound passes must be accurate against float64 enumeration, and so must the engine's answer."""
    rng = np.random.default_rng(57)
    n, w = int(rng.integers(10, 17)), int(rng.integers(1, 5))
    assert (n, w) == (10, 3)
    h = (rng.normal(size=(16, n)) * 5.0).astype(np.float32)
    J = band_J(rng, 1, n, w, 25.0)[0, 0, 0].astype(np.float32)
    beta = np.float32(0.9)
    mr, _ = brute(jnp.asarray(h, jnp.float64), jnp.asarray(J, jnp.float64), float(beta), False)
    m, _, lost = banded_native.native(jnp.asarray(h), jnp.asarray(J), jnp.asarray(beta), w, False,
                                      blocked_layout(h.shape, J.shape, w, False, None, False))
    passed = np.asarray(lost) <= math.log(LOST_MASS_TOL)
    err = np.abs(np.asarray(m, np.float64) - np.asarray(mr)).max(-1)
    assert passed.any() and np.all(err[passed] < 1e-3)
    eng = Banded(bandwidth=w).marginals(IsingModel(jnp.asarray(h), jnp.asarray(J), beta=jnp.asarray(beta)))
    np.testing.assert_allclose(eng.mean, mr, rtol=0, atol=1e-3)


@native_only
def test_engine_uses_it_under_jit_and_vmap(monkeypatch):
    """Banded on a CPU runs the native kernel (counted), under jit and vmap alike, and the values equal
    enumeration."""
    calls = []
    real = banded_native.native
    monkeypatch.setattr(banded_native, "native", lambda *a: calls.append(1) or real(*a))
    h, J, beta = case(3, 1, 3, 9, 3, True)
    f = jax.jit(jax.vmap(lambda hh: Banded(bandwidth=3).marginals(IsingModel(hh, J[0, 0, 0], beta=beta, causal=True)).mean))
    got = f(h[0])
    assert calls
    np.testing.assert_allclose(got, brute(h[0], J[0, 0, 0], beta, True)[0], rtol=0, atol=1e-12)


def test_disabled_by_environment_and_falls_back_when_it_cannot_build(monkeypatch, tmp_path):
    """ISINGATTN_NATIVE=0 turns the kernel off silently; a compiler that fails gives one RuntimeWarning
    that names the fallback; either way ``applies`` is False and Banded still answers (the XLA path)."""
    h, J, beta = case(4, 1, 2, 9, 3, True)
    try:
        monkeypatch.setenv("ISINGATTN_NATIVE", "0")
        banded_native._library.cache_clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert banded_native._library() is None and not banded_native.applies(h, beta, 3)
        monkeypatch.delenv("ISINGATTN_NATIVE")
        monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
        monkeypatch.setenv("ISINGATTN_CACHE", str(tmp_path))
        banded_native._library.cache_clear()
        with pytest.warns(RuntimeWarning, match="blocked XLA path runs instead"):
            assert banded_native._library() is None
        m = Banded(bandwidth=3).marginals(IsingModel(h[0], J[0], beta=beta, causal=True)).mean
        np.testing.assert_allclose(m, brute(h[0], J[0], beta, True)[0], rtol=0, atol=1e-12)
    finally:
        monkeypatch.undo()
        banded_native._library.cache_clear()
        banded_native._library()


def test_a_build_says_so_in_one_line(monkeypatch, capsys):
    """While the kernel compiles, one line on stderr names it and the time it took; a failed build ends
    that line with "failed" and the error passes on (to _library's warning)."""
    monkeypatch.setattr(banded_native, "_build", lambda so, cxx: None)
    banded_native._build_saying_so(banded_native.Path("/x/native/k.so"), "c++")
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.splitlines()) == 1 and out.err.endswith("\n")
    assert "compiling the native Banded kernel" in out.err and " done (" in out.err and "/x/native" in out.err

    def broken(so, cxx):
        raise OSError("no compiler")

    monkeypatch.setattr(banded_native, "_build", broken)
    with pytest.raises(OSError, match="no compiler"):
        banded_native._build_saying_so(banded_native.Path("/x/native/k.so"), "c++")
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.endswith(" failed\n")


@native_only
@pytest.mark.slow
def test_first_use_prints_the_notice_once(tmp_path):
    """A fresh cache: the first process that runs Banded compiles the kernel and says so in one line; the
    next one loads it silently (the compiled library is in the cache)."""
    import subprocess
    import sys

    code = ("import numpy as np; from isingattn import IsingModel; from isingattn.inference.banded import Banded; "
            "print(Banded(bandwidth=2).marginals(IsingModel(np.zeros(5), np.diag(np.ones(4), 1) + "
            "np.diag(np.ones(4), -1))).log_z)")
    env = {**os.environ, "ISINGATTN_CACHE": str(tmp_path)}
    env.pop("ISINGATTN_NATIVE", None)
    first, second = (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                    timeout=600) for _ in range(2))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    notice = [line for line in first.stderr.splitlines() if "native Banded kernel" in line]
    assert len(notice) == 1 and "compiling" in notice[0] and " done (" in notice[0], first.stderr
    assert "native Banded kernel" not in second.stderr
    assert list((tmp_path / "native").glob("banded_native-*.so"))
    # log Z of the open 5-chain at beta = 1, J = 1: 2 (2 cosh 1)^4
    assert float(first.stdout.strip()) == pytest.approx(math.log(2 * (2 * math.cosh(1.0)) ** 4), rel=1e-6)

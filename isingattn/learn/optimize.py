"""L-BFGS with an optional L1 term (OWL-QN), for the deterministic fits (exact ML, PLM).

Minimizes ``F(x) = f(x) + l1 Σ_k mask_k |x_k|`` over a flat parameter vector ``x [P]``,
with ``f`` smooth and given with its gradient, ``fg(x, args) -> (f, g)``. Without L1 this
is L-BFGS (Nocedal & Wright, Alg. 7.4/7.5: the two-loop recursion over the last ``memory``
pairs, initial scaling ``sᵀy / yᵀy``) with a backtracking Armijo line search; with L1 it is
OWL-QN (Andrew & Gao 2007): the pseudo-gradient, the direction kept in its orthant, and
steps projected onto the orthant of the current point.

The iterations run inside ``jax.lax.while_loop`` in chunks of ``chunk`` iterations, one
jitted program per objective, so a long fit updates its tqdm bar between chunks. ``fg`` is
a static argument: pass a hashable object (a module-level function, or a NamedTuple of
hashable settings with ``__call__``), and the arrays it reads in ``args``, so that repeated
fits of the same shape reuse the compiled program.

Stopping: ``‖pseudo-gradient‖_∞ ≤ tol`` (converged), ``max_iter`` iterations, or a line
search that finds no decrease in 40 halvings (the objective's rounding floor); only the
first counts as converged.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["minimize", "OptState"]

C1 = 1e-4  # Armijo's sufficient-decrease constant
MAX_HALVINGS = 40
RUNNING, CONVERGED, STALLED = 0, 1, 2


class OptState(NamedTuple):
    x: jax.Array  # [P]
    f: jax.Array  # smooth part at x
    g: jax.Array  # its gradient [P]
    S: jax.Array  # [m, P] steps
    Y: jax.Array  # [m, P] gradient changes
    rho: jax.Array  # [m] 1 / yᵀs
    k: jax.Array  # pairs stored so far
    it: jax.Array  # iterations done
    evals: jax.Array  # objective evaluations
    status: jax.Array  # RUNNING, CONVERGED or STALLED
    gnorm: jax.Array  # ‖pseudo-gradient‖_∞ at x


def _l1(x, l1, mask):
    return l1 * jnp.sum(mask * jnp.abs(x))


def _pseudo_gradient(x, g, l1, mask):
    """The minimum-norm subgradient of ``f + l1 |x|`` (``g`` where ``mask`` is 0)."""
    lm = l1 * mask
    at_zero = jnp.where(g + lm < 0, g + lm, jnp.where(g - lm > 0, g - lm, 0.0))
    return jnp.where(x > 0, g + lm, jnp.where(x < 0, g - lm, at_zero))


def _two_loop(q, S, Y, rho, k):
    """``H q`` with the L-BFGS inverse-Hessian estimate of the stored pairs."""
    m = S.shape[0]
    valid_n = jnp.minimum(k, m)

    def first(j, c):
        q, alpha = c
        idx = (k - 1 - j) % m
        a = jnp.where(j < valid_n, rho[idx] * (S[idx] @ q), 0.0)
        return q - a * Y[idx], alpha.at[j].set(a)

    q, alpha = lax.fori_loop(0, m, first, (q, jnp.zeros((m,), q.dtype)))
    new = (k - 1) % m
    yy = Y[new] @ Y[new]
    gamma = jnp.where(k > 0, (S[new] @ Y[new]) / jnp.where(yy > 0, yy, 1.0),
                      1.0 / jnp.maximum(1.0, jnp.max(jnp.abs(q))))
    r = gamma * q

    def second(j, r):
        jj = m - 1 - j  # oldest first
        idx = (k - 1 - jj) % m
        b = rho[idx] * (Y[idx] @ r)
        return jnp.where(jj < valid_n, r + S[idx] * (alpha[jj] - b), r)

    return lax.fori_loop(0, m, second, r)


def init_state(x0: np.ndarray, memory: int) -> OptState:
    """The state before the first evaluation (``f = inf``): the first iteration of
    :func:`_iterate` evaluates ``x0`` itself (a step of length 0, always accepted), so the
    objective appears once in the compiled program."""
    P, dt = x0.shape[0], x0.dtype
    z = np.zeros((memory, P), dt)
    i0 = np.zeros((), np.int32)
    inf = np.asarray(np.inf, dt)
    return OptState(x0, inf, np.zeros_like(x0), z, z, np.zeros((memory,), dt), i0, i0, i0, i0, inf)


def _iterate(state: OptState, args, l1, mask, tol, max_iter, fg, steps: int) -> OptState:
    dt = state.x.dtype
    eps = jnp.finfo(dt).eps
    stop_at = jnp.minimum(state.it + steps, max_iter)

    def cond(st):
        return (st.it < stop_at) & (st.status == RUNNING)

    def body(st):
        fresh = st.evals == 0  # x0 not evaluated yet: this iteration only evaluates it
        F = st.f + _l1(st.x, l1, mask)
        pg = _pseudo_gradient(st.x, st.g, l1, mask)
        d = -_two_loop(pg, st.S, st.Y, st.rho, st.k)
        pen = (mask > 0) & (l1 > 0)  # the L1 coordinates
        d = jnp.where(pen & (d * pg >= 0), 0.0, d)  # OWL-QN: their directions stay in the descent orthant
        slope = pg @ d
        bad = ~(slope < 0)  # not a descent direction: restart from the steepest descent
        d = jnp.where(bad, -pg / jnp.maximum(1.0, jnp.max(jnp.abs(pg))), d)
        d = jnp.where(fresh, 0.0, d)
        k = jnp.where(bad, 0, st.k)
        orth = jnp.where(st.x != 0, jnp.sign(st.x), -jnp.sign(pg))  # the orthant of the step (L1 coordinates)

        # Backtracking from t = 1, halving; one evaluation per trial (the objective is traced once)
        def ls_cond(c):
            return (~c[4]) & (c[5] < MAX_HALVINGS)

        def ls_body(c):
            t = c[0] * 0.5
            xt = st.x + t * d
            xt = jnp.where(pen & (xt * orth < 0), 0.0, xt)  # ...and so do their steps
            ft, gt = fg(xt, args)
            Ft = ft + _l1(xt, l1, mask)
            # Armijo, with slack for the rounding of F itself (float32 sums of many terms)
            ok = jnp.isfinite(Ft) & (fresh | (Ft <= F + C1 * (pg @ (xt - st.x)) + 4 * eps * jnp.abs(F)))
            return t, xt, ft, gt, ok, c[5] + 1

        c0 = (jnp.asarray(2.0, dt), st.x, st.f, st.g, jnp.asarray(False), jnp.zeros((), jnp.int32))
        t, xt, ft, gt, ok, n_ls = lax.while_loop(ls_cond, ls_body, c0)
        s, y = xt - st.x, gt - st.g
        sy = s @ y
        store = ok & ~fresh & (sy > eps * (y @ y))  # keep the pair only with positive curvature
        idx = k % st.S.shape[0]
        S = jnp.where(store, st.S.at[idx].set(s), st.S)
        Y = jnp.where(store, st.Y.at[idx].set(y), st.Y)
        rho = jnp.where(store, st.rho.at[idx].set(1.0 / jnp.where(store, sy, 1.0)), st.rho)
        k = k + store.astype(k.dtype)
        x, f, g = jnp.where(ok, xt, st.x), jnp.where(ok, ft, st.f), jnp.where(ok, gt, st.g)
        gn = jnp.max(jnp.abs(_pseudo_gradient(x, g, l1, mask)), initial=0.0)
        status = jnp.where(gn <= tol, CONVERGED, jnp.where(ok, RUNNING, STALLED)).astype(jnp.int32)
        return OptState(x, f, g, S, Y, rho, k, st.it + jnp.where(fresh, 0, 1).astype(jnp.int32), st.evals + n_ls,
                        status, gn)

    state = state._replace(status=jnp.where(state.gnorm <= tol, CONVERGED, state.status).astype(jnp.int32))
    return lax.while_loop(cond, body, state)


_iterate_jit = jax.jit(_iterate, static_argnames=("fg", "steps"))
# For objectives that cost microseconds (PLM from pattern counts), compiling is the whole first call:
# XLA:CPU's unoptimized backend with its elemental emitters compiles the L-BFGS program in well under
# half the time, and the run is a few ms either way. GEMM-bound objectives run several times slower so.
_FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
_iterate_fast_jit = jax.jit(_iterate, static_argnames=("fg", "steps"), compiler_options=_FAST_COMPILE)


def minimize(fg, x0, args, *, tol: float, max_iter: int, l1: float = 0.0, l1_mask=None, memory: int = 10,
             chunk: int = 10, progress=None, desc: str = "fit", cheap: bool = False):
    """Minimize ``f(x) + l1 Σ mask|x|`` (module docstring).

    Args:
        fg: hashable ``fg(x [P], args) -> (f [], g [P])``.
        x0: ``[P]`` starting point (its dtype is the optimizer's).
        args: a pytree of arrays passed to ``fg``.
        tol: stop when the pseudo-gradient's largest entry is at most ``tol``.
        l1_mask: ``[P]`` 1 where the L1 term applies (default: everywhere).
        progress: tqdm bar (True or None: only on a terminal; False: never; :mod:`isingattn.progress`).
        cheap: ``fg`` costs little to run (no large GEMM): on a CPU backend the program is compiled
            for a quick compile rather than a quick run.
    Returns:
        ``(x [P], g [P], info)``: the point and the smooth part's gradient there (numpy), and ``iterations``, ``evaluations``, ``grad_norm``, ``objective`` and
        ``converged`` (host values) and ``status`` (``"converged"``, ``"max_iter"`` or
        ``"stalled"``: the line search found no decrease).
    """
    from isingattn.progress import bar as progress_bar

    x0 = np.asarray(x0)
    dt = x0.dtype
    mask = np.ones_like(x0) if l1_mask is None else np.asarray(l1_mask, dt)
    l1_a, tol_a, it_max = np.asarray(l1, dt), np.asarray(tol, dt), np.asarray(max_iter, np.int32)
    state = init_state(x0, memory)
    iterate = _iterate_fast_jit if cheap and jax.default_backend() == "cpu" else _iterate_jit
    bar = progress_bar(total=max_iter, desc=desc, progress=progress, leave=False, mininterval=1.0)
    done = 0
    try:
        while True:
            state = iterate(state, args, l1_a, mask, tol_a, it_max, fg=fg, steps=chunk)
            it, status, gn = int(state.it), int(state.status), float(state.gnorm)
            bar.update(it - done)
            bar.set_postfix(grad=f"{gn:.2e}", refresh=False)
            done = it
            if status != RUNNING or it >= max_iter:
                break
    finally:
        bar.close()
    name = {CONVERGED: "converged", STALLED: "stalled"}.get(status, "max_iter")
    x = np.asarray(state.x)
    objective = float(state.f) + float(l1 * np.sum(mask * np.abs(x)))
    return x, np.asarray(state.g), {"iterations": it, "evaluations": int(state.evals), "grad_norm": gn, "objective": objective,
                     "converged": status == CONVERGED, "status": name}

"""Calibration of a DQA anneal (:mod:`isingattn.inference.dqa.engine`, module docstring): the
search for the programmed scales whose effective β matches the target
(:func:`calibrate_scales`), and the range of fields and couplings the Trotterized
circuit represents without aliasing (:func:`representable_range`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["calibrate_scales", "representable_range"]


def calibrate_scales(run, fit, keys, beta, kap, M, N, dt, use_secant: bool = True, x_max=None, x0_max=None):
    """Search the program scales ``c_h``, ``c_J`` (per model) whose effective β matches ``beta``.

    Works in ``x = log c``, ``y = log β_eff``: start from theory (``c_h = β/2κ``,
    ``c_J = β/4κ``), then a slope-1 fixed-point step, then secant steps. The response
    ``β_eff(c)`` is not monotone (the fast-anneal correction saturates and then oscillates
    as ``c`` grows, module docstring): where the secant slope is ≤ 0 the search steps back.
    Steps are clipped to a factor 4 (64 for the first). Every evaluated candidate is scored by
    ``|y_h - y*| + |y_J - y*|`` and the best is returned, so a bad step never makes the
    result worse than the theory scales. One evaluation (a full evolution) per key.
    ``use_secant=False`` (used for noisy fits from shots, whose secant slopes are unreliable)
    keeps slope-1 fixed-point steps throughout.

    ``x_max [2, M]``: upper bounds on ``log c_h``, ``log c_J`` (the circuit's aliasing-free
    range, :func:`representable_range`); ``x0_max [2, M]``: upper bounds on the starting
    point (the peak of the response): theory scales for ``β·max|h| ≫ 1`` program fields the
    circuit cannot represent, whose aliased response has either sign.

    ``run(c_h, c_J) -> probs [M, N]``; ``fit(key, probs) -> PLFit``.
    Returns ``probs [M, N]`` of the chosen candidate, its scales ``c_h, c_J [M]`` and its
    fitted ``(β_h, β_J, converged)`` ``[3, M]``.
    """
    ystar = jnp.log(beta)
    lim = math.log(4.0)

    def logb(b):  # NaN: no information (zero feature); -inf: β_eff ≤ 0 (overdriven)
        return jnp.where(jnp.isfinite(b), jnp.where(b > 0, jnp.log(jnp.where(b > 0, b, 1.0)), -jnp.inf), jnp.nan)

    def dist(y):
        return jnp.where(jnp.isnan(y), 0.0, jnp.where(jnp.isneginf(y), jnp.inf, jnp.abs(y - ystar)))

    def body(c, xs):
        x, xp, yp, best_err, best_x, best_p, best_b = c
        key, first = xs
        probs = run(jnp.exp(x[0]), jnp.exp(x[1]))
        f = fit(key, probs)
        y = jnp.stack([logb(f.beta_h), logb(f.beta_J)])  # [2, M]
        err = dist(y[0]) + dist(y[1])
        better = err < best_err
        best_err = jnp.where(better, err, best_err)
        best_x = jnp.where(better, x, best_x)
        best_p = jnp.where(better[:, None], probs, best_p)
        best_b = jnp.where(better, jnp.stack([f.beta_h, f.beta_J, f.converged.astype(dt)]), best_b)
        dx = x - xp
        ok = jnp.abs(dx) > 1e-9
        g = jnp.where(ok, (y - yp) / jnp.where(ok, dx, 1.0), 1.0)
        g = jnp.where(jnp.isfinite(g), g, 1.0) if use_secant else jnp.ones_like(g)
        # past the peak of β_eff(c) (g ≤ 0): jump to the other side of the previous point
        secant = jnp.where(g > 0, (ystar - y) / jnp.clip(g, 0.25, 2.0), -1.5 * dx)
        step = jnp.where(first, ystar - y, secant)
        # The first step starts from the theory scales, which for longer anneals are small
        # (β_eff linear in c there, so the fixed-point step is accurate): allow a factor 64.
        lim_e = jnp.where(first, 3 * lim, lim)
        step = jnp.where(jnp.isneginf(y), -math.log(2.0), step)  # β_eff ≤ 0: back off
        # From shots (calibrate_from="samples"), an estimate within 2 SE of 0 says only that
        # β_eff is small: step up as far as allowed (the first theory scales of a long
        # anneal are far too small, and a noisy negative fit must not read as overdriven).
        se = jnp.stack([f.se_h, f.se_J])
        b = jnp.stack([f.beta_h, f.beta_J])
        step = jnp.where(jnp.isfinite(se) & (b < 2 * se) & (beta > 2 * se), lim_e, step)
        step = jnp.clip(jnp.nan_to_num(step, nan=0.0, posinf=lim_e, neginf=-lim_e), -lim_e, lim_e)
        return (jnp.minimum(x + step, x_max), x, y, best_err, best_x, best_p, best_b), None

    # theory scales; a schedule with κ ≤ 0 (no fast-anneal response) starts from c = β
    c_h0, c_J0 = (beta / (2 * kap), beta / (4 * kap)) if kap > 1e-12 else (beta, beta)
    x0 = jnp.stack([jnp.full((M,), jnp.log(c_h0), dt), jnp.full((M,), jnp.log(c_J0), dt)])
    x_max = jnp.full((2, M), jnp.inf, dt) if x_max is None else x_max
    x0 = jnp.minimum(x0, x_max if x0_max is None else jnp.minimum(x0_max, x_max))
    init = (x0, x0, jnp.zeros_like(x0), jnp.full((M,), jnp.inf, dt), x0, jnp.zeros((M, N), dt), jnp.zeros((3, M), dt))
    first = jnp.arange(keys.shape[0]) == 0
    (_, _, _, _, best_x, best_p, best_b), _ = jax.lax.scan(body, init, (keys, first))
    return best_p, jnp.exp(best_x[0]), jnp.exp(best_x[1]), best_b


def representable_range(phase, mix):
    """How large a programmed field or coupling the circuit represents, from its angles.

    Returns ``(a_max, a_h, a_J)`` (floats). ``a_max = π / (2 max_l phase_l)``: a field
    ``|h'| ≥ a_max`` (or coupling ``|J'|``; a flip changes the energy by ``2|h'|``) turns its
    phase by ``≥ π`` per step, so the Trotterized circuit aliases it (the response oscillates
    and changes sign). ``a_h`` / ``a_J``: the programmed amplitude in ``(0, a_max]`` where
    the response of one spin in a field (of two spins with a coupling), ``atanh ⟨s⟩``
    (``atanh ⟨s s'⟩``), peaks: past it a larger programmed scale lowers the effective β.
    Computed by simulating the one- and two-qubit circuits in numpy (cheap, exact).
    """
    phase, mix = np.asarray(phase, np.float64), np.asarray(mix, np.float64)
    pmax = float(np.max(np.abs(phase)))
    a_max = math.pi / (2 * pmax) if pmax > 0 else math.inf
    grid = np.geomspace(1e-4, 1.0, 401) * (a_max if np.isfinite(a_max) else 1e4)

    def response(E):  # E [G, N] energies of the 1- or 2-qubit basis states -> atanh of the observable
        N = E.shape[1]
        psi = np.full(E.shape, N ** -0.5, np.complex128)
        for l in range(len(mix) + 1):
            psi = psi * np.exp(-1j * phase[l] * E)
            if l < len(mix):
                c, si = math.cos(mix[l]), 1j * math.sin(mix[l])
                rx = np.array([[c, si], [si, c]])
                m = rx if N == 2 else np.kron(rx, rx)
                psi = psi @ m.T
        p = np.abs(psi) ** 2
        obs = p @ (np.array([1.0, -1.0]) if N == 2 else np.array([1.0, -1.0, -1.0, 1.0]))
        return np.arctanh(np.clip(obs / p.sum(1), -1 + 1e-15, 1 - 1e-15))

    a = grid[:, None]
    a_h = float(grid[np.argmax(response(np.concatenate([-a, a], 1)))])  # E(s) = -a s
    a_J = float(grid[np.argmax(response(np.concatenate([-a, a, a, -a], 1)))])  # E(s, s') = -a s s'
    return a_max, a_h, a_J

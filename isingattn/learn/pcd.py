"""Persistent contrastive divergence (stochastic maximum likelihood, Tieleman 2008), ``method="pcd"``.

The gradient of the average negative log-likelihood is ``β`` times the moment mismatch,
``β (⟨s⟩_model - ⟨s⟩_data)`` for ``h`` and ``β (⟨s_i s_j⟩_model - ⟨s_i s_j⟩_data)`` for the
couplings (:mod:`isingattn.learn.exact_ml`). PCD estimates the model's moments from
``num_chains`` persistent chains: each step advances the chains by ``sweeps`` moves of a
sampling engine's own kernel at the current parameters (never restarting them), takes the
chains' moments, and makes one Adam step (learning rate cosine-decayed to a tenth) on the
penalized gradient (``+ 2 l2 θ + l1 sign(w)``). The final parameters are the average of the
iterates over the last ``average`` fraction of the steps (Polyak–Ruppert), which removes
most of the chains' noise.

Samplers (each the engine's pure kernel, blackjax style; nothing here sweeps or computes an
energy itself):

* ``"gibbs"``: :func:`~isingattn.inference.mcmc.gibbs_kernel.gibbs_sweep` (systematic scan for
  all pairs, the colour classes of the graph otherwise);
* ``"pt"``: :func:`~isingattn.inference.mcmc.pt_kernel.pt_step`, ``num_replicas`` replicas on a
  geometric ladder from ``β`` down to ``hot · β`` with the deterministic even–odd swaps; the
  moments are the cold replica's;
* ``"swendsen-wang"``: :func:`~isingattn.inference.mcmc.swendsen_wang_kernel.swendsen_wang_sweep`,
  which needs ``J ≥ 0``: the couplings are then kept non-negative (projected after every
  step), i.e. a ferromagnet is fitted.

The chains start at samples of the data drawn with the data's weights. Everything random
comes from ``key`` (step ``t`` uses ``fold_in(key, t)``), so a fit is reproducible, and the
steps run in jitted chunks between which the tqdm bar moves.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from isingattn import validate as V
from isingattn.errors import IsingInputError
from isingattn.sparse import CouplingGraph, SparseCouplings
from isingattn.learn.data import Data
from isingattn.learn.exact_ml import coupling_mask, moment_gap, start

__all__ = ["SAMPLERS", "fit_pcd"]

SAMPLERS = ("gibbs", "pt", "swendsen-wang")


class PCDConfig(NamedTuple):
    """The static part of a PCD run (hashable: one compiled chunk per configuration)."""

    n: int
    graph: Optional[CouplingGraph]
    sampler: str
    sweeps: int
    classes: Optional[tuple]
    num_steps: int
    window_start: int  # first step of the averaging window
    chunk: int
    learning_rate: float


def _optimizer(cfg: "PCDConfig"):
    return optax.adam(optax.cosine_decay_schedule(cfg.learning_rate, cfg.num_steps, alpha=0.1))


class PCDState(NamedTuple):
    x: jax.Array  # [P] parameters (h, w)
    opt: tuple  # Adam's state
    chains: tuple  # the sampler's state
    x_sum: jax.Array  # [P] sum of the iterates in the averaging window
    m_sum: jax.Array  # [n] sum of the chains' ⟨s⟩ there
    c_sum: jax.Array  # [E] sum of the chains' ⟨s_i s_j⟩ there
    stat: jax.Array  # [] sum of the sampler's diagnostic (flip rate or swap acceptance) there


def _couplings(cfg: PCDConfig, w, i, j):
    if cfg.graph is not None:
        return SparseCouplings(cfg.graph, w)
    n = cfg.n
    return jnp.zeros((n, n), w.dtype).at[i, j].set(w).at[j, i].set(w)


def _advance(cfg: PCDConfig, chains, key, h, J, beta, betas, t):
    """``sweeps`` moves of the chains; returns (chains, cold spins [C, n], diagnostic [])."""
    from isingattn.inference.mcmc.gibbs_kernel import GibbsState, gibbs_sweep
    from isingattn.inference.mcmc.pt_kernel import pt_step
    from isingattn.inference.mcmc.swendsen_wang_kernel import SwendsenWangState, swendsen_wang_sweep

    stat = 0.0
    for k in range(cfg.sweeps):
        kk = jax.random.fold_in(key, k)
        if cfg.sampler == "gibbs":
            st, info = gibbs_sweep(kk, GibbsState(chains), h, J, beta, cfg.classes)
            chains, stat = st.spins, stat + jnp.mean(info.flip_rate)
        elif cfg.sampler == "swendsen-wang":
            st, info = swendsen_wang_sweep(kk, SwendsenWangState(chains), h, J, beta)
            chains, stat = st.spins, stat + jnp.mean(info.flip_rate)
        else:  # pt
            chains, info = pt_step(kk, chains, h, J, betas, (t * cfg.sweeps + k) % 2, cfg.classes)
            stat = stat + jnp.mean(info.accept_prob)
    cold = chains.spins[0] if cfg.sampler == "pt" else chains
    return chains, cold, stat / cfg.sweeps


def _chunk(cfg: PCDConfig, state: PCDState, t0, key, args):
    optimizer = _optimizer(cfg)
    mean_d, pair_d, i, j, beta, betas, l1, l2, mask = args
    n = cfg.n

    def step(st: PCDState, t):
        x = st.x
        h, w = x[:n], x[n:]
        J = _couplings(cfg, w, i, j)
        chains, s, stat = _advance(cfg, st.chains, jax.random.fold_in(key, t), h, J, beta, betas, t)
        m = jnp.mean(s, axis=0)
        c = jnp.mean(s[:, i] * s[:, j], axis=0) if cfg.graph is not None else ((s.T @ s) / s.shape[0])[i, j]
        g = beta * jnp.concatenate([m - mean_d, c - pair_d]) + 2 * l2 * x + l1 * mask * jnp.sign(x)
        upd, opt = optimizer.update(g, st.opt, x)
        xn = x + upd
        if cfg.sampler == "swendsen-wang":  # its cluster measure needs J ≥ 0
            xn = jnp.where(mask > 0, jnp.maximum(xn, 0.0), xn)
        win = (t >= cfg.window_start).astype(x.dtype)
        new = PCDState(xn, opt, chains, st.x_sum + win * xn, st.m_sum + win * m, st.c_sum + win * c,
                       st.stat + win * stat)
        live = t < cfg.num_steps  # the last chunk may run past the end: those steps change nothing
        return jax.tree_util.tree_map(lambda a, b: jnp.where(live, a, b), new, st), None

    state, _ = jax.lax.scan(step, state, t0 + jnp.arange(cfg.chunk))
    return state


_chunk_jit = jax.jit(_chunk, static_argnames=("cfg",))


@functools.partial(jax.jit, static_argnames=("cfg", "num_chains", "num_replicas"))
def _start(cfg: PCDConfig, key, x0, spins, p, i, j, num_chains: int, num_replicas: int) -> PCDState:
    """The first state: chains at data rows drawn with the data's weights (``fold_in(key, 0)``)."""
    from isingattn.energy import energy

    dt, n = x0.dtype, cfg.n
    rows = jax.random.choice(jax.random.fold_in(key, 0), spins.shape[0], (num_chains,), p=p)
    s0 = spins[rows].astype(dt)  # [C, n]
    if cfg.sampler == "pt":
        from isingattn.inference.mcmc.pt_kernel import NONE, PTState

        s0 = jnp.broadcast_to(s0, (num_replicas,) + s0.shape)
        E0 = energy(x0[:n], _couplings(cfg, x0[n:], i, j), s0)
        chains = PTState(s0, E0, jnp.full(s0.shape[:-1], NONE, jnp.int32))
    else:
        chains = s0
    z = jnp.zeros
    return PCDState(x0, _optimizer(cfg).init(x0), chains, z(x0.shape, dt), z((n,), dt), z((i.shape[0],), dt), z((), dt))


def fit_pcd(data: Data, *, beta: float, l1: float, l2: float, tol: Optional[float], key, progress,
            sampler: str = "gibbs", num_steps: int = 1000, num_chains: int = 256, sweeps: int = 1,
            learning_rate: float = 0.05, average: float = 0.25, num_replicas: int = 8, hot: float = 0.25,
            init=None, chunk: int = 50):
    """``method="pcd"`` (module docstring). Returns ``(h, w, info)``.

    Options: ``sampler`` (``"gibbs"``, ``"pt"``, ``"swendsen-wang"``), ``num_steps``,
    ``num_chains``, ``sweeps`` (moves per step), ``learning_rate`` (Adam's, at the start),
    ``average`` (the fraction of final steps averaged), ``num_replicas`` and ``hot`` (PT's
    ladder: ``β`` down to ``hot·β``), ``init`` (``[n + E]`` starting parameters; default the
    independent-spin fit), ``chunk`` (steps per jitted call)."""
    from isingattn.progress import bar as progress_bar
    from isingattn.prng import check_key

    o = 'fit(method="pcd")'
    if key is None:
        raise IsingInputError(f"{o} samples, so it needs key=jax.random.key(...) (the same key gives the same fit).")
    key = check_key(key, owner=o)
    V.choice("sampler", sampler, SAMPLERS, owner=o)
    num_steps = V.positive_int("num_steps", num_steps, owner=o)
    num_chains = V.positive_int("num_chains", num_chains, owner=o)
    sweeps = V.positive_int("sweeps", sweeps, owner=o)
    learning_rate = V.positive_float("learning_rate", learning_rate, owner=o)
    average = V.float_in("average", average, 0.0, 1.0, lo_open=True, owner=o)
    num_replicas = V.positive_int("num_replicas", num_replicas, owner=o)
    hot = V.float_in("hot", hot, 0.0, 1.0, hi_open=True, owner=o)
    chunk = V.positive_int("chunk", chunk, owner=o)
    if sampler == "pt" and num_replicas < 2:
        raise IsingInputError(f"{o}: parallel tempering needs num_replicas >= 2; got {num_replicas}.")
    tol = 0.02 if tol is None else tol
    pattern, dt = data.pattern, data.dtype
    n, E = pattern.n, pattern.E
    graph = pattern.graph
    classes = None
    if graph is not None and sampler in ("gibbs", "pt"):
        from isingattn.inference.mcmc.coloring import color_classes

        classes = color_classes(SparseCouplings(graph, np.zeros((E,), dt)))
    window_start = int(num_steps * (1 - average))
    cfg = PCDConfig(n, graph, sampler, sweeps, classes, num_steps, window_start, min(chunk, num_steps), learning_rate)
    i, j = pattern.edges[:, 0], pattern.edges[:, 1]
    x0 = start(data, beta, init, o)
    mask = coupling_mask(pattern, dt)
    if sampler == "swendsen-wang":
        x0 = np.where(mask > 0, np.maximum(x0, 0.0), x0).astype(dt)
    state = _start(cfg, key, x0, data.spins, data.p, i, j, num_chains, num_replicas)
    b = np.asarray(beta, dt)
    betas = (beta * np.geomspace(1.0, hot, num_replicas) if sampler == "pt" else np.asarray([beta])).astype(dt)
    args = (data.mean.astype(dt), data.pair.astype(dt), i, j, b, betas, np.asarray(l1, dt), np.asarray(l2, dt), mask)
    k_run = jax.random.fold_in(key, 1)
    bar = progress_bar(total=num_steps, desc=f"fit pcd ({sampler})", progress=progress, leave=False, mininterval=1.0)
    try:
        for t0 in range(0, num_steps, cfg.chunk):
            state = _chunk_jit(cfg, state, np.int32(t0), k_run, args)
            jax.block_until_ready(state.x)
            bar.update(min(cfg.chunk, num_steps - t0))
    finally:
        bar.close()
    count = num_steps - window_start
    x = np.asarray(state.x_sum) / count
    m, c = np.asarray(state.m_sum) / count, np.asarray(state.c_sum) / count
    err = moment_gap(data, m, c)
    stat = float(state.stat) / count
    g = beta * np.concatenate([m - data.mean, c - data.pair]) + 2 * l2 * x
    info = {"iterations": num_steps, "grad_norm": float(np.max(np.abs(g))) / beta, "moment_error": err,
            "moment_error_kind": "chains", "converged": err <= tol, "tol": tol, "status": "done", "sampler": sampler,
            "num_chains": num_chains, "sweeps": sweeps, "averaged_steps": count,
            ("swap_rate" if sampler == "pt" else "flip_rate"): stat}
    return x[:n], x[n:], info

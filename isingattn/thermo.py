"""Thermodynamics of one Ising model against the inverse temperature, from any engine.

:func:`scan` runs an engine at each β of a grid and returns, per spin where it says so:

* ``log_z`` (the engine's ``Marginals.log_z``; NaN from engines without one) and the free
  energy per spin ``f = -log Z / (β n)``;
* the energy per spin ``u = ⟨E⟩ / n`` and the heat capacity per spin
  ``c = β² Var(E) / n = β² ∂² log Z / ∂β² / n``;
* ``⟨|m|⟩`` with ``m = Σ_j s_j / n`` and the susceptibility ``χ = β n (⟨m²⟩ - ⟨|m|⟩²)``.

Samplers give every quantity from their samples (importance-weighted for AIS), with a
standard error from the effective sample size of the energy trace (Gibbs: its chains;
independent reads and AIS: the reads, or the weights' ESS). Engines without samples (Exact,
Banded, MeanField) give ``u = -∂ log Z/∂β / n`` by automatic differentiation and ``c`` by a
central difference of ``u`` in β; their ``⟨|m|⟩`` and ``χ`` are NaN (marginals do not hold
the distribution of ``m``). :func:`plot` draws the curves, with an exact curve over them.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import atomic
from isingattn.energy import energy
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.model import IsingModel

QUANTITIES = ("log_z", "free_energy", "energy", "heat_capacity", "abs_magnetization", "susceptibility")


class Scan(NamedTuple):
    """The result of :func:`scan`: ``betas [B]``, and for each name of :data:`QUANTITIES` an
    array ``[B]`` with its standard error ``<name>_se [B]`` (0 where exact, NaN where not
    known). ``n`` is the number of active spins; ``engine`` names the engine."""

    betas: np.ndarray
    n: int
    engine: str
    log_z: np.ndarray
    log_z_se: np.ndarray
    free_energy: np.ndarray
    free_energy_se: np.ndarray
    energy: np.ndarray
    energy_se: np.ndarray
    heat_capacity: np.ndarray
    heat_capacity_se: np.ndarray
    abs_magnetization: np.ndarray
    abs_magnetization_se: np.ndarray
    susceptibility: np.ndarray
    susceptibility_se: np.ndarray


def _at(model: IsingModel, beta: float) -> IsingModel:
    return IsingModel(model.h, model.J, jnp.asarray(beta, model.dtype), model.mask)


def _chains_of(engine, S: int) -> int:
    """Chain-major draws of ``num_chains`` chains (Gibbs), else one chain of independent reads
    (SQA, dimod, and AIS, whose chains give one draw each)."""
    C = getattr(engine, "num_chains", 1)
    return C if isinstance(C, int) and C > 0 and S % C == 0 and S // C >= 2 else 1


def _ess(x, chains: int, weights) -> float:
    """ESS of a per-draw statistic ``x [S]``: Kish's for weighted draws, else the chains' ESS."""
    if weights is not None:
        return float(1.0 / np.sum(np.square(weights)))
    from isingattn.diagnostics import effective_sample_size

    y = np.asarray(x, np.float64).reshape(chains, -1)
    if np.ptp(y) == 0:
        return float(y.size)
    e = float(effective_sample_size(jnp.asarray(y)))
    return e if np.isfinite(e) and e > 0 else 1.0


def _from_samples(model: IsingModel, beta, samples, weights, chains):
    h, J = model.masked_parameters()
    s = np.asarray(samples, np.float64)
    n = int(np.sum(np.abs(s[0]) > 0)) or model.n
    E = np.asarray(energy(h, J, jnp.asarray(s, model.dtype)), np.float64)
    m = s.sum(-1) / n
    p = np.full(len(E), 1.0 / len(E)) if weights is None else np.asarray(weights, np.float64)
    mean = lambda x: float(np.sum(p * x))
    ess = _ess(E, chains, weights)
    u = mean(E)
    c = beta**2 * (mean(E**2) - u**2)
    am = mean(np.abs(m))
    chi = beta * n * (mean(m**2) - am**2)
    se = lambda x: float(np.sqrt(max(mean(x**2) - mean(x) ** 2, 0.0) / ess))
    ess_m = _ess(np.abs(m), chains, weights)
    se_m = lambda x: float(np.sqrt(max(mean(x**2) - mean(x) ** 2, 0.0) / ess_m))
    return dict(energy=(u / n, se(E) / n), heat_capacity=(c / n, beta**2 * se((E - u) ** 2) / n),
                abs_magnetization=(am, se_m(np.abs(m))),
                susceptibility=(chi, beta * n * se_m((np.abs(m) - am) ** 2)))


def scan(model: IsingModel, engine, betas: Sequence[float], *, key: Optional[jax.Array] = None,
         progress: bool = False) -> Scan:
    """``engine`` (an Engine, or a registry name) on ``model`` (one unbatched model; its own β
    is replaced) at each of ``betas [B]`` (β > 0). ``key`` is required by sampling engines;
    β ``i`` gets ``fold_in(key, i)``. Returns a :class:`Scan`."""
    from isingattn.engine import get

    from isingattn.engine import Engine

    engine = get(engine) if isinstance(engine, str) else engine
    if not isinstance(engine, Engine):
        raise IsingTypeError(f"thermo.scan: engine must be an Engine or a registry name such as 'exact'; got "
                             f"{type(engine).__name__} {engine!r}.")
    if not isinstance(model, IsingModel) or model.batch_shape:
        raise IsingInputError("thermo.scan takes one unbatched IsingModel; index a batched model first.")
    try:
        betas = np.asarray(betas, np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise IsingInputError(f"betas must be a non-empty list of finite β > 0; got {betas!r}.") from None
    if betas.size == 0 or not np.all(np.isfinite(betas)) or np.any(betas <= 0):
        raise IsingInputError(f"betas must be a non-empty list of finite β > 0; got {betas.tolist()!r}.")
    if engine.needs_key and key is None:
        raise IsingInputError(f"{type(engine).__name__} samples: pass key=jax.random.key(0) to thermo.scan.")
    act = model.active()
    n = model.n if act is None else int(np.sum(np.asarray(act)))
    if n == 0:
        raise IsingInputError("thermo.scan: the model has no active spin (its mask is all False), so there are no "
                              "per-spin quantities to compute.")
    rows = {q: np.full(len(betas), np.nan) for q in QUANTITIES}
    ses = {q: np.full(len(betas), np.nan) for q in QUANTITIES}
    from isingattn.progress import bar

    for i, b in enumerate(bar(betas, desc=f"thermo.scan {type(engine).__name__}", progress=progress)):
        k = None if key is None else jax.random.fold_in(key, i)
        out = engine.marginals(_at(model, b), key=k)
        if out.log_z is not None:
            rows["log_z"][i] = float(out.log_z)
            ses["log_z"][i] = float(out.info.get("log_z_se", 0.0 if out.info.get("log_z_kind") == "exact" else np.nan))
            rows["free_energy"][i] = -rows["log_z"][i] / (b * n)
            ses["free_energy"][i] = ses["log_z"][i] / (b * n)
        if out.samples is not None:
            S = out.samples.shape[-2]
            weights = out.info.get("weights")
            for q, (v, se) in _from_samples(model, b, out.samples.reshape(S, -1), weights,
                                            _chains_of(engine, S)).items():
                rows[q][i], ses[q][i] = v, se
        elif out.log_z is not None:
            rows["energy"][i], rows["heat_capacity"][i] = _exact_energy(engine, model, b, k, n)
            ses["energy"][i] = ses["heat_capacity"][i] = 0.0 if out.info.get("log_z_kind") == "exact" else np.nan
    return Scan(betas=betas, n=n, engine=type(engine).__name__,
                **{f: rows[f] for f in QUANTITIES}, **{f + "_se": ses[f] for f in QUANTITIES})


def _exact_energy(engine, model, beta, key, n):
    """``(u, c)`` per spin from log Z's derivatives in β: ``u = -∂ log Z/∂β / n`` by autodiff,
    ``c = -β² ∂u/∂β`` by a central difference of ``u`` (step 1e-4 β: the derivative of a
    derivative, where an engine may have no second-order autodiff)."""
    def u(b):
        return -float(jax.grad(lambda bb: engine.marginals(_at(model, bb), key=key).log_z)(jnp.asarray(b, model.dtype))) / n

    try:
        d = 1e-4 * beta
        return u(beta), -(beta**2) * (u(beta + d) - u(beta - d)) / (2 * d)
    except Exception:  # an engine whose log Z has no derivative in β: leave the row NaN
        return np.nan, np.nan


def plot(scans: Sequence[Scan], exact: Optional[dict] = None, path: Optional[str] = None,
         quantities: Sequence[str] = ("heat_capacity", "abs_magnetization", "free_energy"), title: str = ""):
    """One panel per quantity against β: points with error bars per scan, and the curves of
    ``exact`` (``{label: (betas, {quantity: values})}``, e.g. Kaufman's finite-lattice and
    Onsager's infinite-lattice values) drawn over them. Saved to ``path`` when given.

    Scans labelled ``"<engine> <system>"`` (e.g. ``"AIS L=16"``) share a colour per system and
    a marker per engine; an exact curve whose label ends in the same ``<system>`` gets that
    system's colour (others are black), so that many engines on several sizes stay readable.
    One legend, beside the last panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    labels = {"log_z": "log Z / n", "free_energy": "free energy per spin f = -log Z / (βn)", "energy": "energy per spin u",
              "heat_capacity": "heat capacity per spin c", "abs_magnetization": "⟨|m|⟩",
              "susceptibility": "susceptibility χ"}
    split = lambda label: (label.split(" ", 1) + [""])[:2]  # "AIS L=16" -> ("AIS", "L=16")
    systems = list(dict.fromkeys(split(sc.engine)[1] or f"n={sc.n}" for sc in scans))
    engines = list(dict.fromkeys(split(sc.engine)[0] for sc in scans))
    colour = {sys_: plt.get_cmap("tab10")(i % 10) for i, sys_ in enumerate(systems)}
    marker = {eng: "osD^vP*X"[i % 8] for i, eng in enumerate(engines)}
    fig, axes = plt.subplots(1, len(quantities), figsize=(4.6 * len(quantities) + 1.8, 3.8), squeeze=False)
    for ax, q in zip(axes[0], quantities):
        for sc in scans:
            y, e = getattr(sc, q), getattr(sc, q + "_se")
            if q == "log_z":
                y, e = y / sc.n, e / sc.n
            if np.all(np.isnan(y)):
                continue
            eng, sys_ = split(sc.engine)
            ax.errorbar(sc.betas, y, yerr=np.where(np.isfinite(e), e, 0), fmt=marker[eng], ms=3.5, capsize=2,
                        color=colour[sys_ or f"n={sc.n}"], mfc="none", alpha=0.85)
        for name, (b, vals) in (exact or {}).items():
            if q in vals:
                sys_ = split(name)[1]
                ax.plot(b, vals[q], "-", lw=1.2, color=colour.get(sys_, "k"), alpha=0.9)
        ax.set(xlabel="β (K = βJ)", ylabel=labels.get(q, q))
    ns = {split(sc.engine)[1] or f"n={sc.n}": sc.n for sc in scans}
    handles = [Line2D([], [], color=colour[s_], lw=1.2, label=f"{s_} (n={ns[s_]})") for s_ in systems]
    handles += [Line2D([], [], color="0.3", ls="none", marker=marker[e_], mfc="none", label=e_) for e_ in engines]
    handles += [Line2D([], [], color=colour.get(split(name)[1], "k"), lw=1.2, label=name) for name in (exact or {})
                if split(name)[1] not in colour]
    axes[0, -1].legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5),
                       title="lines: exact; points: engines", title_fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path:
        atomic.savefig(fig, path, dpi=120)
    return fig

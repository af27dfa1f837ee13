"""Digitized simulation of diabatic quantum annealing (DQA), as a statevector (DESIGN.md §3).

The circuit. Start in ``|+⟩^n`` (the ground state of ``H_x``) and apply the Trotterized
evolution of ``H(t) = A(t) H_x + B(t) H_z`` for ``0 ≤ t ≤ τ``, with ``H_x = -Σ_j X_j`` and
``H_z = diag(E(z))`` the Ising energy of every basis state (computed once with the shared
``isingattn.energy`` functions). ``num_steps = K`` steps of ``dt = τ/K``, with ``A``, ``B``
taken at the step midpoints ``s_k = (k + ½)/K``:

* ``order=1`` (Lie):    ``U_k = exp(-i dt A_k H_x) · exp(-i dt B_k H_z)``
* ``order=2`` (Strang): ``U_k = exp(-i dt/2 B_k H_z) · exp(-i dt A_k H_x) · exp(-i dt/2 B_k H_z)``
  (adjacent half phases are merged, so both orders cost one phase and one mixer per step).

``exp(-i θ H_x) = Π_j (cos θ + i sin θ X_j)`` is ``RX(-2θ)`` on every qubit. Measuring in
the computational basis samples ``z`` from ``|ψ(z)|²``. Qubit ``j`` is spin ``j`` and is
bit ``n-1-j`` of the basis index, ``|0⟩ ↔ s = +1``: the ordering of
:func:`isingattn.energy.spin_table`, so ``E`` is ``energy(h, J, spin_table(n))``.

How the mixer is applied. Measured on a loaded 2-core CPU (n = 12, 64 models, 32 steps,
complex64; one phase + one mixer per step; the phases alone take 0.15 s):

====================================================  =======
RX on every qubit as ...                               time
====================================================  =======
one 2×2 contraction per qubit (reshape, einsum)        0.86 s
blocks of 3-4 qubits, ``RX^{⊗k}`` (8×8 / 16×16)        0.33 s
two GEMMs, ``RX^{⊗n/2}`` on each half (64×64)          0.66 s
fast Walsh–Hadamard, ``H^{⊗n} diag H^{⊗n}``            1.48 s
flip of a size-2 axis (``x[..., ::-1, ...]``)          XLA:CPU compile > 5 min
====================================================  =======

so the mixer contracts blocks of ``_RX_BLOCK = 4`` qubits with the 16×16 matrix
``RX^{⊗4}`` (fewer memory passes than per-qubit, far fewer flops than the half GEMMs).

Which distribution a fast anneal gives. To second order in ``τ`` (Magnus expansion; the
order-``τ³`` terms are imaginary and do not change ``|ψ|²``),

    P(z) = 2^-n [1 - κ Σ_j (E(z) - E(z^(j)))] + O(τ⁴),    κ = 2 ∫∫_{t1>t2} A(t1) B(t2) dt1 dt2,

where ``z^(j)`` is ``z`` with spin ``j`` flipped; ``κ = τ²/12`` for the linear schedule,
and for the circuit itself ``κ = 2 Σ_k θ_k Σ_{l≤k} φ_l`` (mixer angles ``θ``, phases ``φ``
applied before mixer ``k``; :func:`kappa`). Since ``Σ_j (E(z) - E(z^(j))) = -2 h·s -
4 Σ_{j<k} J_jk s_j s_k``, this is the high-temperature (linearized) Boltzmann form
``2^-n (1 + β_h h·s + β_J Σ J s s)`` with ``β_h = 2κ``, ``β_J = 4κ``: the fields and the
couplings come out at different temperatures, and programming ``h' = 2h`` equalizes them.

Calibration (``calibrate=True``). Program ``h' = c_h h`` and ``J' = c_J J`` (per model).
Theory gives ``c_h = β/(2κ)``, ``c_J = β/(4κ)``, so that ``P ≈ 2^-n (1 - β E)``; then
``calibration_steps`` corrections (a fixed-point step, then secant steps on ``log c``;
:func:`~isingattn.inference.dqa.calibration.calibrate_scales`) use the maximum-pseudo-likelihood β of the distribution
(``calibrate_from="state"``: the exact ``|ψ|²`` of the simulator, noise-free; ``"samples"``:
``num_shots`` fresh shots per correction, as one would on hardware). The best candidate
evaluated is kept, so calibration never does worse than its starting point.

The programmed problem stays in the range the circuit represents
(:func:`representable_range`): a field ``|h'| ≥ a_max = π / (2 max phase)`` turns its phase
by ``π`` or more per Trotter step, so the circuit aliases it and its response oscillates
and changes sign (at ``τ = 12``, 32 steps: ``a_max ≈ 4.3``). Where ``β·max|h|`` is large
the theory scales would program such fields (``|h| = 10³`` at ``β = 1``: ``|h'| ≈ 40``,
marginals of the wrong sign), so the start is capped at the peak of the one-spin response
(``|h'| ≈ 1``) and every step at ``a_max`` (the same for ``J``); the scales stay in the
model's units. The target is then out of reach and the result is flagged.
``info["calibrated"]`` is True only where the pseudo-likelihood fit of the exact ``|ψ|²``
converged, its β is within ``calibration_rtol`` of the target, and (for ``n ≤ kl_max_n``)
the KL to Boltzmann is no worse than the uniform distribution's; every other model is named
in a :class:`DQACalibrationWarning`. An uncalibrated anneal programs ``h`` and ``J`` as
given; beyond ``a_max`` it warns (:class:`DQARangeWarning`, ``info["representable"]``).

Where the fast-anneal picture holds, and where it does not. ``1 - βE`` is only the
first-order expansion of ``exp(-βE)``: it needs ``β·max|E| ≲ 1`` (``info["beta_E_max"]``),
and the marginals keep an ``O(β²)`` bias (``⟨s_j⟩ = βh_j`` for ``1 - βE`` against
``βh_j + β²(Jh)_j + O(β³)`` for Boltzmann). At fixed ``τ`` the reachable β is bounded: to
first order in the mixer ``2^n P(z) - 1 = -2 Σ_j ∫ A(t) sin(ΔE_j(z) Φ(t)) dt`` with
``Φ(t) = c ∫_0^t B``, so ``|2^n P - 1| ≤ nτ`` and β_eff(c) rises, peaks and then falls as the
programmed scale ``c`` grows. Measured on unit-scale dense n=10 models
(``benchmarks/dqa.py``): at ``τ = 1`` β_eff peaks near 0.15 (fields) / 0.22 (couplings), so
β = 0.5 or 1 cannot be reached (``info["calibrated"]`` False, a warning); at ``τ = 12``
the peak is ≈ 3.6 / 1.5. There the anneal is no longer "fast" (the linear response is
``dβ_h/dc ≈ 3.4``, not ``2κ = 24``), yet the calibrated distribution is much closer to
Boltzmann: on dense n=12 models at β = 1, KL(p_β ‖ |ψ|²) ≈ 0.06 at ``τ = 12`` against ≈ 1.8
at ``τ = 1`` (uniform: 3.6), and at β = 0.3 the marginal bias is ≈ 0.04 β² against ≈ 0.19 β².
Hence the default ``tau = 12``. Uncalibrated long anneals of the unscaled model approach
its ground state rather than a Boltzmann distribution. The bias is exactly computable
here (``|ψ|²`` is known) and ``info`` reports it through the KL divergences.

Effective temperature: :func:`~isingattn.inference.dqa.pseudolikelihood.pseudo_likelihood_beta`
(maximum pseudo-likelihood ``β_h``, ``β_J``, with sandwich standard errors for iid shots).
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from isingattn.inference.dqa.calibration import calibrate_scales, representable_range
from isingattn.inference.dqa.circuit import (
    MAX_N,
    check_config,
    measure,
    evolve,
    schedule_coefficients,
)
from isingattn.inference.dqa.pseudolikelihood import PLFit, pseudo_likelihood_beta
from jax.scipy.special import logsumexp

from isingattn.energy import coupling_energy, field_energy, spin_table, spins_from_index
from isingattn.engine import ConvergenceWarning, Engine, jit_call
from isingattn.errors import TooManySpinsError
from isingattn.fluctuation import sample_marginals
from isingattn.marginals import Marginals
from isingattn.model import IsingModel
from isingattn.validate import plain


SCHEDULES = ("linear",)



class DQAWarning(ConvergenceWarning):
    """DQA's samples do not follow the distribution asked for (a subclass says why)."""


class DQACalibrationWarning(DQAWarning):
    """Calibration failed for some models (``info["calibrated"]`` False): the effective β
    is off target, its fit did not converge, or the KL is worse than uniform."""


class DQARangeWarning(DQAWarning):
    """An uncalibrated anneal programs fields or couplings beyond the circuit's
    aliasing-free range (``info["representable"]`` False, :func:`representable_range`)."""


# ---- schedule -----------------------------------------------------------------------------


def _energy_tables(model: IsingModel):
    """Field and coupling energies of every basis state, ``[M, 2^n]`` each (model batch
    flattened), from the shared energy functions; a shared ``J`` is evaluated once."""
    n = model.n
    h, J = model.masked_parameters()
    S = spin_table(n, model.dtype)  # [N, n]
    batch = model.batch_shape
    Eh = field_energy(h[..., None, :], S)  # [hbatch..., N]
    EJ = coupling_energy(J[..., None, :, :], S)  # [Jbatch..., N]
    flat = lambda x: jnp.broadcast_to(x, batch + (2**n,)).reshape(-1, 2**n)
    return flat(Eh), flat(EJ)


def _simulate(key, Eh, EJ, beta, h, J, *, n, phase, mix, kap, num_shots, calibrate, calibration_steps,
              calibrate_from, kl_max_n, calibration_rtol, ranges):
    """The whole DQA run for ``M`` models.  Eh, EJ: [M, N]; h [M, n], J [M, n, n] (masked);
    ``ranges = (a_max, a_h, a_J)`` from :func:`representable_range`."""
    M, N = Eh.shape
    dt = Eh.dtype
    a_max, a_h, a_J = ranges
    # largest programmed |h|, |J| per model at scale 1: the calibration keeps c·s ≤ a_max
    s_h, s_J = jnp.max(jnp.abs(h), -1), jnp.max(jnp.abs(J), (-2, -1))
    log_over = lambda a, s: jnp.where(s > 0, jnp.log(a / jnp.where(s > 0, s, 1.0)), jnp.inf).astype(dt)
    S_table = spin_table(n, dt)
    beta = jnp.asarray(beta, dt)
    keys = jax.random.split(key, calibration_steps + 2)

    def run(ch, cJ):
        psi = evolve(ch[:, None] * Eh + cJ[:, None] * EJ, phase, mix)
        p = jnp.real(psi * jnp.conj(psi)).astype(dt)
        return p / jnp.sum(p, -1, keepdims=True)

    def shots(k, probs):
        idx = measure(k, probs, num_shots)
        return spins_from_index(idx, n, dt)  # [M, S, n]

    def fit_state(probs, max_iter=30):
        # started at the target: calibrated distributions are close to it
        return pseudo_likelihood_beta(h, J, S_table, probs, init=jnp.stack([beta, beta]), max_iter=max_iter)

    if calibrate:
        fit = ((lambda k, p: fit_state(p)) if calibrate_from == "state" else
               (lambda k, p: pseudo_likelihood_beta(h, J, shots(k, p))))
        probs, ch, cJ, bst = calibrate_scales(run, fit, keys[:-1], beta, kap, M, N, dt, use_secant=calibrate_from == "state",
                                        x_max=jnp.stack([log_over(a_max, s_h), log_over(a_max, s_J)]),
                                        x0_max=jnp.stack([log_over(a_h, s_h), log_over(a_J, s_J)]))
    else:
        ch = jnp.ones((M,), dt)
        cJ = jnp.ones((M,), dt)
        probs = run(ch, cJ)
    samples = shots(keys[-1], probs)
    fit = pseudo_likelihood_beta(h, J, samples)
    if calibrate and calibrate_from == "state":  # already fitted during the calibration
        state_fit = PLFit(bst[0], bst[1], jnp.full((M,), jnp.nan, dt), jnp.full((M,), jnp.nan, dt),
                          jnp.zeros((M,), dt), bst[2] > 0.5)
    else:
        state_fit = fit_state(probs)
    E = Eh + EJ
    info = {
        "beta_h": fit.beta_h, "beta_J": fit.beta_J, "beta_h_se": fit.se_h, "beta_J_se": fit.se_J,
        "beta_h_state": state_fit.beta_h, "beta_J_state": state_fit.beta_J,
        "pl_converged": fit.converged & state_fit.converged,
        "scale_h": ch, "scale_J": cJ, "kappa": jnp.full((M,), kap, dt),
        "beta_E_max": beta * jnp.max(jnp.abs(E), -1),
        # the programmed problem within the circuit's aliasing-free range (always, calibrated)
        "representable": (ch * s_h <= a_max * (1 + 1e-6)) & (cJ * s_J <= a_max * (1 + 1e-6)),
    }
    if calibrate:
        # from shots the scales are only as good as a fit to num_shots shots: allow 4 SE more
        noise = (lambda se: 4 * jnp.nan_to_num(se)) if calibrate_from == "samples" else (lambda se: 0.0)
        ok = lambda b, se: ~jnp.isfinite(b) | (jnp.abs(b - beta) <= calibration_rtol * beta + noise(se))
        # a fit that did not converge says nothing about β_eff: never calibrated
        info["calibrated"] = ok(state_fit.beta_h, fit.se_h) & ok(state_fit.beta_J, fit.se_J) & state_fit.converged
    if n <= kl_max_n:
        logb = -beta * E
        logb = logb - logsumexp(logb, -1, keepdims=True)
        logq = jnp.log(jnp.maximum(probs, jnp.finfo(dt).tiny))
        pb = jnp.exp(logb)
        info["kl"] = jnp.sum(pb * (logb - logq), -1)  # KL(Boltzmann_β ‖ |ψ|²)
        info["kl_reverse"] = jnp.sum(probs * (logq - logb), -1)  # KL(|ψ|² ‖ Boltzmann_β)
        info["kl_uniform"] = jnp.sum(pb * logb, -1) + n * jnp.log(2.0)  # KL(Boltzmann_β ‖ uniform), a baseline
        if calibrate:  # worse than a sampler that ignores the model: not calibrated, whatever the fit says
            info["calibrated"] = info["calibrated"] & (info["kl"] <= info["kl_uniform"])
    return samples, probs, info


@functools.lru_cache(maxsize=64)
def _cached_range(tau, num_steps, schedule, order):
    return representable_range(*schedule_coefficients(tau, num_steps, schedule, order))


def _run_model(cfg: dict, model: IsingModel, key):
    """Simulate every model of the batch. Returns samples [..., S, n], probs [..., 2^n], info."""
    n = model.n
    batch = model.batch_shape
    sg = jax.lax.stop_gradient
    Eh, EJ = _energy_tables(sg(model))
    h, J = model.masked_parameters()
    h = sg(jnp.broadcast_to(h, batch + (n,)).reshape(-1, n))
    J = sg(jnp.broadcast_to(J, batch + (n, n)).reshape(-1, n, n))
    phase, mix = schedule_coefficients(cfg["tau"], cfg["num_steps"], cfg["schedule"], cfg["order"])
    kap = float(2 * np.sum(mix * np.cumsum(phase)[:-1]))
    samples, probs, info = _simulate(
        key, Eh, EJ, sg(model.beta), h, J, n=n, phase=phase, mix=mix, kap=kap, num_shots=cfg["num_shots"],
        ranges=_cached_range(cfg["tau"], cfg["num_steps"], cfg["schedule"], cfg["order"]),
        calibrate=cfg["calibrate"], calibration_steps=cfg["calibration_steps"],
        calibrate_from=cfg["calibrate_from"], kl_max_n=cfg["kl_max_n"], calibration_rtol=cfg["calibration_rtol"])
    samples = samples.reshape(batch + samples.shape[1:])
    probs = probs.reshape(batch + probs.shape[1:])
    info = {k: v.reshape(batch) for k, v in info.items()}
    return samples, probs, info


class DQA(Engine):
    """Digitized diabatic quantum annealing, simulated as a statevector (module docstring).

    Config (static):
        tau: anneal duration ``τ``. num_steps: Trotter steps (``dt = τ/num_steps``).
        schedule: ``"linear"`` (``A = 1 - t/τ``, ``B = t/τ``) or a callable
            ``s -> (A(s), B(s))`` on ``s = t/τ ∈ [0, 1]``.
        order: 1 (Lie) or 2 (Strang). num_shots: measurements per model.
        calibrate: rescale the programmed ``h`` and ``J`` (separately) so the samples follow
            the model's ``β`` (else the raw anneal of ``h``, ``J`` is sampled).
        calibration_steps: pseudo-likelihood corrections after the theory scales.
        calibrate_from: ``"state"`` (exact ``|ψ|²``, noise-free) or ``"samples"``.
        calibration_rtol: relative gap of the effective β (of the exact ``|ψ|²``) to the
            target flagged (and warned about) as not calibrated; with
            ``calibrate_from="samples"`` 4 standard errors of a ``num_shots`` fit are added.
        max_n: largest ``n`` simulated (2^n amplitudes per model). kl_max_n: KL diagnostics
            up to this ``n``.
        rao_blackwell: report the mean of ``tanh(β(h + J s))`` over the shots instead of
            the mean of ``s`` (:mod:`isingattn.fluctuation`): the Boltzmann marginals the shots
            imply, smooth and far less noisy. Use it for training; the plain mean describes
            the shots themselves.

    ``marginals(model, key=...)`` returns the sample marginals (``samples [..., S, n]``),
    differentiable through the fluctuation–dissipation VJP. ``info`` (batch-shaped):
    ``beta_h``, ``beta_J`` (pseudo-likelihood on the samples, with ``beta_h_se``,
    ``beta_J_se``), ``beta_h_state``, ``beta_J_state`` (on the exact ``|ψ|²``),
    ``scale_h``, ``scale_J`` (programmed ``h' = scale_h·h``, ``J' = scale_J·J``), ``kappa``,
    ``beta_E_max``, ``calibrated`` (module docstring), ``pl_converged``, ``representable``
    (programmed ``|h'|``, ``|J'|`` below the aliasing bound); for ``n ≤ kl_max_n``: ``kl`` =
    ``KL(Boltzmann_β ‖ |ψ|²)``, ``kl_reverse`` = ``KL(|ψ|² ‖ Boltzmann_β)``, computed from the exact
    ``|ψ|²`` (not from the shots), and ``kl_uniform`` = KL(Boltzmann_β ‖ uniform), the value
    for a sampler that ignores the model.

    ``pl_converged`` is False where a fit has no finite maximum, typically a spin that
    never flips in the shots (strong field, e.g. the first query of causal attention).

    Failures warn (outside ``jit``): :class:`DQACalibrationWarning` where
    ``calibrated`` is False, :class:`DQARangeWarning` where ``representable`` is False.
    Settings are checked at construction (:mod:`isingattn.validate`) and keys by
    :func:`isingattn.prng.check_key` (typed keys of any implementation, or raw
    ``PRNGKey`` data; other implementations are mapped to a threefry key by their bits).

    Cost: ``O(M · num_steps · n/4 · 2^n)`` for ``M`` models, times ``1 + calibration_steps``
    with calibration, plus a pseudo-likelihood fit over the ``2^n × n`` table per
    calibration step; memory ``O(M 2^n)`` (and ``O(2^n n)`` per model group in the fits).
    Measured (2-core CPU, float32, n = 12, 64 models, 1024 shots): 0.12 s uncalibrated,
    ≈ 1.3 s calibrated (``benchmarks/dqa.py``). Slow beyond n ≈ 20. Masked spins stay in
    ``|+⟩`` and are zeroed in the marginals; they still cost qubits, except in causal
    models, which are simulated prefix bucket by prefix bucket (:mod:`isingattn.causal`). A callable
    ``schedule`` is part of the static config: pass the same function object to reuse the
    compilation.
    """

    # NumPy scalars are stored as Python scalars (validate.plain): hashable, JSON, no
    # "JAX array set as static" warning
    tau: float = eqx.field(static=True, default=12.0, converter=plain)
    num_steps: int = eqx.field(static=True, default=32, converter=plain)
    schedule: Any = eqx.field(static=True, default="linear")
    order: int = eqx.field(static=True, default=2, converter=plain)
    num_shots: int = eqx.field(static=True, default=1024, converter=plain)
    calibrate: bool = eqx.field(static=True, default=True, converter=plain)
    calibration_steps: int = eqx.field(static=True, default=3, converter=plain)
    calibrate_from: str = eqx.field(static=True, default="state")
    calibration_rtol: float = eqx.field(static=True, default=0.05, converter=plain)
    max_n: int = eqx.field(static=True, default=MAX_N, converter=plain)
    kl_max_n: int = eqx.field(static=True, default=16, converter=plain)
    rao_blackwell: bool = eqx.field(static=True, default=False, converter=plain)

    def __check_init__(self):
        check_config(tau=self.tau, num_steps=self.num_steps, schedule=self.schedule, order=self.order,
                      num_shots=self.num_shots, calibration_steps=self.calibration_steps,
                      calibrate_from=self.calibrate_from, max_n=self.max_n, kl_max_n=self.kl_max_n,
                      calibration_rtol=self.calibration_rtol, calibrate=self.calibrate,
                      rao_blackwell=self.rao_blackwell)

    def _cfg(self):
        return dict(tau=self.tau, num_steps=self.num_steps, schedule=self.schedule, order=self.order,
                    num_shots=self.num_shots, calibrate=bool(self.calibrate),
                    calibration_steps=self.calibration_steps, calibrate_from=self.calibrate_from,
                    kl_max_n=self.kl_max_n, calibration_rtol=float(self.calibration_rtol))

    needs_key: ClassVar[bool] = True
    warn_flags: ClassVar[tuple] = (("calibrated", DQACalibrationWarning), ("representable", DQARangeWarning))

    def _marginals(self, model: IsingModel, key) -> Marginals:
        samples, _, info = self._run(model, key)
        return sample_marginals(model, samples, info, rao_blackwell=self.rao_blackwell)

    def run(self, model: IsingModel, *, key):
        """``(samples [..., S, n], probs [..., 2^n], info)``: the shots, the exact ``|ψ|²`` and
        the diagnostics, without the marginals (no causal buckets: the whole model)."""
        model, key = self._checked(model, key, "run")
        out = jit_call(self, "_run", model, key)
        self._warn(out[2])
        return out

    def _run(self, model: IsingModel, key):
        if model.n > self.max_n:
            raise TooManySpinsError(
                f"DQA simulates a 2^n statevector and is limited to n ≤ max_n = {self.max_n}; this model has "
                f"n = {model.n} spins. Use Gibbs or SQA for larger models.")
        return _run_model(self._cfg(), model, key)

    def _warning(self, flag, info, bad, total) -> str:
        return "DQA: " + _WARNINGS[flag].format(bad=bad, tot=total)


_WARNINGS = {
    "calibrated": (
        "calibration did not reach the target β within calibration_rtol for {bad} of {tot} "
        "models (their samples do not follow the model: info['calibrated'] is False). The effective β of an "
        "anneal of duration tau saturates as the programmed scale grows (module docstring), and the circuit "
        "represents programmed fields only up to a bound set by its step (representable_range); a short anneal "
        "reaches only β·max|E| ≲ 1 (info['beta_E_max']). Increase tau, num_steps or calibration_steps, lower β, "
        "or use the reported effective β (info['beta_h_state'], info['beta_J_state'])."),
    "representable": (
        "the programmed fields or couplings of {bad} of {tot} models exceed the circuit's aliasing-free range "
        "(a phase of π per Trotter step, representable_range): the anneal aliases them and its samples do "
        "not follow their energies. Rescale the problem (or calibrate=True with a target β, which keeps the "
        "programmed problem in range), or increase num_steps."),
}

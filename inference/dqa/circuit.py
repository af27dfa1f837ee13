"""The digitized diabatic-anneal circuit that DQA simulates (schedule coefficients, the
statevector evolution, measurement, the fast-anneal theory of its temperature) and the
check of DQA's settings."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Union

import jax
import jax.numpy as jnp
import numpy as np

from isingattn.errors import IsingInputError
from isingattn.validate import boolean, choice, nonneg_int, positive_float, positive_int

MAX_N = 20  # a 2^20 statevector is 8 MiB (complex64) per model
CALIBRATE_FROM = ("state", "samples")
_RX_BLOCK = 4  # qubits per mixer block (measured in the docstring of inference/dqa.py)
Schedule = Union[str, Callable]


def _schedule_fn(schedule: Schedule):
    if schedule == "linear":
        return lambda s: (1.0 - s, s)
    if callable(schedule):
        return schedule
    raise IsingInputError(
        f"schedule must be 'linear' or a callable s -> (A(s), B(s)) on s = t/τ in [0, 1]; got {schedule!r}."
    )


def check_anneal_schedule(points, *, owner: str = "DQASampler") -> tuple:
    """D-Wave's ``anneal_schedule``: points ``(t, s)`` of a piecewise-linear anneal fraction
    ``s(t)``, checked by the QPU's rules: at least 2 points, ``t`` starting at 0 and
    increasing, ``s`` in ``[0, 1]`` and ending at 1; a forward anneal starts at ``(0, 0)``
    with ``s`` nondecreasing, a reverse anneal starts at ``s = 1``. Returns the points as
    a tuple of ``(float, float)`` (hashable: part of a static config)."""
    try:
        arr = np.asarray(points, np.float64)
    except (TypeError, ValueError):
        arr = np.empty((0,))
    if arr.ndim != 2 or arr.shape[0] < 2 or arr.shape[1] != 2 or not np.all(np.isfinite(arr)):
        raise IsingInputError(f"{owner}: anneal_schedule must be a list of at least 2 finite (t, s) points, e.g. "
                              f"[[0, 1], [6, 0.45], [12, 1]] (a reverse anneal); got {points!r}.")
    t, s = arr.T
    if t[0] != 0 or np.any(np.diff(t) <= 0):
        raise IsingInputError(f"{owner}: anneal_schedule's times must start at 0 and increase; got {t.tolist()}.")
    if np.any((s < 0) | (s > 1)) or s[-1] != 1:
        raise IsingInputError(f"{owner}: anneal_schedule's anneal fractions s must lie in [0, 1] and end at 1; "
                              f"got {s.tolist()}.")
    if s[0] not in (0.0, 1.0) or (s[0] == 0 and np.any(np.diff(s) < 0)):
        raise IsingInputError(f"{owner}: anneal_schedule must start at s = 0 and rise (a forward anneal) or start "
                              f"at s = 1 (a reverse anneal, from initial_states); got s = {s.tolist()}.")
    return tuple((float(a), float(b)) for a, b in arr)


@dataclasses.dataclass(frozen=True)
class AnnealPath:
    """A checked ``anneal_schedule`` (:func:`check_anneal_schedule`) as DQA's ``schedule``
    callable: ``u = t/T ↦ base(s(uT))`` with ``T`` the last time and ``base`` the map
    ``s ↦ (A(s), B(s))`` (``"linear"``: ``(1 - s, s)``). Frozen and hashable, so equal
    schedules share one compilation."""

    points: tuple
    base: Schedule = "linear"

    @property
    def duration(self) -> float:
        return self.points[-1][0]

    @property
    def reverse(self) -> bool:
        return self.points[0][1] == 1.0

    def __call__(self, u):
        t, s = np.asarray(self.points).T
        return _schedule_fn(self.base)(np.interp(np.asarray(u) * t[-1], t, s))


def schedule_coefficients(tau: float, num_steps: int, schedule: Schedule = "linear", order: int = 2):
    """Phase and mixer angles of the circuit, as float64 numpy arrays.

    Returns ``phase [K+1]`` and ``mix [K]``: the circuit is ``P_K M_{K-1} P_{K-1} ... M_0 P_0``
    with ``P_l = exp(-i phase_l H_z)`` and ``M_k = exp(-i mix_k H_x)``.
    """
    check_config(tau=tau, num_steps=num_steps, schedule=schedule, order=order)
    K = int(num_steps)
    dt = float(tau) / K
    s = (np.arange(K) + 0.5) / K
    A, B = _schedule_fn(schedule)(s)
    A = np.broadcast_to(np.asarray(A, np.float64), (K,))
    B = np.broadcast_to(np.asarray(B, np.float64), (K,))
    if not (np.all(np.isfinite(A)) and np.all(np.isfinite(B))):
        raise IsingInputError("the schedule returned non-finite A(s) or B(s); it must be finite on [0, 1].")
    mix = dt * A
    if order == 1:
        phase = np.concatenate([dt * B, [0.0]])
    else:
        half = dt * B / 2
        phase = np.concatenate([half[:1], half[:-1] + half[1:], half[-1:]])
    return phase, mix


def kappa(tau: float, num_steps: int, schedule: Schedule = "linear", order: int = 2) -> float:
    """Fast-anneal coefficient of the circuit, ``κ = 2 Σ_k θ_k Σ_{l≤k} φ_l`` (→ ``τ²/12`` for
    the linear schedule as ``num_steps → ∞``). ``P(z) ≈ 2^-n [1 - κ Σ_j (E(z) - E(z^(j)))]``."""
    phase, mix = schedule_coefficients(tau, num_steps, schedule, order)
    return float(2 * np.sum(mix * np.cumsum(phase)[:-1]))


# ---- statevector --------------------------------------------------------------------------


def _complex_dtype(dtype):
    return jnp.complex128 if jnp.dtype(dtype) == jnp.float64 else jnp.complex64


def _mixer(psi, theta, n):
    """``exp(-i θ H_x) ψ = Π_j (cos θ + i sin θ X_j) ψ``.  psi: [M, 2^n] complex, theta scalar."""
    M = psi.shape[0]
    c = jnp.cos(theta).astype(psi.dtype)
    s = (1j * jnp.sin(theta)).astype(psi.dtype)
    rx = jnp.stack([jnp.stack([c, s]), jnp.stack([s, c])])  # (2, 2)
    blocks = {}
    for j0 in range(0, n, _RX_BLOCK):
        k = min(_RX_BLOCK, n - j0)
        if k not in blocks:
            m = rx
            for _ in range(k - 1):
                m = jnp.kron(m, rx)
            blocks[k] = m
        x = psi.reshape(M, 2**j0, 2**k, 2 ** (n - j0 - k))  # qubits j0..j0+k-1 on axis 2
        psi = jnp.einsum("xy,mayb->maxb", blocks[k], x)
    return psi.reshape(M, 2**n)


def evolve(E, phase, mix, start=None):
    """Run the circuit on ``|+⟩^n``, or on basis states.

    Args:
        E: energies of the basis states, ``[..., 2^n]`` (real; float64 gives complex128).
        phase: ``[K+1]`` and mix ``[K]`` angles from :func:`schedule_coefficients`.
        start: None (``|+⟩^n``), or basis indices ``[...]`` (int; the classical state
            ``|z⟩`` that a reverse anneal starts in, one per row of ``E``).

    Returns the final state ``ψ [..., 2^n]`` (complex).
    """
    E = jnp.asarray(E)
    N = E.shape[-1]
    n = int(round(math.log2(N)))
    if 2**n != N:
        raise IsingInputError(f"E must have 2^n entries on its last axis; got {N}.")
    batch = E.shape[:-1]
    E2 = E.reshape(-1, N)
    cdt = _complex_dtype(E.dtype)
    phase = jnp.asarray(phase, E.dtype)
    mix = jnp.asarray(mix, E.dtype)
    if start is None:
        psi = jnp.full(E2.shape, 2.0 ** (-n / 2), cdt)
    else:
        psi = jax.nn.one_hot(jnp.broadcast_to(jnp.asarray(start), batch).reshape(-1), N, dtype=cdt)

    def rotate(psi, p):  # exp(-i p E), elementwise
        return psi * jax.lax.complex(jnp.cos(p * E2), -jnp.sin(p * E2)).astype(cdt)

    def step(psi, pm):
        p, m = pm
        return _mixer(rotate(psi, p), m, n), None

    psi, _ = jax.lax.scan(step, psi, (phase[:-1], mix))
    psi = rotate(psi, phase[-1])
    return psi.reshape(batch + (N,))


def measure(key, probs, num_shots: int):
    """Inverse-CDF sampling of ``num_shots`` basis indices per row of ``probs [M, N]``.

    ``jax.random.categorical`` would draw a Gumbel per shot *and* basis state
    (``num_shots · 2^n`` per model); the CDF costs ``2^n + num_shots · n``.
    """
    M = probs.shape[0]
    cdf = jnp.cumsum(probs, axis=-1)
    u = jax.random.uniform(key, (M, num_shots), dtype=probs.dtype) * cdf[:, -1:]
    idx = jax.vmap(lambda c, x: jnp.searchsorted(c, x, side="right"))(cdf, u)
    return jnp.minimum(idx, probs.shape[-1] - 1).astype(jnp.int32)


def flip_energy_sum(E):
    """``D(z) = Σ_j (E(z) - E(z^(j)))`` from the energy table ``E [..., 2^n]`` (spin ``j``
    is bit ``n-1-j``; flipping it is a reversal of that axis)."""
    N = E.shape[-1]
    n = int(round(math.log2(N)))
    batch = E.shape[:-1]
    D = jnp.zeros_like(E)
    for j in range(n):
        x = E.reshape(batch + (2**j, 2, 2 ** (n - j - 1)))
        flipped = jnp.concatenate([x[..., 1:2, :], x[..., 0:1, :]], axis=-2).reshape(E.shape)
        D = D + E - flipped
    return D


def fast_anneal_theory(E, kappa_value):
    """The small-``τ`` prediction ``P(z) = 2^-n [1 - κ Σ_j (E(z) - E(z^(j)))]``, ``[..., 2^n]``."""
    N = E.shape[-1]
    return (1.0 - kappa_value * flip_energy_sum(E)) / N


# ---- engine -------------------------------------------------------------------------------


def check_config(*, tau=1.0, num_steps=1, schedule="linear", order=2, num_shots=1, calibration_steps=0,
                  calibrate_from="state", max_n=MAX_N, kl_max_n=16, calibration_rtol=0.05, calibrate=True,
                  rao_blackwell=False, owner="DQA"):
    """Every setting, checked by :mod:`isingattn.validate` (counts are ints, not bools,
    floats or strings; durations and tolerances positive and finite)."""
    positive_float("tau", tau, owner=owner)
    positive_int("num_steps", num_steps, owner=owner)
    positive_int("num_shots", num_shots, owner=owner)
    nonneg_int("calibration_steps", calibration_steps, owner=owner)
    nonneg_int("kl_max_n", kl_max_n, owner=owner)
    positive_int("max_n", max_n, owner=owner, hi=26)  # a 2^26 statevector is 512 MiB per model
    positive_int("order", order, owner=owner, hi=2)  # 1 (Lie) or 2 (Strang)
    positive_float("calibration_rtol", calibration_rtol, owner=owner)
    boolean("calibrate", calibrate, owner=owner)
    boolean("rao_blackwell", rao_blackwell, owner=owner)
    if not (isinstance(schedule, str) and schedule == "linear" or callable(schedule)):
        raise IsingInputError(
            f"{owner}: schedule must be 'linear' or a callable s -> (A(s), B(s)) on s = t/τ in [0, 1]; got {schedule!r}."
        )
    choice("calibrate_from", calibrate_from, CALIBRATE_FROM, owner=owner)

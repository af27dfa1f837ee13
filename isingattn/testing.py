"""Float64 brute-force references for tests of every engine (independent of the
engines: plain numpy enumeration of all ``2^n`` configurations)."""

from __future__ import annotations

import itertools

import numpy as np

from isingattn.instances import random_model  # noqa: F401  (re-exported for tests)


def all_spins(n: int) -> np.ndarray:
    """``[2^n, n]`` float64 table of every configuration."""
    return np.array(list(itertools.product([1.0, -1.0], repeat=n))).reshape(2**n, n)


def brute_force(h, J, beta=1.0, mask=None):
    """Exact statistics of one model in float64.

    h: [n], J: [n, n], mask: [n] bool or None. Inactive spins are removed.
    Returns dict(mean [n], corr [n, n], log_z, probs [2^m], spins [2^m, m], active).
    """
    h, J = np.asarray(h, np.float64), np.asarray(J, np.float64)
    n = h.shape[0]
    act = np.ones(n, bool) if mask is None else np.asarray(mask, bool)
    idx = np.flatnonzero(act)
    hs, Js = h[idx], J[np.ix_(idx, idx)]
    S = all_spins(len(idx))
    E = -S @ hs - 0.5 * np.einsum("ci,ij,cj->c", S, Js, S)
    logw = -beta * E
    mx = logw.max()
    w = np.exp(logw - mx)
    log_z = mx + np.log(w.sum())
    p = w / w.sum()
    mean = np.zeros(n)
    mean[idx] = p @ S
    corr = np.zeros((n, n))
    corr[np.ix_(idx, idx)] = np.einsum("c,cj,ck->jk", p, S, S)
    return dict(mean=mean, corr=corr, log_z=log_z, probs=p, spins=S, active=act)


def brute_force_batch(h, J, beta=1.0, mask=None) -> dict:
    """:func:`brute_force` over every batch element. h [..., n], J [..., n, n] and mask
    [..., n] broadcast; returns mean [..., n], corr [..., n, n], log_z [...]."""
    h, J = np.asarray(h, np.float64), np.asarray(J, np.float64)
    n = h.shape[-1]
    shapes = [h.shape[:-1], J.shape[:-2]] + ([] if mask is None else [np.shape(mask)[:-1]])
    batch = np.broadcast_shapes(*shapes)
    hb, Jb = np.broadcast_to(h, batch + (n,)), np.broadcast_to(J, batch + (n, n))
    mb = None if mask is None else np.broadcast_to(mask, batch + (n,))
    out = dict(mean=np.zeros(batch + (n,)), corr=np.zeros(batch + (n, n)), log_z=np.zeros(batch))
    for idx in np.ndindex(*batch):
        r = brute_force(hb[idx], Jb[idx], beta, None if mb is None else mb[idx])
        for k in out:
            out[k][idx] = r[k]
    return out


# ---- QPU-like samplers for tests (in the manner of dimod.testing and MockDWaveSampler) ----------------------


def _dimod_sampler_base():
    import dimod

    return dimod.Sampler


class HiddenBetaSampler(_dimod_sampler_base()):
    """A dimod sampler at a fixed inverse temperature ``beta0`` that its caller cannot set: a
    stand-in for a QPU, whose samples follow an unknown effective temperature.

    ``HiddenBetaSampler(beta0, num_sweeps=300, seed=0, properties=None)``: dwave-samplers'
    ``SimulatedAnnealingSampler`` with ``beta_range=[beta0, beta0]`` (fixed-β Metropolis) for
    ``num_sweeps`` sweeps from a random state per read, i.e. iid reads of ``exp(-beta0·E)``
    once the sweeps mix (300 mix dense models of ~10 spins with ``|h|, |J| ≲ 1``). Its
    ``parameters`` are ``num_reads`` and ``seed`` only, so ``DimodEngine`` finds no
    temperature parameter; every other keyword (a β, what MockDWaveSampler forwards) is
    ignored. A call without ``seed`` takes one from ``np.random.default_rng(seed)`` (state
    kept in the sampler: pass ``seed`` for reproducible reads, as DimodEngine does).
    ``properties`` (e.g. ``{"h_range": [-4, 4], "j_range": [-1, 1]}``) is what the sampler
    declares. Needs dwave-samplers.
    """

    parameters = {"num_reads": [], "seed": []}
    properties = {}

    def __init__(self, beta0, num_sweeps=300, seed=0, properties=None):
        beta0 = float(beta0)
        if not (np.isfinite(beta0) and beta0 > 0):
            from isingattn.errors import IsingInputError

            raise IsingInputError(f"HiddenBetaSampler: beta0 must be a positive finite inverse temperature; got {beta0!r}.")
        if isinstance(num_sweeps, bool) or not isinstance(num_sweeps, (int, np.integer)) or num_sweeps < 1:
            from isingattn.errors import IsingInputError

            raise IsingInputError(f"HiddenBetaSampler: num_sweeps must be a positive integer; got {num_sweeps!r}.")
        self.beta0, self.num_sweeps = beta0, int(num_sweeps)
        self.rng = np.random.default_rng(seed)
        self.properties = dict(properties or {})

    @property
    def beta(self) -> float:  # the name the tests used before this class was public
        return self.beta0

    def sample(self, bqm, num_reads=1, seed=None, **ignored):
        from dwave.samplers import SimulatedAnnealingSampler

        seed = int(self.rng.integers(2**31 - 1)) if seed is None else int(seed)
        return SimulatedAnnealingSampler().sample(bqm, num_reads=num_reads, beta_range=[self.beta0, self.beta0],
                                                  beta_schedule_type="linear", num_sweeps=self.num_sweeps, seed=seed)


def mock_qpu(substitute, pegasus_shape: int = 3, *, embedding_cache: bool = True):
    """``EmbeddingComposite(MockDWaveSampler(...))`` on a Pegasus ``P(pegasus_shape)`` graph,
    ``substitute`` (e.g. :class:`HiddenBetaSampler`) sampling the embedded problem: a QPU-like
    sampler with embedding, chains, chain breaks and the QPU's declared ranges
    (``h_range [-4, 4]``, ``j_range [-1, 1]``). Needs dwave-system.

    Two differences from a bare ``MockDWaveSampler``, both for reproducible tests: it accepts a
    ``seed`` and forwards it to ``substitute`` (a bare mock forwards none), and it never
    overwrites a read with the exact ground state (``exact_solver_cutoff=0``: that would bias
    a Boltzmann sample). With ``embedding_cache`` an embedding is found once per source graph
    (minorminer with ``random_seed=0``, whatever ``embedding_parameters`` ask) and reused, as
    one would reuse a fixed embedding on hardware; the result depends on the graph alone.
    """
    import minorminer
    from dwave.system import EmbeddingComposite
    from dwave.system.testing import MockDWaveSampler

    mock = MockDWaveSampler(topology_type="pegasus", topology_shape=[int(pegasus_shape)], parameter_warnings=False,
                            substitute_sampler=substitute, exact_solver_cutoff=0)
    mock.parameters = dict(mock.parameters, seed=[])
    mock.mocked_parameters = set(mock.mocked_parameters) | {"seed"}
    if not embedding_cache:
        return EmbeddingComposite(mock)
    cache = {}

    def find_embedding(source, target, **ignored):
        edges = tuple(sorted(tuple(sorted(e)) for e in source))
        if edges not in cache:
            cache[edges] = minorminer.find_embedding(list(edges), target, random_seed=0)
        return cache[edges]

    return EmbeddingComposite(mock, find_embedding=find_embedding)

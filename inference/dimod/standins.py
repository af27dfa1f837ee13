"""QPU stand-ins: dimod samplers that behave like a quantum annealer without one.

* :class:`HiddenBetaSampler`: fixed-β simulated annealing at a β its caller is not told, so
  that its samples follow an unknown effective temperature, as a QPU's do.
* :func:`mock_qpu`: ``EmbeddingComposite(MockDWaveSampler)`` on a Pegasus graph, with
  embedding, chains, chain breaks and the QPU's declared ranges.

``DimodEngine`` builds them from sampler names (``"hidden-beta:2.5"``,
``"mock-pegasus:hidden-beta:2.5"``, :data:`isingattn.inference.dimod.specs.SAMPLER_NAMES`),
which a saved model config can hold. They are what the study's QPU-style calibration runs
on. Need dwave-samplers (and dwave-system, minorminer for :func:`mock_qpu`).
"""

from __future__ import annotations

import dimod
import numpy as np

from isingattn.errors import IsingInputError

class HiddenBetaSampler(dimod.Sampler):
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
            raise IsingInputError(f"HiddenBetaSampler: beta0 must be a positive finite inverse temperature; got {beta0!r}.")
        if isinstance(num_sweeps, bool) or not isinstance(num_sweeps, (int, np.integer)) or num_sweeps < 1:
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

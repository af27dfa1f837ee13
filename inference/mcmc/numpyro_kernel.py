"""The heat-bath Gibbs sweep of :mod:`isingattn.inference.mcmc.gibbs` as a NumPyro
``MCMCKernel``, so ``numpyro.infer.MCMC`` supplies chains, warmup, thinning, the
progress bar, ``get_samples`` and ``print_summary``, and ``az.from_numpyro`` works.

It runs the same transition as the :class:`~isingattn.inference.mcmc.gibbs.Gibbs` engine
(``chain_init`` / ``chain_step``): same key => same chains as ``MCMC`` with
``chain_method="vectorized"`` (a test checks it).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from isingattn import prng
from isingattn.energy import energy
from isingattn.errors import IsingInputError
from isingattn.inference.mcmc.gibbs_kernel import GibbsState
from isingattn.inference.mcmc.gibbs import chain_init, chain_step
from isingattn.inference.mcmc.coloring import schedule_classes
from isingattn.model import IsingModel

__all__ = ["IsingGibbsKernel", "IsingMCMCState"]


class IsingMCMCState(NamedTuple):
    """State of :class:`IsingGibbsKernel` (one chain, or ``[C, ...]`` when vectorized).

    z: spins ``[*batch, n]`` (the ``sample_field``); energy: ``E(z)`` ``[*batch]``;
    flip_rate: of the last sweep ``[*batch]``; rng_key: the chain's key.
    ``energy`` and ``flip_rate`` can be collected with ``MCMC.run(..., extra_fields=("energy", "flip_rate"))``.
    """

    z: jax.Array
    energy: jax.Array
    flip_rate: jax.Array
    rng_key: jax.Array


class IsingGibbsKernel(MCMCKernel):
    """The heat-bath Gibbs sweep as a ``numpyro.infer.mcmc.MCMCKernel``.

    ::

        kernel = IsingGibbsKernel(model, schedule="colored")
        mcmc = MCMC(kernel, num_warmup=200, num_samples=500, num_chains=4, chain_method="vectorized")
        mcmc.run(jax.random.key(0))
        mcmc.get_samples()["s"]     # [chains * draws, *batch, n]
        mcmc.print_summary(); az.from_numpyro(mcmc)

    One MCMC step is one full sweep. Samples are reported as the site ``site``
    (default ``"s"``). Works with every ``chain_method``; with ``"vectorized"``
    the chains are vmapped over their own keys, exactly as the :class:`Gibbs`
    engine runs them (same key => same samples). ``init_params`` (optional) are
    initial spins ``[*batch, n]`` (``[C, *batch, n]`` for several chains).
    """

    model = None  # not a NumPyro model: az.from_numpyro reads sampler.model and must find None
    sample_field = "z"

    def __init__(self, ising_model: IsingModel, schedule: str = "systematic", colors=None, site: str = "s"):
        if not isinstance(ising_model, IsingModel):
            raise IsingInputError(f"IsingGibbsKernel needs an IsingModel; got {type(ising_model).__name__}.")
        self.ising_model = ising_model
        self.schedule = schedule
        self.site = site
        self._classes = schedule_classes(schedule, ising_model.J, colors)

    @property
    def default_fields(self):
        return ("z",)

    def _shape(self):
        return tuple(self.ising_model.batch_shape) + (self.ising_model.n,)

    def _init_one(self, key, init):
        m = self.ising_model
        key = prng.check_key(key, owner="IsingGibbsKernel")  # any key impl; threefry keys unchanged
        state, k = chain_init(key, self._shape(), m.active(), m.dtype)
        if init is not None:
            s = jnp.broadcast_to(jnp.asarray(init, m.dtype), self._shape())
            s = jnp.where(s >= 0, 1.0, -1.0).astype(m.dtype)  # any sign pattern; 0 counts as +1
            act = m.active()
            state = GibbsState(s if act is None else jnp.where(act, s, 0.0))
        return IsingMCMCState(state.spins, energy(m.h, m.J, state.spins), jnp.zeros(self._shape()[:-1], m.dtype), k)

    def _sample_one(self, state: IsingMCMCState) -> IsingMCMCState:
        m = self.ising_model
        new, k, info = chain_step(GibbsState(state.z), state.rng_key, m.h, m.J, m.beta, self._classes)
        return IsingMCMCState(new.spins, energy(m.h, m.J, new.spins), info.flip_rate, k)

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        if is_prng_key(rng_key):
            return self._init_one(rng_key, init_params)
        # chain_method="vectorized": a batch of keys, one per chain
        return jax.vmap(self._init_one, in_axes=(0, None if init_params is None else 0))(rng_key, init_params)

    def sample(self, state, model_args, model_kwargs):
        if is_prng_key(state.rng_key):
            return self._sample_one(state)
        return jax.vmap(self._sample_one)(state)

    def postprocess_fn(self, model_args, model_kwargs):
        site = self.site
        return lambda z: {site: z}

    def get_diagnostics_str(self, state):
        return f"flip rate {float(jnp.mean(state.flip_rate)):.3f}"

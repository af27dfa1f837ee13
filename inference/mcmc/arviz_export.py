"""ArviZ export of Gibbs samples (:func:`to_inference_data`), so ``az.summary`` gives
R-hat and ESS of a :class:`~isingattn.inference.mcmc.gibbs.Gibbs` run or of a NumPyro ``MCMC``
run with :class:`~isingattn.inference.mcmc.numpyro_kernel.IsingGibbsKernel`."""

from __future__ import annotations

from typing import Optional

import numpy as np

from isingattn.errors import IsingInputError
from isingattn.inference.mcmc.numpyro_kernel import IsingGibbsKernel
from isingattn.marginals import Marginals

__all__ = ["to_inference_data"]


def to_inference_data(result, *, num_chains: Optional[int] = None, site: str = "s", batch_dims=None):
    """An ``arviz.InferenceData`` of Gibbs samples, so ``az.summary`` gives R-hat and ESS.

    ``result`` is either a ``numpyro.infer.MCMC`` run with :class:`IsingGibbsKernel`
    (converted with ``az.from_numpyro``; collected extra fields become
    ``sample_stats``) or the ``Marginals`` of the :class:`Gibbs` engine (its
    ``samples [*batch, chains*draws, n]`` are regrouped by chain; ``num_chains``
    defaults to ``info["flip_rate"].shape[-1]``). The posterior variable ``site``
    has dims ``(chain, draw, *batch_dims, "spin")``; ``batch_dims`` defaults to
    ``batch_0, batch_1, ...``. A sampler's energy trace (``info["energy"] [*batch, chains,
    draws]``) becomes ``sample_stats.energy`` with dims ``(chain, draw, *batch_dims)``, so
    ``az.ess``/``az.autocorr`` apply to it as to the spins.
    """
    import arviz as az
    from numpyro.infer import MCMC

    if isinstance(result, MCMC):
        if not isinstance(result.sampler, IsingGibbsKernel):
            raise IsingInputError(
                f"to_inference_data expects an MCMC run with IsingGibbsKernel; got sampler {type(result.sampler).__name__}. "
                "For other kernels call az.from_numpyro directly."
            )
        r = len(result.sampler.ising_model.batch_shape)
        dims = list(batch_dims) if batch_dims is not None else [f"batch_{i}" for i in range(r)]
        return az.from_numpyro(result, dims={result.sampler.site: dims + ["spin"]})
    if isinstance(result, Marginals):
        if result.samples is None:
            raise IsingInputError("to_inference_data needs Marginals with samples (from a sampling engine such as Gibbs).")
        if num_chains is None:
            if "flip_rate" not in result.info:
                raise IsingInputError("to_inference_data: pass num_chains= (these Marginals do not come from Gibbs).")
            num_chains = result.info["flip_rate"].shape[-1]
        s = np.asarray(result.samples)
        *batch, S, n = s.shape
        if S % num_chains:
            raise IsingInputError(f"{S} samples do not split into num_chains = {num_chains} equal chains.")
        s = s.reshape(tuple(batch) + (num_chains, S // num_chains, n))
        s = np.moveaxis(s, (-3, -2), (0, 1))  # [C, D, *batch, n]
        dims = list(batch_dims) if batch_dims is not None else [f"batch_{i}" for i in range(len(batch))]
        stats = {}
        E = result.info.get("energy")
        if E is not None and np.shape(E) == tuple(batch) + (num_chains, S // num_chains):
            stats["energy"] = np.moveaxis(np.asarray(E), (-2, -1), (0, 1))  # [C, D, *batch]
        return az.from_dict(posterior={site: s}, sample_stats=stats or None,
                            dims={site: dims + ["spin"], "energy": dims})
    raise IsingInputError(
        f"to_inference_data expects a numpyro MCMC (with IsingGibbsKernel) or Gibbs Marginals; got {type(result).__name__}."
    )

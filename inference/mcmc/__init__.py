"""Markov chain Monte Carlo on spins: the shared coloured sweep, Gibbs and path-integral SQA
with their pure kernels (blackjax style: ``kernel(key, state, ...) -> (state, info)``).

The NumPyro kernel (:mod:`~isingattn.inference.mcmc.numpyro_kernel`) and the ArviZ export
(:mod:`~isingattn.inference.mcmc.arviz_export`) are imported from their own modules, so that
the engines load without numpyro or arviz."""

from isingattn.inference.mcmc.ais import AIS
from isingattn.inference.mcmc.coloring import color_classes
from isingattn.inference.mcmc.gibbs import Gibbs
from isingattn.inference.mcmc.gibbs_kernel import GibbsInfo, GibbsState, gibbs_sweep, init_spins
from isingattn.inference.mcmc.pa import PopulationAnnealing
from isingattn.inference.mcmc.pt import ParallelTempering
from isingattn.inference.mcmc.sqa import SQA
from isingattn.inference.mcmc.sqa_kernel import SQAInfo, SQAState, sqa_init, sqa_sweep
from isingattn.inference.mcmc.swendsen_wang import SwendsenWang

__all__ = ["AIS", "Gibbs", "GibbsInfo", "GibbsState", "ParallelTempering", "PopulationAnnealing", "SQA", "SQAInfo", "SQAState", "SwendsenWang",
           "color_classes", "gibbs_sweep", "init_spins", "sqa_init", "sqa_sweep"]

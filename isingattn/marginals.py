"""``Marginals``: the result every inference engine returns, the ``Label`` strings of
its ``info``, and the linear-response rule by which deterministic engines fill in its
``corr``."""

from __future__ import annotations

from typing import Any, Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp


class Marginals(eqx.Module):
    """Spin statistics of a (batched) Ising model.

    Attributes:
        mean: ``⟨s_j⟩``, ``[..., n]``; 0 for inactive spins.
        corr: ``⟨s_j s_k⟩``, ``[..., n, n]``, when requested; rows and columns of
            inactive spins are 0.
        log_z: ``log Z = log Σ_s exp(-βE(s))`` over the active spins, ``[...]``, from the
            engines that compute one; ``info["log_z_kind"]`` says what it is: ``"exact"``
            (``Exact``, ``Banded``), ``"lower_bound"`` (``MeanField`` naive: the
            Gibbs–Bogoliubov bound) or ``"approximation"`` (``MeanField`` TAP and BP/Bethe).
            None from the others.
        samples: spin samples, engine-specific leading axes, when the engine samples.
        info: diagnostics: a dict of arrays, and of :class:`Label` strings such as
            ``log_z_kind``.
    """

    mean: jax.Array
    corr: Optional[jax.Array] = None
    log_z: Optional[jax.Array] = None
    samples: Optional[jax.Array] = None
    info: dict[str, Any] = eqx.field(default_factory=dict)

    def summary(self) -> str:
        """What the engine says of this result, in a few lines (as numpyro's ``print_summary``
        does for MCMC): the models ``converged`` (of how many), the ranges of split R-hat, ESS and
        MCSE over spins, frozen spins, PT's swap and round-trip rates, AIS's weight ESS, population
        annealing's effective families, ``log Z ± SE`` and the time taken (``info["wall_s"]``),
        each where the engine reports it. Needs concrete values (outside ``jit``)."""
        import numpy as np

        info = self.info if isinstance(self.info, dict) else {}
        batch = tuple(np.shape(self.mean)[:-1])
        lines = [f"Marginals: {int(np.prod(batch)) if batch else 1} model(s) of {np.shape(self.mean)[-1]} spins"
                 + (f", batch {batch}" if batch else "")]

        def span(key, fmt="{:.3g}"):
            v = np.asarray(info[key], float)
            fin = v[np.isfinite(v)]
            rng = f"{fmt.format(fin.min())} – {fmt.format(fin.max())}" if fin.size else "—"
            bad = int(np.size(v) - fin.size)
            return rng + (f" ({bad} undefined)" if bad else "")

        if "converged" in info:
            ok = np.asarray(info["converged"], bool)
            lines.append(f"  converged        {int(ok.sum())} of {ok.size}" + ("" if ok.all() else "   <- NOT CONVERGED"))
        for key, label in (("r_hat", "split R-hat"), ("ess", "ESS"), ("mcse", "MCSE of ⟨s⟩"),
                           ("swap_rate", "swap rate"), ("round_trip_rate", "round trips"),
                           ("weight_ess", "weight ESS"), ("families_eff", "families (eff.)")):
            if key in info:
                lines.append(f"  {label:<16} {span(key)}")
        if "frozen" in info:
            lines.append(f"  frozen spins     {int(np.asarray(info['frozen'], bool).sum())}")
        if self.log_z is not None:
            lz = np.asarray(self.log_z, float).ravel()
            se = np.asarray(info["log_z_se"], float).ravel() if "log_z_se" in info else None
            kind = f" ({info['log_z_kind']})" if "log_z_kind" in info else ""
            shown = [f"{v:.6g}" + ("" if se is None else f" ± {e:.2g}") for v, e in
                     zip(lz[:4], se[:4] if se is not None else [None] * 4)]
            lines.append(f"  log Z{kind:<11} {', '.join(shown)}" + (" ..." if lz.size > 4 else ""))
        if "wall_s" in info:
            lines.append(f"  time             {float(info['wall_s']):.3g} s")
        return "\n".join(lines)

    def to_sampleset(self, model, index=None):
        """The samples as a ``dimod.SampleSet`` of ``model`` (the model they were drawn
        from), so that Ocean's tools (``truncate``, ``lowest``, ``aggregate``, the
        inspector) apply to them.

        ``samples [..., S, n]`` (the model's batch axes, then the engine's sample axes):
        one row per sample, in order, not aggregated; ``index`` picks one model of a
        batch, as in :meth:`isingattn.IsingModel.to_bqm`. Variables are the model's
        labels (``0..n-1`` without), inactive spins left out; energies are those of
        ``model.to_bqm(index)`` (SPIN, ``E(s)`` of the model, offset 0); ``info`` holds
        ``beta`` and the engine's ``info`` for that model (NumPy arrays as lists, so
        ``json.dumps`` takes it). Raises ``IsingInputError`` when there are no samples
        (a deterministic engine, or an engine that kept none).
        """
        import dimod
        import numpy as np

        from isingattn import convert
        from isingattn.errors import IsingInputError

        if self.samples is None:
            raise IsingInputError("to_sampleset needs samples: this Marginals holds none (a deterministic engine, or "
                                  "one that did not keep them, e.g. Gibbs(keep_samples=False)). Use a sampling engine.")
        bqm = convert.to_bqm(model, index)  # checks index against the batch
        batch = model.batch_shape
        S = np.asarray(self.samples)
        if S.ndim < len(batch) + 2 or S.shape[:len(batch)] != batch or S.shape[-1] != model.n:
            raise IsingInputError(f"samples of shape {S.shape} do not fit this model (batch {batch}, n = {model.n}): "
                                  "to_sampleset needs [*batch, samples..., n], from the model that was sampled.")
        idx = () if index is None else ((index,) if isinstance(index, (int, np.integer)) else tuple(index))
        S = S[idx].reshape(-1, model.n)
        labels = convert.label_list(model)
        keep = np.flatnonzero(convert.single(model, index)[2])  # the active spins, as in the BQM
        rows = np.where(S[:, keep] > 0, 1, -1).astype(np.int8)
        def one(v):  # this model's entry of a per-model diagnostic
            a = np.asarray(v) if not isinstance(v, str) else v
            if isinstance(a, np.ndarray) and idx and a.shape[:len(batch)] == batch:
                a = a[idx]
            return a

        info = {"beta": float(np.broadcast_to(np.asarray(model.beta), batch)[idx]),
                "engine_info": convert.json_safe({k: one(v) for k, v in self.info.items()})}
        return dimod.SampleSet.from_samples_bqm((rows, [labels[i] for i in keep]), bqm, info=info)


class Label(str):
    """A string entry of ``Marginals.info`` (e.g. ``info["log_z_kind"] == "exact"``). It is
    a ``str`` in every respect but one: as a pytree it is a node with no leaves (the string
    is static data), so a ``Marginals`` that carries it passes through ``jax.jit``,
    ``vmap`` and tree maps, where a plain string is not a valid JAX output."""

    __slots__ = ()


jax.tree_util.register_pytree_node(Label, lambda s: ((), str(s)), lambda aux, _: Label(aux))


def linear_response_corr(mean_fn: Callable, h, mean, beta):
    """Pair correlations ``⟨s_j s_k⟩ = (1/β) ∂m_j/∂h_k + m_j m_k`` of the means
    ``m = mean_fn(h)`` (fluctuation–dissipation; exact where ``mean_fn`` is).

    mean_fn: ``h [..., n] -> m [..., n]`` with the models of the batch independent, so one
    ``jvp`` per spin ``k`` (perturbing ``h_k`` of every model at once) gives every
    covariance. h: ``[..., n]`` (the batch shape of ``mean``); mean: ``mean_fn(h)``;
    beta: scalar. Returns ``[..., n(j), n(k)]``.
    """
    eye = jnp.eye(h.shape[-1], dtype=h.dtype)
    dm = jax.vmap(lambda e: jax.jvp(mean_fn, (h,), (jnp.broadcast_to(e, h.shape),))[1])(eye)  # [n(k), ..., n(j)]
    return jnp.moveaxis(dm, 0, -1) / beta + mean[..., :, None] * mean[..., None, :]

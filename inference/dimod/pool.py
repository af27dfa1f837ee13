"""``DimodEngine(pool=True)``: every model of a call sampled as one BQM of disjoint parts, with
one calibration scale fitted on the pooled reads (DESIGN.md §3, "Training through a hidden-β
sampler"). :class:`PooledSampling` holds that path for an engine, so that the engine file
holds the per-model path only.
"""

from __future__ import annotations

import dimod
import numpy as np

from isingattn.convert import array_bqm
from isingattn.inference.dimod.specs import CHAIN_KEYS, sampler_name, subset_reads, uniform_torque, beta_kwargs, declared_ranges


class PooledSampling:
    """``DimodEngine(pool=True)``'s host path for one engine: ``PooledSampling(engine).run(...)``
    draws every model of a call at one calibration scale. It reads the engine's settings and
    its per-model helpers (``_draw``, ``_info_keys``) and keeps no state of its own."""

    def __init__(self, engine):
        self.engine = engine

    def draw_union(self, h, J, c, seed, beta):
        """Reads ``[B, S, n]`` of every model at once: one BQM of ``B`` disjoint parts
        (``c_h·h``, ``c_J·J``), one sampler call. Spins with no field and no coupling are left
        out of the BQM and drawn uniformly here: that is their Boltzmann law at any β."""
        B, n = h.shape
        S = self.engine.num_reads
        free = (h == 0) & ~np.any(J != 0, axis=-1)
        act = np.flatnonzero(~free.reshape(-1))
        bi, ii, jj = np.nonzero(np.triu(J, 1))
        lin = -c[0] * h.reshape(-1)[act]
        pos = np.full(B * n, -1)
        pos[act] = np.arange(len(act))
        quad = (pos[bi * n + ii], pos[bi * n + jj], -c[1] * J[bi, ii, jj])
        bqm = dimod.BinaryQuadraticModel.from_numpy_vectors(lin, quad, 0.0, dimod.SPIN)
        params = getattr(self.engine.sampler, "parameters", {}) or {}
        kw = dict(self.engine.sample_kwargs)
        kw.update(beta_kwargs(self.engine.sampler, beta) or {})
        if "seed" in params or "seed" in kw:
            kw.setdefault("seed", int(seed) % (2**31 - 1))
        if "auto_scale" in params and self.engine.calibrate:
            kw.setdefault("auto_scale", False)
        rng = np.random.default_rng(int(seed))
        flat = np.where(rng.random((S, B * n)) < 0.5, 1.0, -1.0)
        if len(act):
            ss = self.engine.sampler.sample(bqm, num_reads=S, **kw)
            arr = ss.record.sample.repeat(ss.record.num_occurrences, axis=0)
            if len(arr) < S:
                raise RuntimeError(f"{sampler_name(self.engine.sampler)} returned {len(arr)} reads; asked for {S}.")
            order = np.argsort(np.asarray(list(ss.variables), dtype=np.int64))  # columns in label order
            arr = subset_reads(arr[:, order].astype(np.float64), S, seed, shuffle=bool(np.any(ss.record.num_occurrences > 1)))
            flat[:, act] = arr
        return flat.reshape(S, B, n).transpose(1, 0, 2)

    def pooled_fit(self, eh, eJ, boot, seed):
        """The MPL β of the reads of every model together (``eh``, ``eJ``: field and coupling
        excitations ``[B, S, n]``; the reads of one call index are one read of the union
        model): ``(β, β_lo, β_hi, β_se, β_h, β_J, ground_only)``."""
        from isingattn.inference.dimod.temperature import beta_from_excitations

        B, S, n = eh.shape
        eh, eJ = (e.transpose(1, 0, 2).reshape(S, B * n) for e in (eh, eJ))
        e = beta_from_excitations(eh, eJ, split=self.engine.split, num_bootstrap=boot, seed=int(seed), level=self.engine.beta_level)
        return e.beta, e.beta_lo, e.beta_hi, e.beta_se, e.beta_h, e.beta_J, e.ground_only

    def run(self, h, J, beta, seeds, *, dtype, graph=None):
        """:meth:`DimodEngine._host_sample` with ``pool``: every round draws all ``B`` models (one call of
        the union BQM, or, for an embedding composite, one call per model) at one scale
        ``(c_h, c_J)`` fitted on the pooled reads; every model gets the pooled diagnostics."""
        B, n = h.shape
        if graph is not None:  # dense per model: the excitations and the union need it
            Jd = np.zeros((B, n, n))
            e = np.asarray(graph.edges)
            Jd[:, e[:, 0], e[:, 1]] = J
            Jd[:, e[:, 1], e[:, 0]] = J
            J = Jd
        seed = int(seeds[0])
        keys = self.engine._info_keys()

        def draw(c, it):
            if not self.engine.embedded:
                return self.draw_union(h, J, c, seed + 7 * it, beta), None
            arrs, chains = [], []
            for b in range(B):
                a, ch = self.engine._draw(array_bqm(c[0] * h[b], c[1] * J[b]), n, int(seeds[b]) + 7 * it, beta,
                                          self.engine.calibrate)
                arrs.append(a)
                chains.append(ch)
            return np.stack(arrs), chains

        def fit(arr, boot):
            eh = -2.0 * arr * h[:, None, :]
            eJ = -2.0 * arr * np.einsum("bsj,bjk->bsk", arr, J)
            return self.pooled_fit(eh, eJ, boot, seed)

        row = {}
        if not self.engine.estimate_beta:
            arr, chains = draw(np.ones(2), 0)
        elif not self.engine.calibrate:
            arr, chains = draw(np.ones(2), 0)
            b, lo, hi, se, bh, bJ, g = fit(arr, self.engine.num_bootstrap)
            row = dict(beta_eff=b, beta_eff_lo=lo, beta_eff_hi=hi, beta_eff_se=se, beta_h=bh, beta_J=bJ,
                       ground_only=float(g))
        else:
            h_max, j_max = declared_ranges(self.engine.sampler)
            ah, aJ = np.max(np.abs(h), initial=0.0), np.max(np.abs(J), initial=0.0)
            c_max = np.array([h_max / ah if ah > 0 else np.inf, j_max / aJ if aJ > 0 else np.inf])
            if self.engine.embedded and self.engine.chain_strength is None and np.isfinite(j_max) and aJ > 0:
                utc = max(uniform_torque()(dimod.BinaryQuadraticModel({}, {(i, j): -J[b, i, j] for i, j in
                                                                 zip(*np.nonzero(np.triu(J[b], 1)))}, 0.0, dimod.SPIN))
                          for b in range(B) if np.any(J[b]))
                c_max[1] = min(c_max[1], j_max / max(utc, 1e-300))
            if not self.engine.split:
                c_max[:] = c_max.min()
            c = np.minimum(1.0, c_max)
            best, it = None, 0
            for it in range(1, self.engine.calibration_steps + 1):
                arr, chains = draw(c, it)
                b, _, _, _, bh, bJ, g = fit(arr, 0)
                bs = np.array([bh, bJ]) if self.engine.split else np.array([b, b])
                bs = np.where(np.isnan(bs), b, bs)
                err = float(np.max(np.abs(bs / beta - 1))) if np.all(np.isfinite(bs)) else np.inf
                if best is None or err < best[0]:
                    best = (err, arr, chains, c.copy())
                if err <= self.engine.calibration_rtol:
                    break
                new = c / 4 if (g or np.any(np.isinf(bs))) else c * beta / bs if np.all(bs > 0) else c
                new = np.minimum(new, c_max)
                if np.allclose(new, c, rtol=1e-12):
                    break
                c = new
            err, arr, chains, c = best
            b, lo, hi, se, bh, bJ, g = fit(arr, self.engine.num_bootstrap)
            tol = self.engine.calibration_rtol + (2 * se / beta if np.isfinite(se) else 0.0)
            at_limit = bool(np.any(c >= c_max * (1 - 1e-9)) and err > self.engine.calibration_rtol)
            row = dict(beta_eff=b, beta_eff_lo=lo, beta_eff_hi=hi, beta_eff_se=se, beta_h=bh, beta_J=bJ,
                       scale_h=c[0], scale_J=c[1], calibration_iterations=it, calibration_error=err,
                       calibrated=float(err <= tol and not g), ground_only=float(g), at_range_limit=float(at_limit))
        diag = np.tile(np.array([row.get(k, np.nan) for k in keys], np.float64), (B, 1))
        if chains is not None:
            for j, k in enumerate(CHAIN_KEYS):
                diag[:, keys.index(k)] = [ch[j] for ch in chains]
        return arr.astype(dtype), diag.astype(dtype)

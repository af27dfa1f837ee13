"""Causal attention models solved prefix bucket by prefix bucket (``isingattn.causal``)
against the same models solved whole, side by side in one run.

A causal model (query ``i`` sees spins ``0..i``) equals the non-causal model with the
lower-triangular mask. Engines given ``causal=True`` solve each bucket of prefix lengths
on its own spins; given the mask, they run every query on all ``T`` spins. Both are
timed here on the same inputs: ``B`` sequences × ``T`` queries sharing one ``J`` (as one
attention head's), float32, forward marginals, jit-compiled, best of
``--repeats`` after compile, the two variants interleaved so they see the same load.

Agreement: Exact's two means must match (max |Δm|). The samplers draw different random
streams in the two layouts; for them the column gives the difference of the two means
(RMS and max over active spins) in units of their combined standard error (of ``s``, or of ``tanh(β(h + J s))``
when Rao-Blackwellized; draws treated as independent): the same distribution gives an
RMS near 1, and a max that grows slowly with the number of spins (t-distributed with
``S - 1`` degrees of freedom, ``S`` = draws per query).

Run:  python benchmarks/causal.py            (about 5 minutes on 2 CPU cores)
      python benchmarks/causal.py --only dqa --repeats 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import IsingModel
from isingattn.inference.dqa import DQA
from isingattn.inference.exact import Exact
from isingattn.inference.mcmc import Gibbs, SQA

ENGINES = {  # name -> (T, engine); sampler settings are those of the training grid
    "exact": (20, lambda: Exact()),
    "dqa": (12, lambda: DQA(calibrate=False, kl_max_n=0, num_shots=64, rao_blackwell=True)),
    "sqa": (12, lambda: SQA(num_reads=16, num_sweeps=16, thermal_sweeps=16, rao_blackwell=True)),
    "gibbs": (12, lambda: Gibbs(num_samples=64, num_warmup=32, diagnostics=False)),
}


def inputs(T: int, B: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(B, T, T)).astype(np.float32)
    J = rng.normal(size=(1, 1, T, T)).astype(np.float32) * 0.3 / np.sqrt(T)  # one J for all, as one head's
    return jnp.asarray(h), jnp.asarray((J + np.swapaxes(J, -1, -2)) * (1 - np.eye(T, dtype=np.float32)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64, help="sequences B (queries: B x T)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="*", default=list(ENGINES), choices=list(ENGINES))
    args = p.parse_args(argv)
    print(f"Causal models, bucketed (causal=True) vs whole (lower-triangular mask); B={args.batch} sequences, "
          f"float32; jax {jax.__version__}, {jax.default_backend()}, os.cpu_count() = {os.cpu_count()}, "
          f"1-min load {os.getloadavg()[0]:.2f}\n")
    rows = []
    for name in args.only:
        T, make = ENGINES[name]
        eng = make()
        h, J = inputs(T, args.batch)
        tri = jnp.tril(jnp.ones((T, T), bool))
        runs = {
            "bucketed": jax.jit(lambda h, J, k: (lambda o: (o.mean, o.samples))(
                eng.marginals(IsingModel(h, J, causal=True), key=k))),
            "whole": jax.jit(lambda h, J, k: (lambda o: (o.mean, o.samples))(
                eng.marginals(IsingModel(h, J, mask=tri), key=k))),
        }
        key = jax.random.PRNGKey(1)
        out, compile_s, best = {}, {}, {v: np.inf for v in runs}
        for v, f in runs.items():
            t = time.perf_counter()
            out[v] = jax.block_until_ready(f(h, J, key))
            compile_s[v] = time.perf_counter() - t
        for _ in range(args.repeats):
            for v, f in runs.items():
                t = time.perf_counter()
                jax.block_until_ready(f(h, J, key))
                best[v] = min(best[v], time.perf_counter() - t)
        if name == "exact":
            agree = f"max abs Δm {float(jnp.max(jnp.abs(out['bucketed'][0] - out['whole'][0]))):.1e}"
        else:  # the same distribution in both layouts: distance in units of 4 combined SE
            # SE of the reported statistic: s, or tanh(β(h + J s)) for Rao-Blackwellized means
            hm, Jm = (np.asarray(x) for x in IsingModel(h, J, causal=True).masked_parameters())
            stat = lambda s: (np.tanh(hm[..., None, :] + np.einsum("...jk,...sk->...sj", Jm, s))
                              if getattr(eng, "rao_blackwell", False) else s)
            (mb, sb), (mw, sw) = ([np.asarray(x) for x in out[v]] for v in runs)
            se2 = lambda s: stat(s).var(-2) / s.shape[-2]
            se = np.sqrt(se2(sb) + se2(sw))
            z = np.abs(mb - mw)[se > 0] / se[se > 0]  # spins that vary in some draw
            agree = f"Δm / SE: rms {float(np.sqrt(np.mean(z ** 2))):.2f}, max {float(z.max()):.1f} ({z.size} spins)"
        rows.append((name, T, best["bucketed"], best["whole"], compile_s["bucketed"], compile_s["whole"], agree))
        print(f"  done {name}", file=sys.stderr, flush=True)
    print(f"\n(load average at end {os.getloadavg()[0]:.2f})\n")
    print("| engine | T | bucketed | whole (masked) | speed-up | compile bucketed / whole | agreement |")
    print("|---|---|---|---|---|---|---|")
    for name, T, b, w, cb, cw, agree in rows:
        print(f"| {name} | {T} | {b * 1e3:.1f} ms | {w * 1e3:.1f} ms | {w / b:.2f}x | {cb:.1f} s / {cw:.1f} s | {agree} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

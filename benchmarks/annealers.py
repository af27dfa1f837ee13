"""Annealers side by side on the sparse BQMs of annealer topologies: our ``SQASampler``
(anneal mode, its defaults: 1,000 sweeps, 8 Trotter slices, β and Γ schedule derived from
the edge list), dwave-samplers' ``PathIntegralAnnealingSampler`` (continuous-time
worldlines, its defaults: 1,000 sweeps) and ``SimulatedAnnealingSampler`` (its defaults),
and openjij's ``SQASampler`` (its defaults), in one run.

Graphs: Pegasus P6 and P16, Chimera C16, Zephyr Z6 (dwave-networkx). Instances on each: ±J
couplings with h = 0, and Gaussian couplings ``J ~ N(0, 1)`` with fields ``h ~ N(0, 1)``
(numpy Generator seeded per graph and kind).

Per sampler and instance: ours and SA ``--reads`` reads (16), PIA ``--pia-reads`` (64: its
hit rate is small), openjij ``--openjij-reads`` (on the ±J instances only, one call per read
with seed ``r``, since it restarts every read from the same seed; its C++ core took ~16 s
per read on Chimera C16; ``--skip-openjij`` leaves it out):

* ``first`` and ``warm``: wall time of the first call on the instance's graph (ours: with
  compilation; the two kinds of one graph share one compiled program; the others compile
  nothing, and their one call is both) and of a second call with another seed (the numbers
  of the table come from the warm call);
* ``mean E``, ``min E`` of the warm call's reads (energies from ``bqm.energies``);
* ``hits``: the reads within 1% of the best energy any read of any sampler found on that
  instance (``E ≤ E_best + 0.01 |E_best|``), ``p`` their fraction, with its 95%
  Clopper–Pearson interval; ``TTT``: time to target, ``(time per read) / p``, and its
  interval from p's (inf when p = 0 or p's lower end is 0);
* ``TTT PIA / ours``: the speed-up, ours taken at the better of its two settings (below), and
  its conservative end (PIA's TTT at the top of its p interval over ours at the bottom of
  ours): "≥ x" holds at 95% on both sides;
* ``= time``: ours again, with ``num_sweeps`` scaled so that its warm time per read matches
  ``PathIntegralAnnealingSampler``'s on the ±J instance (``1000 · t_PIA / t_ours`` per
  read, 2 significant digits; the Gaussian instance of the graph reuses it), timed warm, with
  ``--eq-reads`` reads (64; the same compiled program as 16): mean and min energy at equal
  wall time per read.

Timing is wall-clock (``time.perf_counter``) around ``sample``. The machine's 1-minute load
average is printed at the start and end. Usage: ``python benchmarks/annealers.py``
(``--graphs P6 C16``, ``--reads 8``, ``--pia-reads 32``, ``--skip-openjij``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _table import table_lines  # noqa: E402

GRAPHS = ("P6", "C16", "Z6", "P16")


def graph(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import dwave_networkx as dnx
    kind, m = name[0], int(name[1:])
    return {"P": dnx.pegasus_graph, "C": dnx.chimera_graph, "Z": dnx.zephyr_graph}[kind](m)


def instance(G, kind, seed):
    import dimod

    rng = np.random.default_rng(seed)
    E = G.number_of_edges()
    if kind == "±J":
        h, J = np.zeros(G.number_of_nodes()), rng.choice([-1.0, 1.0], E)
    else:
        h, J = rng.normal(size=G.number_of_nodes()), rng.normal(size=E)
    bqm = dimod.BQM(dimod.SPIN)
    bqm.add_linear_from(zip(G.nodes, h.tolist()))
    bqm.add_quadratic_from((u, v, j) for (u, v), j in zip(G.edges, J.tolist()))
    return bqm


def timed(f):
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


def energies(ss, bqm):
    return np.asarray(bqm.energies((ss.record.sample, ss.variables)))


def openjij_sample(bqm, reads, seed0):
    import dimod
    import openjij as oj

    sampler = oj.SQASampler()
    rows = []
    for r in range(reads):
        ss = sampler.sample(bqm, num_reads=1, seed=seed0 + r)
        rows.append(ss.record.sample[0])
    # openjij's response keeps the BQM's variables; rebuild one sample set of all reads
    return dimod.SampleSet.from_samples_bqm((np.array(rows), list(ss.variables)), bqm)


def clopper_pearson(k: int, n: int, level: float = 0.95):
    """The two-sided ``level`` interval of a binomial proportion from ``k`` hits in ``n``."""
    from scipy.stats import beta

    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="+", default=list(GRAPHS), choices=GRAPHS)
    ap.add_argument("--reads", type=int, default=16, help="reads of ours and SA per call")
    ap.add_argument("--pia-reads", type=int, default=64, help="reads of PIA per call")
    ap.add_argument("--eq-reads", type=int, default=64,
                    help="reads of ours at PIA's time per read (the same program: calls of READS_PER_CALL)")
    ap.add_argument("--skip-openjij", action="store_true")
    ap.add_argument("--openjij-reads", type=int, default=2, help="openjij's reads (±J instances only)")
    args = ap.parse_args(argv)

    from dwave.samplers import PathIntegralAnnealingSampler, SimulatedAnnealingSampler

    from isingattn.inference.dimod import SQASampler

    R, RP = args.reads, args.pia_reads
    print(f"load average at start: {os.getloadavg()[0]:.2f}; reads per call {R} (PIA {RP})", flush=True)
    samplers = {
        "ours SQASampler": lambda bqm, seed, **kw: SQASampler().sample(bqm, num_reads=R, seed=seed, **kw),
        "PIA (dwave)": lambda bqm, seed: PathIntegralAnnealingSampler().sample(bqm, num_reads=RP, seed=seed),
        "SA (dwave)": lambda bqm, seed: SimulatedAnnealingSampler().sample(bqm, num_reads=R, seed=seed),
    }
    if not args.skip_openjij:  # one call per read, ~10x slower than ours: fewer reads, ±J only
        samplers["openjij SQA"] = lambda bqm, seed: openjij_sample(bqm, args.openjij_reads, 1000 * seed)
    rows, summary = [], []
    for gname in args.graphs:
        G = graph(gname)
        for kind in ("±J", "gauss"):
            bqm = instance(G, kind, seed=2 * GRAPHS.index(gname) + (kind == "gauss"))
            res = {}
            for name, f in samplers.items():
                if name.startswith("openjij") and kind != "±J":
                    continue
                # only ours compiles, once per graph: the others' first call is their warm call
                first = timed(lambda: f(bqm, 1))[1] if name.startswith("ours") else None
                ss, warm = timed(lambda: f(bqm, 2))
                first = warm if first is None else first
                res[name] = dict(first=first, warm=warm, E=energies(ss, bqm))
                print(f"  {gname} {kind} {name}: first {first:.2f} s, warm {warm:.2f} s, mean E "
                      f"{res[name]['E'].mean():.1f}", flush=True)
            if kind == "±J":  # one equal-time setting per graph: the Gaussian instance reuses its program
                t_pia, t_ours = res["PIA (dwave)"]["warm"] / RP, res["ours SQASampler"]["warm"] / R  # per read
                sweeps = int(float(f"{1000 * t_pia / t_ours:.2g}"))
                samplers["ours SQASampler"](bqm, 3, num_sweeps=sweeps)  # compiles
            ss, t_eq = timed(lambda: SQASampler().sample(bqm, num_reads=args.eq_reads, seed=4, num_sweeps=sweeps))
            E_eq = energies(ss, bqm)
            best = min(min(r["E"].min() for r in res.values()), E_eq.min())
            target = best + 0.01 * abs(best)
            ttt = {}

            def ttt_row(label, first, t_call, E):
                k, N = int(np.sum(E <= target)), len(E)
                lo, hi = clopper_pearson(k, N)
                per = t_call / N
                t = (per / (k / N) if k else float("inf"), per / hi, per / lo if lo else float("inf"))
                rows.append([gname, kind, label, first, f"{t_call:.2f}", f"{E.mean():.1f}", f"{E.min():.1f}",
                             f"{k}/{N}", f"{k / N:.2f} [{lo:.2f}, {hi:.2f}]", f"{t[0]:.3g} [{t[1]:.3g}, {t[2]:.3g}]"])
                return t

            for name, r in res.items():
                ttt[name] = ttt_row(name, f"{r['first']:.2f}", r["warm"], r["E"])
            eq = ttt_row(f"ours, = time ({sweeps} sweeps)", "", t_eq, E_eq)
            # ours: the better of its two settings (1,000 sweeps, or PIA's time per read)
            ours, pia = min(ttt["ours SQASampler"], eq, key=lambda t: t[2]), ttt["PIA (dwave)"]
            ratio = pia[0] / ours[0] if np.isfinite(ours[0]) else 0.0
            bound = pia[1] / ours[2] if np.isfinite(ours[2]) else 0.0
            for r in rows[-len(res) - 1:]:
                print("  row: " + " | ".join(r), flush=True)
            summary.append([gname, kind, f"{best:.1f}", f"{E_eq.mean():.1f}",
                            f"{res['PIA (dwave)']['E'].mean():.1f}",
                            "yes" if E_eq.mean() <= res["PIA (dwave)"]["E"].mean() else "no",
                            f"{ratio:.3g}x" if np.isfinite(ratio) else "inf (PIA: 0 hits)", f"≥ {bound:.3g}x",
                            f"{res['ours SQASampler']['first']:.1f}"])
    hdr = ["graph", "J", "sampler", "first (s)", "warm (s)", "mean E", "min E", "hits", "p (1%) [95%]",
           "TTT (s) [95%]"]
    print()
    print("\n".join(table_lines(hdr, rows, left=3, group_col=1)))
    print()
    print("\n".join(table_lines(["graph", "J", "best E", "ours mean E at PIA's time", "PIA mean E", "ours ≤ PIA",
                                 "TTT PIA / ours", "at 95%", "ours first call (s)"], summary, left=2)))
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

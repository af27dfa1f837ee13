"""Annealers side by side on the sparse BQMs of annealer topologies: our ``SQASampler``
(anneal mode, its defaults: 1,000 sweeps, 8 Trotter slices, β and Γ schedule derived from
the edge list), dwave-samplers' ``PathIntegralAnnealingSampler`` (continuous-time
worldlines, its defaults: 1,000 sweeps) and ``SimulatedAnnealingSampler`` (its defaults),
and openjij's ``SQASampler`` (its defaults), in one run.

Graphs: Pegasus P6 and P16, Chimera C16, Zephyr Z6 (dwave-networkx). Instances on each: ±J
couplings with h = 0, and Gaussian couplings ``J ~ N(0, 1)`` with fields ``h ~ N(0, 1)``
(numpy Generator seeded per graph and kind).

Per sampler and instance, ``--reads`` reads (openjij: ``--openjij-reads``, on the ±J
instances only, one call per read with seed ``r``, since it restarts every read from the
same seed; its C++ core took ~16 s per read on Chimera C16, which the 10-minute budget of a
full run cannot give every instance):

* ``first`` and ``warm``: wall time of the first call on the instance's graph (ours: with
  compilation; the two kinds of one graph share one compiled program; the others compile
  nothing, and their one call is both) and of a second call with another seed (the numbers
  of the table come from the warm call);
* ``mean E``, ``min E`` of the warm call's reads (energies from ``bqm.energies``);
* ``p``: the fraction of reads within 1% of the best energy any read of any sampler found
  on that instance (``E ≤ E_best + 0.01 |E_best|``); ``TTT``: time to target,
  ``(time per read) / p`` (inf when p = 0), and ``TTT PIA / ours``, the speed-up;
* ``= time``: ours again, with ``num_sweeps`` scaled so that its warm time matches
  ``PathIntegralAnnealingSampler``'s on the ±J instance (``1000 · t_PIA / t_ours``, 2
  significant digits; the Gaussian instance of the graph reuses it), timed warm: mean and
  min energy at equal wall time.

Timing is wall-clock (``time.perf_counter``) around ``sample``. The machine's 1-minute load
average is printed at the start and end. Usage: ``python benchmarks/annealers.py``
(``--graphs P6 C16``, ``--reads 8``, ``--skip-openjij``).
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="+", default=list(GRAPHS), choices=GRAPHS)
    ap.add_argument("--reads", type=int, default=4)
    ap.add_argument("--skip-openjij", action="store_true")
    ap.add_argument("--openjij-reads", type=int, default=2, help="openjij's reads (±J instances only)")
    args = ap.parse_args(argv)

    from dwave.samplers import PathIntegralAnnealingSampler, SimulatedAnnealingSampler

    from isingattn.inference.dimod import SQASampler

    R = args.reads
    print(f"load average at start: {os.getloadavg()[0]:.2f}; reads per call {R}", flush=True)
    samplers = {
        "ours SQASampler": lambda bqm, seed, **kw: SQASampler().sample(bqm, num_reads=R, seed=seed, **kw),
        "PIA (dwave)": lambda bqm, seed: PathIntegralAnnealingSampler().sample(bqm, num_reads=R, seed=seed),
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
                t_pia, t_ours = res["PIA (dwave)"]["warm"], res["ours SQASampler"]["warm"]
                sweeps = int(float(f"{1000 * t_pia / t_ours:.2g}"))
                samplers["ours SQASampler"](bqm, 3, num_sweeps=sweeps)  # compiles
            ss, t_eq = timed(lambda: samplers["ours SQASampler"](bqm, 4, num_sweeps=sweeps))
            E_eq = energies(ss, bqm)
            best = min(min(r["E"].min() for r in res.values()), E_eq.min())
            target = best + 0.01 * abs(best)
            ttt = {}
            for name, r in res.items():
                p = float(np.mean(r["E"] <= target))
                ttt[name] = (r["warm"] / len(r["E"])) / p if p > 0 else float("inf")
                rows.append([gname, kind, name, f"{r['first']:.2f}", f"{r['warm']:.2f}", f"{r['E'].mean():.1f}",
                             f"{r['E'].min():.1f}", f"{p:.2f}", f"{ttt[name]:.3g}"])
            p_eq = float(np.mean(E_eq <= target))
            rows.append([gname, kind, f"ours, = time ({sweeps} sweeps)", "", f"{t_eq:.2f}", f"{E_eq.mean():.1f}",
                         f"{E_eq.min():.1f}", f"{p_eq:.2f}", f"{(t_eq / R) / p_eq if p_eq else float('inf'):.3g}"])
            ratio = ttt["PIA (dwave)"] / ttt["ours SQASampler"] if np.isfinite(ttt["ours SQASampler"]) else 0.0
            for r in rows[-len(res) - 1:]:
                print("  row: " + " | ".join(r), flush=True)
            summary.append([gname, kind, f"{best:.1f}", f"{E_eq.mean():.1f}",
                            f"{res['PIA (dwave)']['E'].mean():.1f}",
                            "yes" if E_eq.mean() <= res["PIA (dwave)"]["E"].mean() else "no", f"{ratio:.2f}x",
                            f"{res['ours SQASampler']['first']:.1f}"])
    hdr = ["graph", "J", "sampler", "first (s)", "warm (s)", "mean E", "min E", "p (1%)", "TTT (s)"]
    print()
    print("\n".join(table_lines(hdr, rows, left=3, group_col=1)))
    print()
    print("\n".join(table_lines(["graph", "J", "best E", "ours mean E at PIA's time", "PIA mean E", "ours ≤ PIA",
                                 "TTT PIA / ours", "ours first call (s)"], summary, left=2)))
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

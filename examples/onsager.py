"""The 2D Ising transition, reproduced against the exact solutions.

Left three panels: heat capacity per spin, ⟨|m|⟩ and log Z per spin against K = βJ on
periodic L×L ferromagnets, from annealed importance sampling (AIS with Swendsen–Wang moves:
log Z with its standard error, and the weighted final states), Gibbs sampling, Swendsen–Wang cluster moves and
parallel tempering (PT: log Z by stepping stones; tori up to 32×32), drawn over Kaufman's exact
finite-lattice curves (isingattn.onsager) and Onsager's and Yang's infinite-lattice ones.
Right panel: the mean-field family's free energies (naive, TAP, Bethe) against the exact
one, where each approximation breaks down: naive mean field orders at K = 1/4, Bethe at
tanh K = 1/3, the lattice at K_c = ½ ln(1 + √2).

Run:  python examples/onsager.py --out results/onsager         (about 11 minutes on 2 cores)
      python examples/onsager.py --quick                      (a smoke test: small tori, few β)
"""

import argparse
import os
import sys
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from isingattn import IsingModel, atomic, graphs, onsager, thermo  # noqa: E402
from isingattn.errors import IsingInputError  # noqa: E402
from isingattn.inference.mcmc import AIS, Gibbs, ParallelTempering, SwendsenWang  # noqa: E402
from isingattn.inference.meanfield import MeanField  # noqa: E402
from isingattn.cli import report  # noqa: E402  (the CLI's one line, exit status 2)

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--sizes", default="16,32,64", help="torus sides L (comma-separated)")
p.add_argument("--betas", type=int, default=13, help="number of K values in [0.30, 0.60]")
p.add_argument("--quick", action="store_true", help="sizes 8,16 and 5 K values")
p.add_argument("--out", default="runs/examples/onsager", help="output folder")
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()
try:
    sizes = [8, 16] if args.quick else [int(x) for x in args.sizes.split(",")]
    if not sizes or min(sizes) < 3:
        raise ValueError
except ValueError:
    sys.exit(report("onsager.py", IsingInputError(f"--sizes {args.sizes}: expected comma-separated integers ≥ 3, "
                                                  "e.g. 16,32,64")))
nb = 5 if args.quick else args.betas
Ks = np.linspace(0.30, 0.60, nb)
key = jax.random.key(args.seed)
PT_MAX_L = 32


def torus(L):
    g = graphs.lattice([L, L], periodic=True)
    return IsingModel(np.zeros(g.n), graphs.random_couplings(key, g, "ferro", 1.0, dtype=np.float64), beta=1.0)


t0 = time.perf_counter()
scans, exact, rows = [], {}, []
for L in sizes:
    model = torus(L)
    q = args.quick
    # AIS anneals with Swendsen–Wang moves: single-spin moves lag behind the anneal at and above
    # K_c, and AIS's SE there is then not honest (benchmarks/README.md, `ais.py`)
    engines = [("AIS", AIS(num_chains=64 if q else 128, num_temps=128 if q else 512, transition="swendsen-wang")),
               ("Gibbs", Gibbs(num_warmup=200, num_samples=400 if q else 2000, num_chains=4)),
               ("Swendsen–Wang", SwendsenWang(num_warmup=50 if q else 200, num_samples=200 if q else 2000, num_chains=4))]
    if L <= PT_MAX_L:  # PT's 16 replicas cost 16 Gibbs runs; on 64×64 that is most of the example's time
        engines.append(("PT", ParallelTempering(num_warmup=200 if q else 1000, num_samples=400 if q else 4000,
                                                num_chains=4, num_replicas=8 if q else 16)))
    for name, eng in engines:
        sc = thermo.scan(model, eng, Ks, key=jax.random.fold_in(key, L), progress=True)
        scans.append(sc._replace(engine=f"{name} L={L}"))
    exact[f"Kaufman L={L}"] = (Ks, {"heat_capacity": onsager.torus_heat_capacity(L, L, Ks),
                                    "free_energy": -np.asarray(onsager.torus_log_z(L, L, Ks)) / (Ks * L * L),
                                    "log_z": np.asarray(onsager.torus_log_z(L, L, Ks)) / (L * L)})
    ais = scans[-len(engines)]
    for K, lz, se in zip(Ks, ais.log_z, ais.log_z_se):
        ref = float(onsager.torus_log_z(L, L, K))
        rows.append((L, K, ref, lz, lz - ref, se))
Kf = np.linspace(0.30, 0.60, 301)
inf = {"heat_capacity": onsager.onsager_heat_capacity(Kf), "abs_magnetization": onsager.yang_magnetization(Kf),
       "free_energy": -np.asarray(onsager.onsager_log_z_per_spin(Kf)) / Kf,
       "log_z": onsager.onsager_log_z_per_spin(Kf)}
exact["Onsager / Yang, L = ∞"] = (Kf, inf)

# the mean-field family's free energy per spin on the largest torus, against Kaufman's
L = max(sizes)
model = torus(L)
Km = np.linspace(0.05, 0.9, 35)
mf = {}
for method in ("naive", "tap", "bp"):
    vals = []
    for K in Km:
        out = MeanField(method=method, max_iter=5000).marginals(IsingModel(model.h, model.J, K))
        vals.append(float(out.log_z) / model.n)
    mf[method] = np.array(vals)
kauf = np.asarray(onsager.torus_log_z(L, L, Km)) / model.n

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig = thermo.plot(scans, exact, quantities=("heat_capacity", "abs_magnetization", "log_z"),
                  title=f"2D Ising ferromagnet on L×L tori (L = {', '.join(map(str, sizes))})")
atomic.savefig(fig, f"{args.out}/onsager.png", dpi=120)
fig2, ax = plt.subplots(figsize=(6, 4.2))
for method, label in (("naive", "naive mean field (lower bound)"), ("tap", "TAP"), ("bp", "Bethe (BP)")):
    ax.plot(Km, mf[method] - kauf, label=label)
ax.axhline(0, color="k", lw=0.8)
for x, name in ((0.25, "MF: K = 1/4"), (np.arctanh(1 / 3), "Bethe: tanh K = 1/3"), (onsager.K_C, "exact K_c")):
    ax.axvline(x, ls=":", lw=1, color="gray")
    ax.annotate(name, (x, ax.get_ylim()[1]), rotation=90, fontsize=7, va="top", ha="right")
ax.set(xlabel="K = βJ", ylabel="(log Z_approx − log Z_exact) / n", title=f"free energies against Kaufman's, {L}×{L} torus")
ax.legend(fontsize=8)
fig2.tight_layout()
atomic.savefig(fig2, f"{args.out}/meanfield_free_energy.png", dpi=120)
table = ["| L | K | exact log Z (Kaufman) | AIS log Z | error | AIS SE |", "|---:|---:|---:|---:|---:|---:|"]
table += [f"| {L} | {K:.4f} | {ref:.6f} | {lz:.6f} | {err:+.4f} | {se:.4f} |" for L, K, ref, lz, err, se in rows]
atomic.write_text(f"{args.out}/onsager.md", "# AIS log Z on periodic L×L ferromagnets against Kaufman\n\n"
                  + "\n".join(table) + f"\n\nCommand: python examples/onsager.py {' '.join(sys.argv[1:])} "
                  f"({time.perf_counter() - t0:.0f} s on {os.cpu_count()} CPUs)\n")
print("\n".join(table))
print(f"wrote {args.out}/onsager.png, meanfield_free_energy.png and onsager.md ({time.perf_counter() - t0:.0f} s)")

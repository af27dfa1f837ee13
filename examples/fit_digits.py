"""Fitting Ising models to real data: scikit-learn's 8×8 handwritten digits.

The 1,797 images (bundled with scikit-learn, no download) are binarized at half of full
intensity (pixel > 8 of 16 -> +1) into 64 spins and split into train and held-out test
images. Four models are fitted to the training images:

* independent pixels (J = 0): the closed-form baseline;
* a nearest-neighbour lattice model by exact maximum likelihood (an 8×8 grid in row-major
  order has bandwidth 8, so Banded gives log Z exactly);
* a dense model by symmetric pseudo-likelihood (PLM);
* a dense model by persistent contrastive divergence with parallel tempering (PCD-PT).

Each is scored on the held-out images by the log-likelihood per image: exact for the
baseline and the lattice model, an AIS estimate with its standard error for the dense
models. The figures show draws from each model as images (exact FFBS draws for the lattice,
parallel tempering for the dense models) beside real test digits, and the learned couplings
on the pixel grid (networkx), red for J > 0 (neighbours agree), blue for J < 0.

Run:  python examples/fit_digits.py --out results/fit_digits     (a few minutes on 2 cores)
      python examples/fit_digits.py --quick                       (a smoke test)
Needs scikit-learn: pip install "isingattn[learn]".
"""

import argparse
import os
import sys
import time

import jax
import numpy as np

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--out", default="runs/examples/fit_digits", help="output folder")
p.add_argument("--quick", action="store_true", help="few PCD steps and short AIS runs (a smoke test)")
p.add_argument("--test-size", type=int, default=397, help="held-out images (of 1,797)")
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()
from isingattn.errors import IsingInputError  # noqa: E402
from isingattn.cli import report  # noqa: E402  (the CLI's one line, exit status 2)

try:
    from sklearn.datasets import load_digits
except ImportError:
    sys.exit(report("fit_digits.py", IsingInputError('needs scikit-learn for its bundled digits; '
                                                     'pip install "isingattn[learn]"')))
if not 1 <= args.test_size < 1797:
    sys.exit(report("fit_digits.py", IsingInputError(f"--test-size {args.test_size}: expected 1..1796")))

jax.config.update("jax_enable_x64", True)  # the log-likelihoods are sums over 64 spins and ~400 images

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402

from isingattn import IsingDistribution, IsingModel, atomic  # noqa: E402
from isingattn.graphs import lattice  # noqa: E402
from isingattn.inference.mcmc import AIS, ParallelTempering  # noqa: E402
from isingattn.learn import fit, log_likelihood  # noqa: E402

t_start = time.perf_counter()
key = jax.random.key(args.seed)
digits = load_digits()
X = np.where(digits.data > 8, 1.0, -1.0)  # [1797, 64] spins, row-major pixels
order = np.asarray(jax.random.permutation(jax.random.fold_in(key, 0), X.shape[0]))
test, train = X[order[: args.test_size]], X[order[args.test_size:]]
n = X.shape[1]
print(f"digits: {train.shape[0]} train and {test.shape[0]} test images of {n} pixels; "
      f"{int(np.sum(train.min(0) == train.max(0)))} pixels constant in the training images")

quick = args.quick
L2 = 1e-2  # keeps the fields of pixels that are constant in the data finite
AIS_KW = dict(num_chains=64, num_temps=256) if quick else dict(num_chains=256, num_temps=2048)
PT_DRAWS = ParallelTempering(num_warmup=200 if quick else 2000, num_samples=200 if quick else 4000, num_chains=4,
                             num_replicas=8 if quick else 16)

rows, models = [], {}


def score(name, model, wall, how):
    """Held-out log-likelihood per image: exact where log Z is, else AIS with its SE."""
    k = jax.random.fold_in(key, len(rows) + 1)
    ll = log_likelihood(model, test, engine=None if how == "exact" else AIS(**AIS_KW), key=k)
    se = float(ll.log_z_se)
    rows.append((name, how, float(ll.value), se, float(ll.sample_se), wall))
    models[name] = model
    print(f"  {name}: held-out log-likelihood {float(ll.value):.3f} per image ({ll.kind} log Z"
          + (f", SE {se:.3f})" if ll.kind != "exact" else ")") + f"; fit {wall:.1f} s")


# independent pixels: m_i = mean of the data, h_i = atanh(m_i) / β, shrunk like the others
t0 = time.perf_counter()
m = np.clip(train.mean(0), -1 + 1e-3, 1 - 1e-3)
score("independent", IsingModel(np.arctanh(m), np.zeros((n, n))), time.perf_counter() - t0, "exact")

grid = lattice((8, 8))
res = fit(train, method="exact", graph=grid, l2=L2)
score("lattice (exact ML)", res.model, res.info["wall_time"], "exact")

res = fit(train, method="plm", l2=L2)
score("dense (PLM)", res.model, res.info["wall_time"], "estimate")

res = fit(train, method="pcd", sampler="pt", l2=L2, num_steps=100 if quick else 2000, num_chains=64,
          key=jax.random.fold_in(key, 99), progress=not quick)
score("dense (PCD-PT)", res.model, res.info["wall_time"], "estimate")

os.makedirs(args.out, exist_ok=True)
table = ["| model | log Z | held-out log-likelihood per image | SE of log Z | SE over images | fit (s) |",
         "|---|---|---:|---:|---:|---:|"]
for name, how, v, se, sse, wall in rows:
    table.append(f"| {name} | {how} | {v:.3f} | {se:.3f} | {sse:.3f} | {wall:.1f} |")
atomic.write_text(os.path.join(args.out, "digits.md"),
                  f"# Binarized 8×8 digits: {train.shape[0]} train, {test.shape[0]} held-out images\n\n"
                  + "\n".join(table) + "\n")
print("\n".join(table))

# draws from each model beside real test digits
shown = 8
fig, axes = plt.subplots(len(models) + 1, shown, figsize=(shown * 0.9, (len(models) + 1) * 1.0))
panels = {"test images": test[:shown]}
for i, (name, model) in enumerate(models.items()):
    k = jax.random.fold_in(key, 1000 + i)
    if name.startswith("dense"):
        out = PT_DRAWS.marginals(model, key=k)
        s = np.asarray(out.samples).reshape(-1, n)
        panels[name] = s[np.linspace(0, len(s) - 1, shown).astype(int)]  # spread over the run, not neighbours
    else:  # exact draws: forward-filtering backward-sampling along the band (J = 0: bandwidth 0)
        panels[name] = np.asarray(IsingDistribution(model.h, model.J, beta=float(model.beta)).sample(k, (shown,)))
for r, (name, imgs) in enumerate(panels.items()):
    for c in range(shown):
        ax = axes[r, c]
        ax.imshow(imgs[c].reshape(8, 8), cmap="gray_r", vmin=-1, vmax=1)
        ax.set_xticks([]), ax.set_yticks([])
    axes[r, 0].set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
fig.suptitle("Binarized digits: held-out images and draws from each fitted model", fontsize=9)
fig.tight_layout()
atomic.savefig(fig, os.path.join(args.out, "samples.png"), dpi=120)

# the learned couplings on the pixel grid: the 60 strongest between pixels that vary in the
# training images (couplings of constant pixels are set by the regularizer, not by the data)
fig, axes = plt.subplots(1, 3, figsize=(12, 4.8))
pos = {i: (i % 8, -(i // 8)) for i in range(n)}
varies = train.min(0) != train.max(0)
for ax, name in zip(axes, [k for k in models if k != "independent"]):
    model = models[name]
    J = np.asarray(model.J.to_dense() if hasattr(model.J, "to_dense") else model.J)
    iu = [(i, j) for i, j in zip(*np.triu_indices(n, 1)) if varies[i] and varies[j] and J[i, j] != 0]
    top = sorted(iu, key=lambda e: -abs(J[e]))[:60]
    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_weighted_edges_from((i, j, J[i, j]) for i, j in top)
    w = np.array([d["weight"] for *_, d in G.edges(data=True)])
    nx.draw_networkx_nodes(G, pos, ax=ax, node_size=22, node_color=np.where(varies, "0.35", "0.85"))
    nx.draw_networkx_edges(G, pos, ax=ax, edge_color=np.where(w > 0, "tab:red", "tab:blue"),
                           width=2.5 * np.abs(w) / np.abs(w).max() + 0.3, alpha=0.8)
    ax.set_title(f"{name}\n60 strongest |J| (≥ {np.abs(w).min():.2f}); red J > 0, blue J < 0", fontsize=9)
    ax.set_aspect("equal"), ax.axis("off")
fig.suptitle("Learned couplings on the 8×8 pixel grid (light nodes: pixels constant in the training images)", fontsize=9)
fig.tight_layout(rect=(0, 0, 1, 0.93))
atomic.savefig(fig, os.path.join(args.out, "couplings.png"), dpi=120)
print(f"wrote {args.out}/digits.md, samples.png and couplings.png ({time.perf_counter() - t_start:.0f} s)")

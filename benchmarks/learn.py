"""Learning Ising models from data: isingattn.learn against scikit-learn, side by side
in one run.

1. **PLM vs scikit-learn.** Data: open L×L lattices (L = 10 and 32, n = 100 and 1,024) with
   ferromagnetic couplings ``J_e ~ U(0.2, 0.5)`` and fields ``h ~ N(0, 0.1²)`` at β = 1 (below
   the critical coupling on average: correlated, not ordered), 20,000 samples each from this
   package's Swendsen–Wang engine (100 chains, 200 warmup moves, every 5th move kept).
   * ``isingattn.learn.fit(s, method="plm")``: symmetric pseudo-likelihood over all pairs
     (no graph, as sklearn below), float32, ``l2 = 4β²/(C S)``, the penalty that matches
     scikit-learn's ``C``; the wall time includes compilation (a fresh program per shape),
     and the warm time (a second call) is shown too.
   * scikit-learn: ``LogisticRegression(C=1.0)`` (lbfgs, float64) fitted once per spin on the
     other n - 1 spins, what practitioners run for asymmetric PLM; ``J_ij = coef / 2``,
     symmetrized ``(J_ij + J_ji) / 2``.
   * The same two with the lattice given: ``fit(..., graph=lattice)`` against
     LogisticRegression on each spin's lattice neighbours only.
   Coupling RMSE against the true couplings over all pairs (zeros off the lattice) and over
   the lattice's edges. Target: PLM ≥ 10× faster, RMSE no worse.
2. **PLM on a 100×100 lattice** (n = 10,000, graph given, 20,000 samples from Swendsen–Wang):
   wall time and the peak resident memory of a fresh process that loads the data and fits
   (its resident memory before the fit is shown too).
3. **Exact ML at n = 20**: a dense model (``h ~ N(0, 0.3²)``, ``J_ij ~ N(0, 0.5²/n)``),
   20,000 exact samples (inverse-CDF draws over the 2^20 configurations, weights from the
   project's energy), ``fit(s, method="exact", l2=0)`` to a moment error of 1e-4 (float32): wall time
   with and without compilation, iterations, the moment error reached.

Run:  python benchmarks/learn.py              (about 40 minutes on 2 loaded cores: scikit-learn
                                              on the 32×32 lattice takes most of it)
      python benchmarks/learn.py --sizes 10 --skip-100 --skip-exact     (a minute)
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np


def lattice_data(L: int, S: int, seed: int, beta: float = 1.0, chains: int = 100, max_floats: int = 2**26):
    """(graph, h, w, spins [S, n] int8): Swendsen–Wang samples of the lattice model above,
    generated in runs of at most ``max_floats`` float32 samples."""
    import jax
    import jax.numpy as jnp

    from isingattn import IsingModel, graphs, inference
    from isingattn.sparse import SparseCouplings

    g = graphs.lattice((L, L))
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    w = jax.random.uniform(k1, (g.E,), jnp.float32, 0.2, 0.5)
    h = 0.1 * jax.random.normal(k2, (g.n,), jnp.float32)
    model = IsingModel(h, SparseCouplings(g, w), beta=beta)
    per_run = max(chains, min(S, max_floats // g.n) // chains * chains)
    eng = inference.get("swendsen-wang", num_warmup=200, num_samples=per_run // chains * 5, thin=5,
                        num_chains=chains, diagnostics=False, keep_samples=True)
    out = []
    for r in range(-(-S // per_run)):
        out.append(np.asarray(eng.marginals(model, key=jax.random.fold_in(k3, r)).samples).astype(np.int8))
    return g, np.asarray(h, np.float64), np.asarray(w, np.float64), np.concatenate(out)[:S]


def dense_true(n, edges, w):
    J = np.zeros((n, n))
    J[edges[:, 0], edges[:, 1]] = w
    return J + J.T


def rmse(J, Jt, edges):
    iu = np.triu_indices(Jt.shape[0], 1)
    return (float(np.sqrt(np.mean((J[iu] - Jt[iu]) ** 2))),
            float(np.sqrt(np.mean((J[edges[:, 0], edges[:, 1]] - Jt[edges[:, 0], edges[:, 1]]) ** 2))))


def sklearn_plm(s, C: float, nbrs=None):
    """Per-spin LogisticRegression, symmetrized. ``nbrs``: each spin's features (default all
    other spins). Returns (J [n, n], seconds)."""
    from sklearn.linear_model import LogisticRegression

    X = s.astype(np.float64)
    n = X.shape[1]
    A = np.zeros((n, n))
    t = time.perf_counter()
    for i in range(n):
        cols = np.delete(np.arange(n), i) if nbrs is None else np.asarray(nbrs[i])
        lr = LogisticRegression(C=C).fit(X[:, cols], X[:, i])
        A[i, cols] = lr.coef_[0] / 2  # P(s_i = 1 | rest) = σ(2β(h_i + Σ J_ij s_j)), β = 1
    return (A + A.T) / 2, time.perf_counter() - t


def ours_plm(s, l2, graph=None):
    from isingattn.learn import fit

    t = time.perf_counter()
    r = fit(s, method="plm", l2=l2, graph=graph, progress=False, check_moments=False)
    first = time.perf_counter() - t
    t = time.perf_counter()
    r = fit(s, method="plm", l2=l2, graph=graph, progress=False, check_moments=False)
    warm = time.perf_counter() - t
    J = r.model.J
    J = np.asarray(J.to_dense() if hasattr(J, "to_dense") else J, np.float64)
    return J, first, warm, r.info


def part_plm(sizes, C: float, rows: list, cases=("all pairs", "graph given")):
    for L in sizes:
        t = time.perf_counter()
        g, h, w, s = lattice_data(L, 20000, seed=L)
        gen = time.perf_counter() - t
        S, n = s.shape
        Jt = dense_true(n, g.edges, w)
        l2 = 4.0 / (C * S)  # sklearn's ½|c|²/(C S) per spin, c = 2βJ, summed over the two rows holding J_ij
        print(f"\n## {L}x{L} lattice: n = {n}, S = {S} (Swendsen–Wang, {gen:.1f} s), l2 = {l2:.3g} (C = {C})", flush=True)
        for graph in (None, g):
            tag = "graph given" if graph is not None else "all pairs"
            if tag not in cases:
                continue
            J, first, warm, info = ours_plm(s, l2, graph)
            r_ours = rmse(J, Jt, g.edges)
            print(f"  ours ({tag}): {first:.2f} s (warm {warm:.2f} s), {info['iterations']} iterations, "
                  f"grad {info['grad_norm']:.1e}, RMSE all pairs {r_ours[0]:.5f}, edges {r_ours[1]:.5f}", flush=True)
            nbrs = None if graph is None else [g.nbr[i, :g.degree[i]] for i in range(n)]
            Jsk, t_sk = sklearn_plm(s, C, nbrs)
            r_sk = rmse(Jsk, Jt, g.edges)
            print(f"  sklearn ({tag}): {t_sk:.2f} s, RMSE all pairs {r_sk[0]:.5f}, edges {r_sk[1]:.5f}", flush=True)
            rows.append(dict(case=f"{L}x{L} (n={n}), {tag}", ours=first, warm=warm, sk=t_sk, ratio=t_sk / first,
                             r_ours=r_ours, r_sk=r_sk, iters=info["iterations"]))


def _hwm_mib() -> float:
    """This process's peak resident memory (``VmHWM``, MiB). Not ``ru_maxrss``: Linux carries
    that over ``exec`` from the parent that forked the process."""
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmHWM")) / 1024


def child_plm100(path: str):
    """The 100×100 fit in a fresh process: prints wall time, peak RSS before the fit and peak RSS (MiB)."""
    d = np.load(path)
    s, w = d["s"], d["w"]
    from isingattn import graphs
    from isingattn.learn import fit

    g = graphs.lattice((100, 100))
    import jax  # noqa: F401  (the runtime is part of the baseline)

    before = _hwm_mib()
    t = time.perf_counter()
    r = fit(s, method="plm", graph=g, l2=4.0 / len(s), progress=False, check_moments=False)
    wall = time.perf_counter() - t
    peak = _hwm_mib()
    err = float(np.sqrt(np.mean((np.asarray(r.model.J.weights, np.float64) - w) ** 2)))
    print(f"RESULT {wall:.2f} {before:.0f} {peak:.0f} {err:.5f} {r.info['iterations']} {r.info['grad_norm']:.2e} "
          f"{int(r.info['converged'])}")


def part_plm100(rows: list):
    t = time.perf_counter()
    g, h, w, s = lattice_data(100, 20000, seed=100, chains=20)
    gen = time.perf_counter() - t
    print(f"\n## 100x100 lattice: n = {g.n}, E = {g.E}, S = {len(s)} ({s.nbytes / 2**20:.0f} MiB of int8 spins; "
          f"Swendsen–Wang {gen:.1f} s)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        np.savez(path, s=s, w=w)
        del s
        out = subprocess.run([sys.executable, __file__, "--child-plm100", path], capture_output=True, text=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")]
    if not line:
        print(out.stdout, out.stderr)
        raise SystemExit("the 100x100 child failed")
    wall, before, peak, err, iters, grad, conv = line[0].split()[1:]
    print(f"  ours (graph given): {wall} s, {iters} iterations (grad {grad}, converged {bool(int(conv))}), "
          f"peak RSS {before} MiB before the fit (data loaded), {peak} MiB after; RMSE on the edges {err}", flush=True)
    rows.append(dict(wall=float(wall), before=float(before), peak=float(peak), err=float(err), iters=int(iters),
                     n=g.n, E=g.E))


def part_exact(rows: list, n: int = 20, S: int = 20000):
    import jax
    import jax.numpy as jnp

    from isingattn.energy import energy, spin_table
    from isingattn.learn import fit

    k1, k2, k3 = jax.random.split(jax.random.key(20), 3)
    h = 0.3 * jax.random.normal(k1, (n,))
    J = jnp.triu(0.5 / np.sqrt(n) * jax.random.normal(k2, (n, n)), 1)
    J = J + J.T
    table = spin_table(n, jnp.float32)
    logp = np.asarray(-energy(h, J, table), np.float64)  # β = 1
    cdf = np.cumsum(np.exp(logp - logp.max()))
    u = np.asarray(jax.random.uniform(k3, (S,), jnp.float32), np.float64) * cdf[-1]
    idx = np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)  # inverse-CDF draws, exact
    s = np.asarray(table)[idx].astype(np.int8)
    t = time.perf_counter()
    r = fit(s, method="exact", l2=0.0, tol=1e-4, progress=False)
    first = time.perf_counter() - t
    t = time.perf_counter()
    r = fit(s, method="exact", l2=0.0, tol=1e-4, progress=False)
    warm = time.perf_counter() - t
    err = float(np.sqrt(np.mean((np.asarray(r.model.J) - np.asarray(J))[np.triu_indices(n, 1)] ** 2)))
    print(f"\n## exact ML, dense n = {n}, S = {S}: {first:.2f} s (warm {warm:.2f} s), {r.info['iterations']} "
          f"iterations ({r.info['evaluations']} evaluations of log Z and its gradient), moment error "
          f"{r.info['moment_error']:.2e} (converged {r.info['converged']}), J RMSE vs truth {err:.4f}", flush=True)
    rows.append(dict(n=n, S=S, first=first, warm=warm, iters=r.info["iterations"], evals=r.info["evaluations"],
                     err=r.info["moment_error"], conv=r.info["converged"], rmse=err))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10,32", help="lattice sides for part 1")
    ap.add_argument("--C", type=float, default=1.0, help="scikit-learn's C (our l2 = 4/(C S))")
    ap.add_argument("--cases", default="all,graph", help="part 1's rows: all (all pairs), graph (graph given)")
    ap.add_argument("--skip-100", action="store_true")
    ap.add_argument("--skip-exact", action="store_true")
    ap.add_argument("--child-plm100", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_plm100:
        return child_plm100(args.child_plm100)
    import jax
    import sklearn

    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__}, scikit-learn {sklearn.__version__}; "
          f"float32; 1-min load average {os.getloadavg()[0]:.2f}")
    plm, big, exact = [], [], []
    names = {"all": "all pairs", "graph": "graph given"}
    part_plm([int(x) for x in args.sizes.split(",")], args.C, plm, tuple(names[c] for c in args.cases.split(",")))
    if not args.skip_100:
        part_plm100(big)
    if not args.skip_exact:
        part_exact(exact)
    print("\n| data | PLM (ours) | warm | sklearn per spin | speed-up | RMSE all pairs ours / sklearn | "
          "RMSE edges ours / sklearn |\n|---|---|---|---|---|---|---|")
    for r in plm:
        print(f"| {r['case']} | {r['ours']:.2f} s | {r['warm']:.2f} s | {r['sk']:.1f} s | {r['ratio']:.1f}x | "
              f"{r['r_ours'][0]:.5f} / {r['r_sk'][0]:.5f} | {r['r_ours'][1]:.5f} / {r['r_sk'][1]:.5f} |")
    for r in big:
        print(f"\nPLM, 100x100 lattice (n = {r['n']}, E = {r['E']}), graph given, 20,000 samples: {r['wall']:.1f} s, "
              f"{r['iters']} iterations, peak RSS {r['peak']:.0f} MiB ({r['before']:.0f} MiB before the fit), "
              f"coupling RMSE {r['err']:.4f}")
    for r in exact:
        print(f"\nExact ML, dense n = {r['n']}, {r['S']} samples: {r['first']:.1f} s to a moment error of "
              f"{r['err']:.1e} (warm {r['warm']:.1f} s; {r['iters']} L-BFGS iterations, {r['evals']} log Z evaluations)")
    print(f"\n1-min load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""Audit of the models trained through a sampler whose β is hidden: at their
final parameters, do the engine's marginals match Exact's at the model's β?

For each finished run of the ``annealing-qpu`` cells under ``--root``, the trained parameters
are loaded twice: with the engine they were trained through, and with ``Exact``. The last
query of the first ``--strings`` test strings (every key visible: T spins, the model's own
fields and J) goes through ``DimodEngine(sampler="hidden-beta:2.5", pool=True)`` with
``--reads`` reads, calibrated (plain mean and ``rao_blackwell=True``) and raw. The reference is
Exact's marginals ``m0`` at β = 1; the standard error is the binomial ``sqrt((1 - m0²) / reads)``,
which bounds the Rao-Blackwellized mean's from above (law of total variance). A marginal is
z-tested only where at least 5 minority reads are expected. The test accuracy through Exact
says whether a shortfall lies in training or in evaluation through the sampler.

Run:  taskset -c 0 python benchmarks/qpu_audit.py                 # every finished run, 1024 reads
      taskset -c 0 python benchmarks/qpu_audit.py --seeds 1 2 --cells annealing-qpu/T8-dimod-cal-rb
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

CELLS = ("annealing-qpu/T8-dimod-raw", "annealing-qpu/T8-dimod-cal", "annealing-qpu/T8-dimod-cal-rb")
ESTIMATORS = {"cal": dict(calibrate=True), "cal-rb": dict(calibrate=True, rao_blackwell=True),
              "raw": dict(calibrate=False)}


def audit_run(path: str, test, strings: int, reads: int, seed: int) -> dict:
    """One trained run: its test accuracy through Exact, and each estimator's error against Exact."""
    import jax
    import jax.numpy as jnp

    from isingattn import IsingModel
    from isingattn.inference.dimod import DimodEngine
    from isingattn.inference.exact import Exact
    from isingattn.models.saved import load_transformer
    from isingattn.models.train import evaluate

    model, meta = load_transformer(path)
    exact_model, _ = load_transformer(path, engine=Exact())
    ev = evaluate(exact_model, test.tokens, test.targets)
    toks = jnp.asarray(test.tokens[:strings])
    T = toks.shape[1]
    f = np.asarray(model.attention_fields(toks, 0)[:, 0, T - 1, :], np.float64)  # (S, T): last query, all keys
    J = np.asarray(model.blocks[0].attn.couplings(T)[0], np.float64)  # (T, T)
    im = IsingModel(f, np.broadcast_to(J, (len(f), T, T)), beta=model.config.beta)
    m0 = np.asarray(Exact().marginals(im).mean)
    row = dict(step=int(meta.get("step", -1)), acc_exact=float(ev["acc"]), J_abs_max=float(np.abs(J).max()))
    se = np.sqrt(np.maximum(1 - m0**2, 1e-12) / reads)
    tested = (1 - np.abs(m0)) / 2 * reads >= 5
    for name, kw in ESTIMATORS.items():
        eng = DimodEngine(sampler="hidden-beta:2.5", pool=True, num_reads=reads, num_bootstrap=0,
                          estimate_beta=True, **kw)
        r = eng.marginals(im, key=jax.random.PRNGKey(100 + seed))
        z = np.abs(np.asarray(r.mean) - m0) / se
        row[name] = dict(max_err=float(np.abs(np.asarray(r.mean) - m0).max()), tested=int(tested.sum()),
                         max_z=float(z[tested].max()), beyond_4se=float(np.mean(z[tested] > 4)),
                         beta_eff=float(np.mean(np.asarray(r.info["beta_eff"]))))
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default="results/reproduce", help="the reproduce folder holding the cells")
    p.add_argument("--cells", nargs="+", default=list(CELLS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--strings", type=int, default=64, help="test strings (query models) per run")
    p.add_argument("--reads", type=int, default=1024)
    p.add_argument("--json", default=None, help="also write the rows to this JSON file (atomically)")
    a = p.parse_args(argv)

    from isingattn import atomic
    from isingattn.models.app import experiments

    warnings.simplefilter("ignore")  # the raw sampler warns that its reads have no temperature
    cells = {c.name: c for c in experiments.grid()}
    rows = {}
    print(f"{a.strings} query models per run (last query, T spins), {a.reads} reads; reference: Exact at beta = 1")
    print(f"{'run':<42} {'acc(Exact)':>10}  " + "  ".join(f"{n + ' max|z| >4SE beta':>26}" for n in ESTIMATORS))
    for name in a.cells:
        if name not in cells:
            p.error(f"unknown cell {name!r}; expected one of {', '.join(CELLS)}")
        _, data_for_seed, _ = experiments.cell_data(cells[name])
        for seed in a.seeds:
            path = os.path.join(a.root, name, f"ckpt-hJ-s{seed}.npz")
            if not os.path.exists(path):
                continue
            row = audit_run(path, data_for_seed(seed)[1], a.strings, a.reads, seed)
            rows[f"{name} s{seed}"] = row
            cols = "  ".join(f"{row[n]['max_z']:>11.2f} {row[n]['beyond_4se']:>6.0%} {row[n]['beta_eff']:>6.3f}"
                             for n in ESTIMATORS)
            print(f"{name + ' s' + str(seed) + ' @' + str(row['step']):<42} {100 * row['acc_exact']:>10.2f}  {cols}",
                  flush=True)
    if a.json:
        atomic.write_json(a.json, rows, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

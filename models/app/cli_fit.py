"""``isingattn fit DATA --method ... --out FOLDER``: learn an Ising model from binary data.

Writes, atomically and only after a successful fit, into FOLDER:
``model.npz`` (:func:`isingattn.learn.io.save_model`), ``model.bqm`` (dimod's
``BinaryQuadraticModel.to_file``: the SPIN model at β = 1 with ``β·h`` and ``β·J``, since a BQM
has no temperature) and ``fit.json`` (the fit's ``info`` and the command line).
"""

from __future__ import annotations

import os
import shutil
import sys

from isingattn.models.app.cli_args import (_check_writable, _error, _nonnegative_float, _nonnegative_int,
                                           _positive_float, _positive_int)


def add_fit_parser(sub, fmt: dict) -> None:
    from isingattn.learn.fit import METHODS

    f = sub.add_parser("fit", help="learn h and J from binary samples (the inverse Ising problem)", **fmt)
    f.add_argument("data", help="samples [S, n] of 0/1 or ±1, one row each: .npy, .npz (array 'samples'), .csv or "
                                "whitespace text")
    f.add_argument("--method", required=True, choices=METHODS,
                   help="exact: maximum likelihood with exact log Z (small n or banded); plm: pseudo-likelihood; "
                        "pcd: persistent contrastive divergence; mf, tap: mean-field inversion")
    f.add_argument("--graph", default=None,
                   help="couplings allowed to be non-zero, a graph spec such as lattice:8x8 (its n must equal the "
                        "data's columns); without it, all pairs")
    f.add_argument("--beta", type=_positive_float, default=1.0, help="inverse temperature of the fitted model")
    f.add_argument("--l1", type=_nonnegative_float, default=0.0, help="L1 penalty on J (plm)")
    f.add_argument("--l2", type=_nonnegative_float, default=1e-4, help="L2 penalty on h and J")
    f.add_argument("--max-iter", type=_positive_int, default=None, help="iterations (pcd: steps); without it, the method's default")
    f.add_argument("--seed", type=_nonnegative_int, default=0, help="seed of stochastic methods (pcd)")
    f.add_argument("--out", required=True, help="output folder for model.npz, model.bqm and fit.json")
    f.set_defaults(func=_fit)


def _fit(args) -> int:
    import jax
    import numpy as np

    from isingattn import atomic
    from isingattn.learn import fit
    from isingattn.learn.io import read_samples, save_model

    _check_writable(args.out, "--out")
    samples = read_samples(args.data)
    graph = None
    if args.graph:
        from isingattn import graphs
        from isingattn.errors import IsingInputError

        try:
            graph = graphs.parse(args.graph, key=jax.random.PRNGKey(args.seed))
        except IsingInputError as e:
            raise _error(f"--graph {args.graph}: {e}") from None
        if graph.n != samples.shape[1]:
            raise _error(f"--graph {args.graph} has {graph.n} spins but {args.data} has {samples.shape[1]} columns; "
                         "give a graph on the data's columns.")
    extra = {"key": jax.random.PRNGKey(args.seed)} if args.method == "pcd" else {}
    if args.max_iter is not None:
        extra["num_steps" if args.method == "pcd" else "max_iter"] = args.max_iter
    result = fit(samples, method=args.method, graph=graph, beta=args.beta, l1=args.l1, l2=args.l2, **extra)
    info = {k: v for k, v in result.info.items() if _plain_json(v)}
    command = " ".join(["isingattn", *getattr(args, "argv", sys.argv[1:])])
    os.makedirs(args.out, exist_ok=True)
    save_model(os.path.join(args.out, "model.npz"), result.model, {"method": args.method, "data": args.data})
    model = result.model
    bqm = model.to_bqm()
    bqm.scale(float(model.beta))  # a BQM has no temperature: exp(-E_bqm) = exp(-β E)
    with bqm.to_file() as src, atomic.writing(os.path.join(args.out, "model.bqm"), "wb") as fh:
        shutil.copyfileobj(src, fh)
    atomic.write_json(os.path.join(args.out, "fit.json"), {"command": command, "info": info}, indent=2)
    err = info.get("moment_error")
    print(f"fit --method {args.method}: n = {model.n}, {int(np.asarray(samples).shape[0])} samples, "
          f"{info.get('iterations')} iterations, {info.get('wall_time', float('nan')):.1f} s"
          + ("" if err is None else f", moment error {err:.2g}")
          + f"; wrote {args.out}/model.npz, model.bqm and fit.json")
    return 0


def _plain_json(v) -> bool:
    """Whether ``v`` is plain, finite JSON: only those entries of ``info`` go into fit.json
    (strict JSON has no NaN or infinity; arrays stay in model.npz)."""
    import math

    if v is None or isinstance(v, (bool, int, str)):
        return True
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)):
        return all(_plain_json(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain_json(x) for k, x in v.items())
    return False

"""``isingattn fit DATA --method ... --out FOLDER``: learn an Ising model from binary data.

Writes, only after a successful fit, into FOLDER:
``model.npz`` (:func:`isingattn.learn.io.save_model`), ``model.bqm`` (dimod's
``BinaryQuadraticModel.to_file``: the SPIN model at β = 1 with ``β·h`` and ``β·J``, since a BQM
has no temperature) and ``fit.json`` (the fit's ``info`` and the command line).

The three are one set: they are written into a temporary folder beside FOLDER, which then
replaces FOLDER in one step (:func:`isingattn.atomic.writing_folder`), so a refit that fails
or is killed leaves the earlier set whole, and what a killed run left behind is swept on the
next. FOLDER therefore holds the set only: one with other files in it is refused.

A fit that misses the data's moments (``converged`` false, see :func:`isingattn.learn.fit`)
is still written, with ``"converged": false`` in fit.json, a warning on stderr and
"NOT converged" in the summary line. Non-finite numbers of ``info`` go into fit.json as the
strings ``"inf"``, ``"-inf"`` or ``"nan"`` (strict JSON has no such numbers).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import warnings

from isingattn.models.app.cli_args import (check_writable, input_error, nonnegative_float_arg, positive_float_arg, positive_int_arg,
                                           seed_arg)

SET = ("model.npz", "model.bqm", "fit.json")


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
    f.add_argument("--beta", type=positive_float_arg, default=1.0, help="inverse temperature of the fitted model")
    f.add_argument("--l1", type=nonnegative_float_arg, default=0.0, help="L1 penalty on J (plm)")
    f.add_argument("--l2", type=nonnegative_float_arg, default=1e-4, help="L2 penalty on h and J")
    f.add_argument("--max-iter", type=positive_int_arg, default=None, help="iterations (pcd: steps); without it, the method's default")
    f.add_argument("--seed", type=seed_arg, default=0, help="seed of stochastic methods (pcd)")
    f.add_argument("--out", required=True, help="output folder for model.npz, model.bqm and fit.json")
    f.set_defaults(func=_fit)


def _fit(args) -> int:
    import jax
    import numpy as np

    from isingattn import atomic
    from isingattn.learn import fit
    from isingattn.learn.io import read_samples, save_model

    _check_out(args.out)
    samples = read_samples(args.data)
    graph = None
    if args.graph:
        from isingattn import graphs
        from isingattn.errors import IsingInputError

        try:
            graph = graphs.parse(args.graph, key=jax.random.PRNGKey(args.seed))
        except IsingInputError as e:
            raise input_error(f"--graph {args.graph}: {e}") from None
        if graph.n != samples.shape[1]:
            raise input_error(f"--graph {args.graph} has {graph.n} spins but {args.data} has {samples.shape[1]} columns; "
                         "give a graph on the data's columns.")
    extra = {"key": jax.random.PRNGKey(args.seed)} if args.method == "pcd" else {}
    if args.max_iter is not None:
        extra["num_steps" if args.method == "pcd" else "max_iter"] = args.max_iter
    with warnings.catch_warnings(record=True) as caught:  # reported in one line each, below
        warnings.simplefilter("always")
        result = fit(samples, method=args.method, graph=graph, beta=args.beta, l1=args.l1, l2=args.l2, **extra)
    for text in dict.fromkeys(" ".join(str(w.message).split()) for w in caught):
        print(f"isingattn fit: warning: {text}", file=sys.stderr)
    info = {k: _json_value(v) for k, v in result.info.items() if _plain_json(v)}
    command = " ".join(["isingattn", *getattr(args, "argv", sys.argv[1:])])
    model = result.model
    bqm = model.to_bqm()
    bqm.scale(float(model.beta))  # a BQM has no temperature: exp(-E_bqm) = exp(-β E)
    with atomic.writing_folder(args.out) as tmp:  # the three files replace the earlier set together
        save_model(os.path.join(tmp, "model.npz"), model, {"method": args.method, "data": args.data})
        with bqm.to_file() as src, open(os.path.join(tmp, "model.bqm"), "wb") as fh:
            shutil.copyfileobj(src, fh)
        atomic.write_json(os.path.join(tmp, "fit.json"), {"command": command, "info": info}, indent=2)
    err = result.info.get("moment_error")
    ok = bool(result.info.get("converged"))
    print(f"fit --method {args.method}: n = {model.n}, {int(np.asarray(samples).shape[0])} samples, "
          f"{info.get('iterations')} iterations, {result.info.get('wall_time', float('nan')):.1f} s"
          + ("" if err is None else f", moment error {err:.2g}")
          + ("" if ok else f" (NOT converged: status {result.info.get('status')!r}, moment_tol "
                           f"{result.info.get('moment_tol', float('nan')):.2g}; see fit.json)")
          + f"; wrote {args.out}/model.npz, model.bqm and fit.json")
    return 0


def _check_out(out: str) -> None:
    """Refuse, before the fit runs, an ``--out`` that cannot take the set: not writable, a file,
    holding a non-file where one of the set goes, holding other files (the folder is replaced
    as a whole), or the current folder or one above it."""
    from isingattn import atomic

    check_writable(out, "--out")
    path = os.path.abspath(out)
    here = os.path.abspath(os.getcwd())
    if path == here or here.startswith(path.rstrip(os.sep) + os.sep):
        raise input_error(f"--out {out!r} is the current folder or holds it; fit replaces --out as a whole, so give it a "
                     "folder of its own, e.g. --out fit1.")
    if not os.path.isdir(path):
        return
    atomic.sweep_folder_orphans(path)  # a killed earlier run's leftovers are not "other files"
    for name in SET:
        p = os.path.join(path, name)
        if os.path.lexists(p) and not os.path.isfile(p):
            raise input_error(f"--out {out!r}: {name} there is not a file (a folder or another kind of entry); remove it or "
                         "choose another --out.")
    other = sorted(set(os.listdir(path)) - set(SET))
    if other:
        shown = ", ".join(other[:5]) + (" ..." if len(other) > 5 else "")
        raise input_error(f"--out {out!r} holds other entries than a fit's model.npz, model.bqm and fit.json ({shown}); the "
                     "set is written by replacing the folder as one, so give fit an empty or new folder, or an earlier "
                     "fit's.")


def _json_value(v):
    """``v`` with non-finite floats as the strings "inf", "-inf", "nan" (strict JSON has none)."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _json_value(x) for k, x in v.items()}
    return v


def _plain_json(v) -> bool:
    """Whether ``v`` is plain JSON (numbers, strings, lists, dicts): only those entries of
    ``info`` go into fit.json (arrays stay in model.npz; non-finite floats become strings)."""
    if v is None or isinstance(v, (bool, int, str, float)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_plain_json(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain_json(x) for k, x in v.items())
    return False

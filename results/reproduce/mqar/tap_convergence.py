"""Does TAP converge on the Ising models that a trained full-J MQAR hJ model poses?

    python results/reproduce/mqar/tap_convergence.py results/reproduce/mqar/T64-meanfield-tap-2x1-n16-v65-d32

For every ``ckpt-hJ-s*.npz`` in the folder (not committed, and deleted when the cell finishes: run it while
the cell trains, after an hJ run has finished), runs the
model eagerly on its seed's first ``--strings`` test strings and prints, per layer, how many of the
per-query Ising models (strings x heads x queries) TAP left unconverged within its ``max_iter``, the largest
residual and the iterations taken. Training used the same engine under ``jit``, where no warning can fire."""

from __future__ import annotations

import argparse
import glob
import os

import numpy as np

from isingattn.inference.meanfield import MeanField
from isingattn.inference.meanfield.engine import EPS_FLOOR
from isingattn.models.checkpoint import read_meta
from isingattn.models.app.experiments import task_data
from isingattn.models.saved import load_transformer

SEEN: list = []


class Recording(MeanField):
    """MeanField that keeps each call's ``info`` instead of warning (the calls run eagerly here)."""

    def _warn(self, info: dict) -> None:
        SEEN.append({k: np.asarray(info[k]) for k in ("converged", "residual", "iterations")})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--strings", type=int, default=64)
    a = ap.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(glob.escape(a.folder), "ckpt-hJ-s*.npz")))
    if not paths:
        raise SystemExit(f"no ckpt-hJ-s*.npz in {a.folder}: run the cell first (checkpoints are not committed)")
    for path in paths:
        cfg = read_meta(path)["spec"]["model"]["engine"]["config"]
        eng = Recording(**cfg)
        model, meta = load_transformer(path, engine=eng)
        _, data_for_seed, _ = task_data({k: meta[k] for k in ("task", "pairs", "vocab", "n_train", "n_test")},
                                        model.config.seq_len)
        _, test = data_for_seed(meta["seed"])
        SEEN.clear()
        model(np.asarray(test.tokens[: a.strings]))
        tol = max(cfg["tol"], EPS_FLOOR * float(np.finfo(np.float32).eps))  # the engine's float32 floor
        for layer, info in enumerate(SEEN):
            bad = int((~info["converged"]).sum())
            print(f"{os.path.basename(path)} step {meta['step']} layer {layer}: {bad} of {info['converged'].size} "
                  f"models unconverged; largest residual {info['residual'].max():.3g} (tol {tol:.3g}); "
                  f"iterations median {int(np.median(info['iterations']))}, max {int(info['iterations'].max())} "
                  f"(max_iter {cfg['max_iter']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

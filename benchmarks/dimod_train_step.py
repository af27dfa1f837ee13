"""One training step (forward + backward + AdamW) of the one-layer Transformer with hJ
attention at T=8 through DimodEngine and a sampler whose β is hidden, beside
hJ+Exact, to size the ``annealing-qpu`` cells.

The sampler is ``isingattn.inference.dimod.standins.HiddenBetaSampler`` (fixed-β simulated annealing at
β0 = 2.5 that ignores the β it is given), by name, as a model config saves it. Each
configuration runs in its own subprocess; times are after the first (compiling) step,
median and best of ``--steps`` steps, float32, d_model 64, 1 head, FFN on, bracket-sized
vocabulary, batch ``--batch`` (B·T = 512 query models per step at the default 64, in 4
causal buckets: one host call per bucket). Run it on one core: ``taskset -c 0``.

Run:  taskset -c 0 python benchmarks/dimod_train_step.py
      taskset -c 0 python benchmarks/dimod_train_step.py --only exact cal-pool --steps 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HIDDEN = "hidden-beta:2.5"
CONFIGS = {  # name -> DimodEngine keywords (None: Exact)
    "exact": None,
    "cal-defaults": dict(sampler=HIDDEN, calibrate=True),  # as DimodEngine comes: 256 reads, per-model, bootstrap 100
    "cal-noboot": dict(sampler=HIDDEN, calibrate=True, num_bootstrap=0),
    "cal-pool": dict(sampler=HIDDEN, calibrate=True, num_bootstrap=0, pool=True),
    "cal-pool-64": dict(sampler=HIDDEN, calibrate=True, num_bootstrap=0, pool=True, num_reads=64),
    "cal-pool-64-100sw": dict(sampler=HIDDEN + ":100", calibrate=True, num_bootstrap=0, pool=True, num_reads=64),
    "raw-pool-64": dict(sampler=HIDDEN, pool=True, num_reads=64),
    "mock-cal-pool-64": dict(sampler="mock-pegasus:" + HIDDEN, calibrate=True, num_bootstrap=0, pool=True,
                             num_reads=64),
}


def child(name: str, batch: int, steps: int) -> dict:
    """Measure one configuration in this process."""
    import warnings

    import jax

    from isingattn.inference.exact import Exact
    from isingattn.inference.dimod.engine import DimodEngine
    from isingattn.models import Config, Transformer
    from _step_timing import time_train_steps

    warnings.simplefilter("ignore")  # the uncalibrated sampler warns that it has no temperature
    T = 8
    kw = CONFIGS[name]
    engine = Exact() if kw is None else DimodEngine(**kw)
    cfg = Config(vocab_size=6, seq_len=T, n_out=T, variant="hJ", engine=engine)
    model = Transformer(cfg, key=jax.random.PRNGKey(0))
    r = time_train_steps(model, T, batch, steps)
    return dict(name=name, batch=batch, **r)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=3, help="timed steps after the first")
    p.add_argument("--only", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.batch, args.steps)))
        return 0
    import jax

    print(f"Training step, hJ at T=8, one layer (d_model 64, 1 head, FFN), float32, batch {args.batch}; sampler "
          f"{HIDDEN} (β hidden from the engine); jax {jax.__version__}, os.cpu_count() = {os.cpu_count()}, "
          f"affinity {len(os.sched_getaffinity(0))} core(s), 1-min load average {os.getloadavg()[0]:.2f}")
    res = {}
    for name in args.only:
        cmd = [sys.executable, __file__, "--child", name, "--batch", str(args.batch), "--steps", str(args.steps)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            print(f"{name}: failed\n{out.stderr[-2000:]}")
            continue
        res[name] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  done {name}: {res[name]['median_s']:.3f} s/step (load {os.getloadavg()[0]:.2f})", file=sys.stderr,
              flush=True)
    print(f"(load average at end {os.getloadavg()[0]:.2f})\n")
    base = res.get("exact")
    print("| config | engine keywords | step (median) | best | first step | vs Exact |")
    print("|---|---|---|---|---|---|")
    for name, r in res.items():
        kw = CONFIGS[name]
        desc = "Exact()" if kw is None else ", ".join(f"{k}={v!r}" for k, v in kw.items())
        ratio = f"{r['median_s'] / base['median_s']:.0f}x" if base else "-"
        print(f"| {name} | {desc} | {r['median_s']:.3f} s | {r['best_s']:.3f} s | {r['first_s']:.1f} s | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

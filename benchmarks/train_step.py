"""One training step (forward + backward + AdamW) of the one-layer Transformer, softmax
against hJ attention with the Exact and Banded engines, side by side.

Each configuration runs in its own subprocess, so its peak memory (``ru_maxrss`` of that
process: parameters, compiled code, activations and the engine's buffers) is its own.
Times are after compile, median (and best) of ``--steps`` steps, float32, d_model 64,
1 head, FFN on, bracket-sized vocabulary; the batch is ``--batch`` unless a row says
otherwise (``--batch-banded`` for hJ+Banded at T=256, whose step is long on a CPU).

Targets: hJ+Exact at T=24 ≤ 2 s/step; hJ+Banded(8) at T=256 ≤ 5x softmax at T=256.

Run:  python benchmarks/train_step.py                    (several minutes on 2 CPU cores)
      python benchmarks/train_step.py --only softmax-16 hJ-exact-16
      python benchmarks/train_step.py --only softmax-64 hJ-meanfield-naive-64 hJ-meanfield-tap-64 hJ-meanfield-bp-64
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _table import table_lines

CONFIGS = {  # name -> (T, Config overrides)
    "softmax-16": (16, dict(variant="softmax")),
    "hJ-exact-16": (16, dict(variant="hJ")),
    "hJ-exact-24": (24, dict(variant="hJ")),
    "softmax-256": (256, dict(variant="softmax")),
    "hJ-banded8-256": (256, dict(variant="hJ", J_param="banded", J_band=8, engine="banded8")),
    # full J at long context through the approximate engines
    "softmax-64": (64, dict(variant="softmax")),
    "hJ-meanfield-naive-64": (64, dict(variant="hJ", engine="meanfield-naive")),
    "hJ-meanfield-tap-64": (64, dict(variant="hJ", engine="meanfield-tap")),
    "hJ-meanfield-bp-64": (64, dict(variant="hJ", engine="meanfield-bp")),
}


def child(name: str, batch: int, steps: int, J_std: float = 0.0) -> dict:
    """Measure one configuration in this process."""
    import resource

    import equinox as eqx
    import jax

    from isingattn.engine import get
    from isingattn.inference.banded import Banded
    from isingattn.models import Config, Transformer
    from _step_timing import time_train_steps

    T, kw = CONFIGS[name]
    kw = dict(kw)
    if kw.get("engine") == "banded8":
        kw["engine"] = Banded(bandwidth=8)
    elif "engine" in kw:
        kw["engine"] = get(kw["engine"])
    cfg = Config(vocab_size=6, seq_len=T, n_out=T, **kw)
    model = Transformer(cfg, key=jax.random.PRNGKey(0))
    if J_std:  # a trained-looking J: the approximate engines iterate longer than at J = 0, where training starts
        J = J_std * jax.random.normal(jax.random.PRNGKey(2), model.attn.J_raw.shape)
        model = eqx.tree_at(lambda m: m.attn.J_raw, model, J)
    r = time_train_steps(model, T, batch, steps)
    return dict(name=name, T=T, batch=batch, compile_s=r.pop("first_s"), **r,
                peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--batch-banded", type=int, default=64, help="batch for hJ-banded8-256")
    p.add_argument("--steps", type=int, default=20, help="timed steps after compile")
    p.add_argument("--steps-banded", type=int, default=2, help="timed steps for hJ-banded8-256")
    p.add_argument("--only", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--J-std", type=float, default=0.0,
                   help="start hJ models from J_raw ~ N(0, std^2) instead of 0 (where training starts)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        banded = args.child == "hJ-banded8-256"
        print(json.dumps(child(args.child, args.batch_banded if banded else args.batch,
                               args.steps_banded if banded else args.steps, args.J_std)))
        return 0
    import jax

    print(f"Training step, one layer (d_model 64, 1 head, FFN), float32, J_raw std {args.J_std}; jax {jax.__version__}, "
          f"{jax.default_backend()}, os.cpu_count() = {os.cpu_count()}, 1-min load average {os.getloadavg()[0]:.2f}")
    res = {}
    for name in args.only:
        cmd = [sys.executable, __file__, "--child", name, "--batch", str(args.batch), "--batch-banded",
               str(args.batch_banded), "--steps", str(args.steps), "--steps-banded", str(args.steps_banded),
               "--J-std", str(args.J_std)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode:
            print(f"{name}: failed\n{out.stderr[-2000:]}")
            continue
        res[name] = json.loads(out.stdout.strip().splitlines()[-1])
        r = res[name]
        print(f"  done {name}: {r['median_s']:.3f} s/step", file=sys.stderr, flush=True)
    print(f"(load average at end {os.getloadavg()[0]:.2f})\n")
    base = {16: res.get("softmax-16"), 24: res.get("softmax-16"), 64: res.get("softmax-64"), 256: res.get("softmax-256")}
    hdr = ("config", "T", "batch", "step (median)", "best", "compile", "peak RSS", "vs softmax same T")
    rows = []
    for name, r in res.items():
        b = base[r["T"]] if r["T"] != 24 else None
        ratio = "-" if b is None or b is r else f"{r['median_s'] / b['median_s'] * b['batch'] / r['batch']:.1f}x"
        if b is not None and b is not r and b["batch"] != r["batch"]:
            ratio += f" (per sequence; batch {r['batch']} vs {b['batch']})"
        rows.append((name, str(r["T"]), str(r["batch"]), f"{r['median_s']:.3f} s", f"{r['best_s']:.3f} s",
                     f"{r['compile_s']:.1f} s", f"{r['peak_mib']:,.0f} MiB", ratio))
    print("\n".join(table_lines(hdr, rows, left=1)))
    print("\nTargets:")
    if "hJ-exact-24" in res:
        t = res["hJ-exact-24"]["median_s"]
        print(f"  hJ+Exact T=24 step <= 2 s: got {t:.2f} s  {'PASS' if t <= 2 else 'MISS'}")
    if "hJ-banded8-256" in res and "softmax-256" in res:
        r, b = res["hJ-banded8-256"], res["softmax-256"]
        ratio = r["median_s"] / b["median_s"] * b["batch"] / r["batch"]
        print(f"  hJ+Banded(8) T=256 <= 5x softmax (per sequence): got {ratio:.0f}x  {'PASS' if ratio <= 5 else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

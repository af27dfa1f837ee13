"""hJ + Banded(8) against softmax, side by side in one run: the training step at T = 64 and 256, and the
attention layer alone (forward + backward), with compile times, ratios per sequence and the work done.

Rows (each in its own subprocess, float32, one head, d = 64):

* ``layer``: ``boltzmann_attention`` forward + backward (loss ``Σ out²``, gradients in q, k, v and J) at
  batch 8; J banded (w = 8, entries N(0, 0.3²)), q, k, v N(0, 1).
* ``step``: one training step (forward + backward + AdamW) of the one-layer Transformer as
  benchmarks/train_step.py builds it (d_model 64, FFN, bracket-sized vocabulary), softmax at batch 64,
  hJ + Banded(8) (``J_param="banded"``, ``J_band=8``) at ``--batch-256`` (T = 256) or 64 (T = 64).
* ``engine``: ``Banded(bandwidth=8)`` alone on the causal models of 8 sequences at T = 256 (h N(0, 1), J as in
  ``layer``): the marginals (``fwd``), or the marginals and their VJP in h and J (``vjp``).
* ``gemm``: a float32 512 x 512 GEMM, the machine's multiply-add rate, against which the ideal (one
  forward sweep, ``2^(w+1) T²/2`` multiply-adds per sequence) is put in milliseconds.

Times are after compile, median (and best) of ``--repeats`` calls; ``compile`` is the first call. Ratios
are per sequence against softmax at the same T and the same kind of row. ``--ref COMMIT`` runs the same
rows on another commit of this repository as well (``git archive`` into a temporary package layout, put
first on PYTHONPATH), so that old and new are measured in one run (``--ref HEAD``: the working tree
against its last commit). On a CPU, Banded runs the native kernel (inference/banded/native.cc) where it
builds; ``ISINGATTN_NATIVE=0`` times the XLA graph (inference/banded/vjp.py) instead.

Targets: the hJ + Banded(8) training step ≤ 5x softmax per sequence at T = 256, ≤ 3x at
T = 64, compile ≤ 60 s; the attention layer ≤ 10x softmax at T = 256.

Run:  taskset -c 0 python benchmarks/banded_vjp.py                    (~3 minutes on one core)
      taskset -c 0 python benchmarks/banded_vjp.py --ref 089a0ad      (and the same rows on that commit)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from _table import table_lines

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ROWS = ("layer-softmax-64", "layer-hJ-64", "layer-softmax-256", "layer-hJ-256",
        "step-softmax-64", "step-hJ-64", "step-softmax-256", "step-hJ-256",
        "engine-fwd-256", "engine-vjp-256", "gemm-f32-512")


def child(name: str, batch: int, repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from isingattn.inference.banded import Banded
    from _step_timing import time_calls, time_train_steps

    kind, variant, T = name.split("-")
    T = int(T)
    key = jax.random.PRNGKey(0)
    if kind == "engine":  # Banded(8) alone on the causal models of batch 8 (one head): marginals, or marginals + VJP
        from isingattn import IsingModel

        ks = jax.random.split(key, 3)
        h = jax.random.normal(ks[0], (batch, 1, T, T), jnp.float32)
        d = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])
        A = 0.3 * jax.random.normal(ks[1], (1, T, T), jnp.float32)
        J = jnp.where((d >= 1) & (d <= 8), (A + jnp.swapaxes(A, -1, -2)) / 2, 0.0)
        c = jax.random.normal(ks[2], h.shape, jnp.float32)
        mean = lambda h, J: Banded(bandwidth=8).marginals(IsingModel(h, J, causal=True)).mean
        f = jax.jit(mean) if variant == "fwd" else jax.jit(jax.grad(lambda h, J: jnp.sum(c * mean(h, J)), argnums=(0, 1)))
        r = time_calls(lambda i: f(h, J), repeats)
    elif kind == "gemm":  # the machine's float32 GEMM rate: the yardstick for the ideal sweep
        a = jax.random.normal(key, (T, T), jnp.float32)
        f = jax.jit(lambda a: a @ a)
        r = time_calls(lambda i: f(a), repeats)
    elif kind == "layer":
        from isingattn.attention import boltzmann_attention

        ks = jax.random.split(key, 4)
        q, k, v = (jax.random.normal(kk, (batch, 1, T, 64), jnp.float32) for kk in ks[:3])
        d = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])
        A = 0.3 * jax.random.normal(ks[3], (1, T, T), jnp.float32)
        J = jnp.where((d >= 1) & (d <= 8), (A + jnp.swapaxes(A, -1, -2)) / 2, 0.0)
        eng = Banded(bandwidth=8)

        def loss(q, k, v, J):
            out, _ = boltzmann_attention(q, k, v, J, variant=variant, engine=eng, causal=True)
            return jnp.sum(out**2)

        f = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
        r = time_calls(lambda i: f(q, k, v, J), repeats)
    else:
        from isingattn.models import Config, Transformer

        kw = dict(variant="softmax") if variant == "softmax" else dict(
            variant="hJ", J_param="banded", J_band=8, engine=Banded(bandwidth=8))
        model = Transformer(Config(vocab_size=6, seq_len=T, n_out=T, **kw), key=key)
        r = time_train_steps(model, T, batch, repeats)
    return dict(name=name, T=T, batch=batch, compile_s=r["first_s"], median_s=r["median_s"], best_s=r["best_s"],
                cpu_s=r.get("cpu_median_s"))


def archive(commit: str) -> str:
    """A package layout of ``commit`` (isingattn, isingattn.inference, isingattn.models) in a temporary folder."""
    base = tempfile.mkdtemp(prefix=f"isingattn-{commit}-")
    src = os.path.join(base, "src")
    os.makedirs(src)
    tar = subprocess.run(["git", "-C", ROOT, "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=tar, check=True)
    pkg = os.path.join(base, "pkg", "isingattn")
    os.makedirs(os.path.dirname(pkg))
    os.symlink(os.path.join(src, "isingattn"), pkg)
    for sub in ("inference", "models"):
        os.symlink(os.path.join(src, sub), os.path.join(src, "isingattn", sub))
    return os.path.join(base, "pkg")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-256", type=int, default=8, help="batch of the hJ step at T = 256 (softmax: 64)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls after the first")
    p.add_argument("--only", nargs="*", default=list(ROWS), choices=list(ROWS))
    p.add_argument("--ref", default=None, help="also run the rows on this commit (e.g. the one before the VJP)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.batch, args.repeats)))
        return 0
    import jax

    load0 = os.getloadavg()[0]
    print(f"hJ + Banded(8) vs softmax, float32, one head, d = 64; jax {jax.__version__}, {jax.default_backend()}, "
          f"os.cpu_count() = {os.cpu_count()}, CPUs usable = {len(os.sched_getaffinity(0))}, "
          f"1-min load average {load0:.2f}")
    trees = [("work", None)] + ([(args.ref, archive(args.ref))] if args.ref else [])
    res = {}
    for name in args.only:  # interleaved: each row on every tree before the next row
        kind, variant, T = name.split("-")
        batch = 8 if kind in ("layer", "engine", "gemm") else (args.batch_256 if (variant == "hJ" and T == "256") else 64)
        for label, path in trees:
            env = dict(os.environ)
            if path:
                env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
            cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--batch", str(batch),
                   "--repeats", str(args.repeats)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE)
            if out.returncode:
                print(f"{label} {name}: failed\n{out.stderr[-1500:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r["load"] = os.getloadavg()[0]
            res[(label, name)] = r
            print(f"  done {label} {name}: {r['median_s'] * 1e3:.1f} ms, compile {r['compile_s']:.1f} s, "
                  f"load {r['load']:.2f}", file=sys.stderr, flush=True)
    print(f"(1-min load average at end {os.getloadavg()[0]:.2f})\n")

    hdr = ("tree", "row", "T", "batch", "median", "best", "per seq", "compile", "vs softmax/seq", "CPU vs softmax", "load")
    rows = []
    for (label, name), r in res.items():
        kind, variant, T = name.split("-")
        base = res.get((label, f"{kind}-softmax-{T}"))
        per = r["median_s"] / r["batch"]
        ratio = "-" if base is None or variant == "softmax" else f"{per / (base['median_s'] / base['batch']):.1f}x"
        # the same ratio in CPU seconds (all threads): it moves less with the load of a shared machine
        cpu = ("-" if base is None or variant == "softmax" or not r.get("cpu_s") or not base.get("cpu_s")
               else f"{(r['cpu_s'] / r['batch']) / (base['cpu_s'] / base['batch']):.1f}x")
        rows.append((label, name, T, str(r["batch"]), f"{r['median_s'] * 1e3:.1f} ms", f"{r['best_s'] * 1e3:.1f} ms",
                     f"{per * 1e3:.2f} ms", f"{r['compile_s']:.1f} s", ratio, cpu, f"{r['load']:.2f}"))
    print("\n".join(table_lines(hdr, rows, left=2)))

    g = res.get(("work", "gemm-f32-512"))
    if g:  # the ideal: one forward sweep, 2^(w+1) T^2 / 2 multiply-adds per sequence, at the GEMM rate
        rate = 512**3 / g["median_s"]  # multiply-adds per second
        ideal = 2**9 * 256**2 / 2
        print(f"\nfloat32 GEMM 512^3: {2 * rate / 1e9:.1f} GFLOP/s. The ideal forward sweep at T=256 "
              f"({ideal / 1e6:.1f} M multiply-adds per sequence) would take {ideal / rate * 1e3:.2f} ms at that rate.")
        for label, _ in trees:
            for v in ("fwd", "vjp"):
                r = res.get((label, f"engine-{v}-256"))
                if r:
                    per = r["median_s"] / r["batch"]
                    print(f"  {label} Banded(8) {'marginals' if v == 'fwd' else 'marginals + VJP'}: "
                          f"{per * 1e3:.2f} ms per sequence = {per / (ideal / rate):.1f}x the ideal forward sweep")

    print("\nTargets (working tree):")
    for T, goal in (("256", 5.0), ("64", 3.0)):
        r, b = res.get(("work", f"step-hJ-{T}")), res.get(("work", f"step-softmax-{T}"))
        if r and b:
            ratio = (r["median_s"] / r["batch"]) / (b["median_s"] / b["batch"])
            print(f"  training step T={T}: {ratio:.1f}x softmax per sequence (target <= {goal:.0f}x)  "
                  f"{'PASS' if ratio <= goal else 'MISS'}; compile {r['compile_s']:.1f} s (target <= 60 s)  "
                  f"{'PASS' if r['compile_s'] <= 60 else 'MISS'}")
    r, b = res.get(("work", "layer-hJ-256")), res.get(("work", "layer-softmax-256"))
    if r and b:  # the same batch: the ratio of the medians
        ratio = r["median_s"] / b["median_s"]
        print(f"  attention layer T=256: {ratio:.1f}x softmax (target <= 10x)  {'PASS' if ratio <= 10 else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

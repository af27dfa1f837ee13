"""The test suite's XLA flags (tests/_xla.py) against the ones before them.

Each setting runs in its own fresh process (XLA reads its flags once, at start), without a persistent
compilation cache: it traces, lowers and compiles four programs of the kind the tests compile
(value and gradient through Banded's causal and plain sweeps, Exact with correlations, a Gibbs run),
then runs them. Printed: the CPU seconds (all threads) of tracing and lowering, and of compiling, per
setting and round, their ratios to the old setting, and a hash of every output (equal hashes: the
same results bit for bit).

    python benchmarks/suite_compile.py [--rounds 3]

The CPU time, not the wall time, is what the suite's two workers on two cores compete for, and it is
far less sensitive to other load on the machine than the wall time.
"""

import argparse
import json
import os
import subprocess
import sys

SETTINGS = {
    # before: level 0 with elemental emitters, jax's default source locations
    "old": ({"XLA_FLAGS": "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"}),
    # now: one LLVM module per program
    "new": ({"XLA_FLAGS": "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false "
                          "--xla_cpu_parallel_codegen_split_count=1"}),
}

CHILD = r'''
import hashlib, json, time
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
from isingattn import IsingModel
from isingattn.inference.banded import Banded
from isingattn.inference.exact import Exact
from isingattn.inference.mcmc import Gibbs

rng = np.random.default_rng(0)

def banded(n, w, causal):
    h = rng.normal(size=(2, n, n) if causal else (3, n))
    J = np.triu(rng.normal(size=(n, n)) * 0.3, 1) * (np.abs(np.subtract.outer(np.arange(n), np.arange(n))) <= w)
    J = (J + J.T)[None] if causal else J + J.T
    def obj(h, J):
        m = Banded(bandwidth=w, path="sweep").marginals(IsingModel(h, J, causal=causal))
        return jnp.sum(m.mean) + jnp.sum(m.log_z)
    return jax.jit(jax.value_and_grad(obj, argnums=(0, 1))), (jnp.asarray(h), jnp.asarray(J))

def exact(n):
    h, J = rng.normal(size=(4, n)), rng.normal(size=(n, n)) * 0.3
    def obj(h, J):
        m = Exact(corr=True).marginals(IsingModel(h, J))
        return jnp.sum(m.mean) + jnp.sum(m.corr) + jnp.sum(m.log_z)
    return jax.jit(jax.value_and_grad(obj, argnums=(0, 1))), (jnp.asarray(h), jnp.asarray(J + J.T))

def gibbs(n):
    h, J = rng.normal(size=(n,)), rng.normal(size=(n, n)) * 0.3
    f = jax.jit(lambda h, J, k: Gibbs(num_warmup=10, num_samples=50, num_chains=2).marginals(IsingModel(h, J),
                                                                                           key=k).mean)
    return f, (jnp.asarray(h), jnp.asarray(J + J.T), jax.random.key(0))

progs = [banded(11, 3, True), banded(20, 4, False), exact(10), gibbs(12)]
t0 = time.process_time()
lowered = [f.lower(*a) for f, a in progs]
t1 = time.process_time()
compiled = [l.compile() for l in lowered]
t2 = time.process_time()
outs = [c(*a) for c, (_, a) in zip(compiled, progs)]
digest = hashlib.sha1(b"".join(np.asarray(x).tobytes() for x in jax.tree.leaves(outs))).hexdigest()
print("RESULT " + json.dumps({"lower": t1 - t0, "compile": t2 - t1, "hash": digest}))
'''


def run(name):
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS", "JAX_TRACEBACK_IN_LOCATIONS_LIMIT",
                        "JAX_COMPILATION_CACHE_DIR")}
    env.update(SETTINGS[name], JAX_ENABLE_COMPILATION_CACHE="false", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads([l for l in out.stdout.splitlines() if l.startswith("RESULT ")][-1][7:])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(f"load average at the start: {os.getloadavg()}")
    print("| round | setting | trace + lower CPU (s) | compile CPU (s) | total | output hash |")
    print("|---:|---|---:|---:|---:|---|")
    sums = {k: [0.0, 0.0] for k in SETTINGS}
    hashes = set()
    for r in range(args.rounds):
        for name in (SETTINGS if r % 2 == 0 else list(SETTINGS)[::-1]):  # alternate the order
            x = run(name)
            sums[name][0] += x["lower"]
            sums[name][1] += x["compile"]
            hashes.add(x["hash"])
            print(f"| {r + 1} | {name} | {x['lower']:.2f} | {x['compile']:.2f} | {x['lower'] + x['compile']:.2f} "
                  f"| {x['hash'][:12]} |", flush=True)
    (lo, co), (ln, cn) = sums["old"], sums["new"]
    print(f"\nnew / old, summed over {args.rounds} rounds: trace + lower {ln / lo:.2f}, compile {cn / co:.2f}, "
          f"total {(ln + cn) / (lo + co):.2f}; outputs equal bit for bit: {len(hashes) == 1}")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()

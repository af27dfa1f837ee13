"""Compare inference engines on one coupling graph: error against exact, and time.

    python examples/compare_engines.py                 # dense n=12, beta=1, all engines -> runs/examples/
    python examples/compare_engines.py --n 8 --graph chain --engines exact,meanfield-bp,gibbs
"""

import argparse

import jax
import numpy as np

from isingattn import IsingModel, inference
from isingattn.compare import compare, format_table, plot_comparison
from isingattn.instances import random_model
from isingattn.cli import one_line_errors

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--n", type=int, default=12)
p.add_argument("--graph", default="dense", choices=["dense", "chain", "lattice"])
p.add_argument("--beta", type=float, default=1.0)
p.add_argument("--engines", default="exact,meanfield-naive,meanfield-tap,meanfield-bp,gibbs,sqa")
p.add_argument("--plot", default="runs/examples/compare_engines.png", help="output figure ('' to skip)")
args = p.parse_args()

h, J = random_model(np.random.default_rng(0), args.n, graph=args.graph)
model = IsingModel(h, J, beta=args.beta)
with one_line_errors("compare_engines.py"):  # an unknown engine, one too small for --n: one line, exit status 2
    engines = {name: inference.get(name) for name in args.engines.split(",")}
    rows = compare(model, engines, key=jax.random.PRNGKey(0))
print(f"{args.graph} n={args.n} beta={args.beta}\n")
print(format_table(rows, markdown=False))
if args.plot:
    plot_comparison(rows, rows.reference.mean, args.plot)  # compare() returns the exact reference it scored against
    print(f"\nwrote {args.plot}")

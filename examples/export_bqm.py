"""Export an Ising model as a dimod BQM file and sample it with a dimod sampler.

With a trained checkpoint, the model is the one an attention head solves for one
query of a text (the same as ``isingattn export-bqm``); without one, a random
dense model. The file is dimod's own serialization, readable by dwave-samplers,
openjij or a D-Wave sampler. Sample marginals are checked against exact ones.
The file goes to runs/examples/model.bqm unless --out says otherwise.

    python examples/export_bqm.py                                   # random n=10 model
    python examples/export_bqm.py --checkpoint results/reproduce/shakespeare/T12/model-hJ-s0.npz --text "ROMEO: What" --query 9
"""

import argparse

import dimod
import numpy as np

from isingattn import IsingModel, atomic
from isingattn.inference.dimod import SQASampler
from isingattn.inference.exact import Exact
from isingattn.instances import random_model
from isingattn.cli import one_line_errors

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--checkpoint", default=None)
p.add_argument("--text", default="ROMEO: What")
p.add_argument("--query", type=int, default=9)
p.add_argument("--n", type=int, default=10, help="spins of the random model (without --checkpoint)")
p.add_argument("--out", default="runs/examples/model.bqm", help="the BQM file to write")
p.add_argument("--reads", type=int, default=2000)
args = p.parse_args()

if args.checkpoint:
    from isingattn.models.query_model import query_model
    from isingattn.models.saved import load_transformer

    with one_line_errors("export_bqm.py"):  # a missing checkpoint, a character outside its vocabulary: one line
        trained, meta = load_transformer(args.checkpoint)
        model = query_model(trained, meta, args.text, args.query)
else:
    h, J = random_model(np.random.default_rng(0), args.n)
    model = IsingModel(h, J, beta=1.0)

bqm = model.to_bqm()  # linear = -h, quadratic = -J: bqm.energy(s) == E(s); beta is the sampler's
with one_line_errors("export_bqm.py"), bqm.to_file() as src, atomic.writing(args.out, "wb") as f:
    f.write(src.read())  # atomic: never a half-written file
with open(args.out, "rb") as f:
    loaded = dimod.BinaryQuadraticModel.from_file(f)
print(f"wrote {args.out}: {len(loaded.variables)} spins, {len(loaded.quadratic)} couplings")

# Any dimod sampler takes the file; SQASampler(mode="thermal") samples exp(-beta E).
sampler = SQASampler()
ss = sampler.sample(loaded, num_reads=args.reads, beta=float(model.beta), mode="thermal", seed=0)
spins = ss.record.sample * 1.0
order = [ss.variables.index(v) for v in loaded.variables]
m_samples = spins[:, order].mean(0)
m_exact = np.asarray(Exact().marginals(model).mean)
se = spins[:, order].std(0) / np.sqrt(len(spins))
print("spin  exact    sampled  (naive s.e.)")
for j, (a, b, s) in enumerate(zip(m_exact, m_samples, se)):
    print(f"{j:4d}  {a:+.4f}  {b:+.4f}  ({s:.4f})")
print(f"max |difference| {np.abs(m_exact - m_samples).max():.4f}; energies agree: "
      f"{np.allclose(ss.record.energy, loaded.energies((ss.record.sample, ss.variables)))}")

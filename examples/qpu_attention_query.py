"""Sample an attention query's Ising model on a D-Wave annealer, calibrated to the model's β.

The annealer takes no temperature: its reads follow an unknown effective β that depends on
the problem. ``DimodEngine(EmbeddingComposite(DWaveSampler()), calibrate=True)`` embeds the
model on the QPU graph (chain strength: uniform torque compensation), estimates the reads'
effective β by maximum pseudo-likelihood and rescales the programmed h and J (within the
QPU's h_range / j_range, auto_scale off) until the reads follow exp(-βE) of the model.
Reads with broken chains are discarded and counted.

On real hardware (pip install "isingattn[qpu]", a Leap token set up with ``dwave setup``):

    isingattn export-bqm results/reproduce/shakespeare/T12/model-hJ-s0.npz --text "ROMEO: What" --query 9 --out q9.bqm
    python examples/qpu_attention_query.py --bqm q9.bqm --beta <the beta export-bqm printed>

Without a QPU (``--mock``): dwave-system's MockDWaveSampler on a Pegasus graph, its sampler
replaced by fixed-β simulated annealing at ``--hidden-beta`` (which the engine is not told),
on the given BQM or, without --bqm, a random dense model of ``--n`` spins.

    python examples/qpu_attention_query.py --mock --n 8
"""

import argparse
import warnings

import dimod
import jax
import numpy as np
from isingattn.inference.dimod import DimodEngine
from isingattn.inference.exact import EXACT_MAX_N, Exact

from isingattn import IsingModel
from isingattn.instances import random_model
from isingattn.cli import one_line_errors

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--bqm", default=None, help="a BQM file from isingattn export-bqm (default: a random dense model)")
p.add_argument("--beta", type=float, default=1.0, help="the model's β (export-bqm prints it)")
p.add_argument("--n", type=int, default=8, help="spins of the random model (without --bqm)")
p.add_argument("--reads", type=int, default=2000)
p.add_argument("--mock", action="store_true", help="MockDWaveSampler instead of DWaveSampler()")
p.add_argument("--hidden-beta", type=float, default=2.5, help="the mock's fixed β (with --mock)")
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()

if args.bqm:
    with one_line_errors("qpu_attention_query.py"), open(args.bqm, "rb") as f:  # a missing file: one line
        model = IsingModel.from_bqm(dimod.BinaryQuadraticModel.from_file(f), beta=args.beta, sparse=False)
else:
    h, J = random_model(np.random.default_rng(args.seed), args.n, h_scale=0.5, J_scale=0.4)
    model = IsingModel(h, J, beta=args.beta)

from dwave.system import EmbeddingComposite

if args.mock:
    from dwave.samplers import SimulatedAnnealingSampler
    from dwave.system.testing import MockDWaveSampler

    class FixedBeta(dimod.Sampler):
        """Fixed-β Metropolis at the hidden β; ignores every other keyword (the mock forwards its own)."""

        parameters, properties = {"num_reads": []}, {}

        def __init__(self, beta, seed):
            self.beta, self.rng = beta, np.random.default_rng(seed)

        def sample(self, bqm, num_reads=1, **ignored):
            return SimulatedAnnealingSampler().sample(
                bqm, num_reads=num_reads, beta_range=[self.beta] * 2, beta_schedule_type="linear", num_sweeps=2000,
                seed=int(self.rng.integers(2**31 - 1)))

    qpu = MockDWaveSampler(topology_type="pegasus", topology_shape=[3], parameter_warnings=False,
                           substitute_sampler=FixedBeta(args.hidden_beta, args.seed))
else:
    from dwave.system import DWaveSampler

    qpu = DWaveSampler()

sampler = EmbeddingComposite(qpu)
key = jax.random.PRNGKey(args.seed)
exact = np.asarray(Exact().marginals(model).mean) if model.n <= EXACT_MAX_N else None
for calibrate in (False, True):
    eng = DimodEngine(sampler, num_reads=args.reads, calibrate=calibrate, estimate_beta=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "no temperature parameter": that is the point here
        out = eng.marginals(model, key=key)
    info = {k: float(np.asarray(v)) for k, v in out.info.items()}
    mean = np.asarray(out.mean)
    se = np.asarray(out.samples).std(0) / np.sqrt(args.reads)  # reads are independent (shuffled iid reads)
    print(f"\n{'calibrated' if calibrate else 'uncalibrated'}: beta_eff {info['beta_eff']:.3f} "
          f"[{info['beta_eff_lo']:.3f}, {info['beta_eff_hi']:.3f}] (model beta {float(model.beta):g}); "
          f"chain-break fraction {info['chain_break_fraction']:.4f}, reads with a broken chain {info['broken_reads']:.3f}")
    if calibrate:
        print(f"scale_h {info['scale_h']:.4f}  scale_J {info['scale_J']:.4f}  iterations "
              f"{int(info['calibration_iterations'])}  calibrated: {bool(info['calibrated'])}")
    if exact is not None:
        print("spin  exact    sampled  (s.e.)")
        for j, (a, b, s) in enumerate(zip(exact, mean, se)):
            print(f"{j:4d}  {a:+.4f}  {b:+.4f}  ({s:.4f})")
        print(f"max |difference| {np.abs(exact - mean).max():.4f}")

"""The dimod contract of SQASampler and DQASampler, implemented once in
inference/dimod_sampler.py, checked with dimod's own conformance helpers."""

import dimod
import dimod.testing
import numpy as np
import pytest

from isingattn.errors import IsingInputError
from isingattn.inference.dimod.samplers import IsingSampler
from isingattn.inference.dimod import DQASampler
from isingattn.inference.dimod import SQASampler

# small settings: these tests check the contract, not the samples' distribution
FAST = {SQASampler: dict(num_sweeps=20, trotter=4, thermal_sweeps=8), DQASampler: dict(num_steps=4, tau=1.0)}
SAMPLERS = [pytest.param(cls, id=cls.__name__) for cls in FAST]


def _bqm(vartype=dimod.SPIN):
    bqm = dimod.BQM({"a": 0.5, 1: -0.3, (2, "x"): 0.1}, {("a", 1): -1.0, (1, (2, "x")): 0.4}, 0.7, dimod.SPIN)
    return bqm.change_vartype(vartype, inplace=False)


@pytest.mark.parametrize("cls", SAMPLERS)
def test_sampler_api_and_one_base(cls):
    sampler = cls(**FAST[cls])
    assert isinstance(sampler, IsingSampler)
    dimod.testing.assert_sampler_api(sampler)
    assert set(sampler.parameters) == set(cls.DEFAULTS) | {"seed"}
    assert sampler.properties["default_parameters"] == {**cls.DEFAULTS, **FAST[cls]}


@pytest.mark.parametrize("cls", SAMPLERS)
@pytest.mark.parametrize("vartype", [dimod.SPIN, dimod.BINARY])
def test_sample_ising_qubo_and_bqm_energies(cls, vartype):
    sampler = cls(**FAST[cls])
    bqm = _bqm(vartype)
    ss = sampler.sample(bqm, num_reads=7, seed=3)
    assert len(ss) == 7 and ss.vartype is vartype and set(ss.variables) == set(bqm.variables)
    dimod.testing.assert_sampleset_energies(ss, bqm)
    assert ss.info["seed"] == 3
    np.testing.assert_array_equal(ss.record.sample, sampler.sample(bqm, num_reads=7, seed=3).record.sample)
    # dimod.Sampler's other entry points
    spin = _bqm(dimod.SPIN)
    h, J, _ = spin.to_ising()
    dimod.testing.assert_sampleset_energies(sampler.sample_ising(h, J, num_reads=3, seed=1), dimod.BQM.from_ising(h, J))
    Q, _ = spin.to_qubo()
    dimod.testing.assert_sampleset_energies(sampler.sample_qubo(Q, num_reads=3, seed=1), dimod.BQM.from_qubo(Q))


@pytest.mark.parametrize("cls", SAMPLERS)
def test_empty_bqm_gives_num_reads_empty_rows(cls):
    ss = cls(**FAST[cls]).sample(dimod.BQM(dimod.BINARY), num_reads=4, seed=0)
    assert len(ss) == 4 and len(ss.variables) == 0 and ss.vartype is dimod.BINARY


@pytest.mark.parametrize("cls", SAMPLERS)
def test_shared_checks_of_keys_seed_and_beta(cls):
    with pytest.raises(IsingInputError, match=f"unknown {cls.__name__} parameter.*'bogus'"):
        cls(bogus=1)
    sampler = cls(**FAST[cls])
    for seed in (-1, 2**32, 1.5, True, "0"):
        with pytest.raises(IsingInputError, match=r"seed must be None or an int in \[0, 2\*\*32\)"):
            sampler.sample(_bqm(), num_reads=2, seed=seed)
    for beta in (0, -1.0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(IsingInputError, match="beta must be"):
            sampler.sample(_bqm(), num_reads=2, beta=beta, seed=0)
        with pytest.raises(IsingInputError, match="beta must be"):  # defaults are checked when given
            cls(beta=beta)
    with pytest.warns(UserWarning, match="Ignoring unknown kwarg"):  # dimod's rule: unknown sample() keys warn
        sampler.sample(_bqm(), num_reads=2, seed=0, bogus=1)

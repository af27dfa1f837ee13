"""Training through a sampler whose β is hidden (issue 14, part 4): the public hidden-β
sampler, samplers by name that save in a model config, and ``pool=True`` (one sampler
call and one calibration scale for all the models of a call) against brute-force
marginals and fluctuation–dissipation gradients."""

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("dwave.system")
pytest.importorskip("dwave.samplers")
from _hidden_beta import dense_model, z_scores
from isingattn.inference.dimod.specs import NamedSampler, SAMPLER_NAMES
from isingattn.inference.dimod.engine import DimodEngine

from isingattn.engine import from_spec, get, to_spec
from isingattn.errors import IsingInputError
from isingattn.model import IsingModel
from isingattn.inference.dimod.standins import HiddenBetaSampler
from isingattn.testing import brute_force

HIDDEN, TARGET = 2.5, 1.0


def test_hidden_beta_sampler_ignores_the_beta_it_is_given():
    """Its reads follow exp(-β0 E) whatever β_range a caller passes (brute force, 4 SE)."""
    h, J = dense_model(6, 7)
    bqm = IsingModel(h, J).to_bqm()
    ss = HiddenBetaSampler(HIDDEN).sample(bqm, num_reads=2000, seed=4, beta_range=[0.1, 0.1])
    reads = ss.record.sample[:, [ss.variables.index(v) for v in range(6)]]
    z, _ = z_scores(reads, brute_force(h, J, HIDDEN)["mean"])
    assert np.max(np.abs(z)) < 4
    assert set(HiddenBetaSampler.parameters) == {"num_reads", "seed"}  # no temperature to find
    with pytest.raises(IsingInputError, match="beta0 must be a positive"):
        HiddenBetaSampler(-1.0)


def test_named_sampler_saves_in_a_model_config():
    """An engine around a named sampler round-trips through JSON (engine spec and model
    Config), as a Cell's engine_kw builds it; the name builds the sampler it names."""
    from isingattn.models.saved import config_from_dict, config_to_dict
    from isingattn.models.transformer import Config

    kw = dict(sampler="mock-pegasus:hidden-beta:2.5:100", calibrate=True, pool=True, num_bootstrap=0, num_reads=64)
    eng = get("dimod", **kw)
    assert isinstance(eng.sampler, NamedSampler) and eng.embedded
    assert eng.sampler.built.child.substitute_sampler.beta0 == HIDDEN
    assert from_spec(json.loads(json.dumps(to_spec(eng)))) == eng
    cfg = Config(vocab_size=6, seq_len=8, n_out=8, variant="hJ", engine=eng)
    d = json.loads(json.dumps(config_to_dict(cfg)))
    assert d["engine"]["name"] == "dimod" and d["engine"]["config"]["sampler"] == kw["sampler"]
    assert config_from_dict(d).engine == eng
    # sampler keywords survive the saved form too
    eng2 = DimodEngine("sa", num_reads=8, num_sweeps=20)
    assert from_spec(json.loads(json.dumps(to_spec(eng2)))) == eng2
    assert dict(eng2.sample_kwargs) == {"num_sweeps": 20}


@pytest.mark.parametrize("name", ["hidden-beta", "hidden-beta:abc", "hidden-beta:-2", "mock-pegasus:", "qpu",
                                  "mock-pegasus1:sa", "hidden-beta:2.5:0"])
def test_bad_sampler_name_lists_the_forms(name):
    with pytest.raises(IsingInputError) as e:
        DimodEngine(name)
    msg = str(e.value)
    assert repr(name) in msg and all(form in msg for form in SAMPLER_NAMES)


def _exact_moments(h, J, beta):
    r = brute_force(h, J, beta)
    p, s = r["probs"], r["spins"]
    return r["mean"], (p[:, None, None] * s[:, :, None] * s[:, None, :]).sum(0) - np.outer(r["mean"], r["mean"])


def test_pooled_calibration_reaches_exact_marginals_and_gradient():
    """pool=True over a batch: one union BQM per round, one scale; every model's marginals
    within 4 SE of brute force at the target β, and the h-gradient of w·mean is the
    fluctuation–dissipation one: β·Cov of the returned reads exactly, and within 4 SE of
    brute force's β·Cov."""
    rng = np.random.default_rng(3)
    B, n, S = 4, 6, 2000
    h = rng.normal(size=(B, n)) * 0.5
    _, J = dense_model(n, 4)
    w = rng.normal(size=(B, n))
    eng = DimodEngine("hidden-beta:2.5", num_reads=S, calibrate=True, pool=True, num_bootstrap=0)
    key = jax.random.PRNGKey(5)

    def f(hh):
        out = eng.marginals(IsingModel(hh, J, beta=TARGET), key=key)
        return jnp.sum(w * out.mean), out

    (val, out), g = jax.value_and_grad(f, has_aux=True)(jnp.asarray(h))
    info = {k: np.asarray(v) for k, v in out.info.items()}
    assert np.all(info["calibrated"]) and np.all(info["calibration_iterations"] <= 3)
    np.testing.assert_allclose(info["scale_J"], TARGET / HIDDEN, rtol=0.05)  # the hidden β read off
    x = np.asarray(out.samples)
    for b in range(B):
        mean, cov = _exact_moments(h[b], J, TARGET)
        z, _ = z_scores(x[b], mean)
        assert np.max(np.abs(z)) < 4, b
        d = x[b] - x[b].mean(0)
        fd = TARGET * (w[b] @ (d.T @ d) / S)  # β Cov(w·s, s_j) of these reads
        np.testing.assert_allclose(np.asarray(g)[b], fd, rtol=1e-6, atol=1e-9)
        per_read = TARGET * (d @ w[b])[:, None] * d  # its per-read terms: their SE
        se = per_read.std(0) / np.sqrt(S)
        assert np.max(np.abs(fd - TARGET * w[b] @ cov) / se) < 4, b


def test_pooled_causal_model_with_inactive_spins():
    """A causal model (query i sees spins 0..i) through pool=True: the inactive spins are
    drawn on the host, the active ones by the sampler; every query's marginals match brute
    force on its prefix (4 SE); the causal buckets each get their own calibrated scale."""
    rng = np.random.default_rng(8)
    n = 5
    h = rng.normal(size=(n, n)) * 0.6  # one field row per query
    _, J = dense_model(n, 9)
    eng = DimodEngine("hidden-beta:2.5", num_reads=2000, calibrate=True, pool=True, num_bootstrap=0)
    out = eng.marginals(IsingModel(h, J, beta=TARGET, causal=True), key=jax.random.PRNGKey(2))
    x = np.asarray(out.samples)
    for q in range(n):
        mask = np.arange(n) <= q
        z, _ = z_scores(x[q][:, : q + 1], brute_force(h[q], J, TARGET, mask)["mean"][: q + 1])
        assert np.max(np.abs(z)) < 4, q
        np.testing.assert_array_equal(np.asarray(out.mean)[q][q + 1:], 0.0)
    assert np.all(np.asarray(out.info["calibrated"]))


def test_pooled_embedded_sampler_reaches_exact_marginals():
    """pool=True through EmbeddingComposite(MockDWaveSampler) on Pegasus (by name): one call per
    model per round, one pooled scale within the mock's ranges; 4 SE of brute force."""
    h, J = dense_model(6, 0)
    hb = np.stack([h, -h])
    eng = DimodEngine("mock-pegasus:hidden-beta:2.5:1000", num_reads=1500, calibrate=True, pool=True,
                      num_bootstrap=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", category=RuntimeWarning)  # no ChainBreak/Calibration warning
        out = eng.marginals(IsingModel(hb, J, beta=TARGET), key=jax.random.PRNGKey(1))
    info = {k: np.asarray(v) for k, v in out.info.items()}
    assert np.all(info["calibrated"]) and np.all(info["chains_intact"])
    assert np.all(np.abs(J).max() * info["scale_J"] <= 1.0)  # the mock's j_range
    for b in range(2):
        z, _ = z_scores(np.asarray(out.samples)[b], brute_force(hb[b], J, TARGET)["mean"])
        assert np.max(np.abs(z)) < 4, b


def test_rao_blackwell_on_calibrated_reads_reaches_exact_marginals_with_less_variance():
    """rao_blackwell=True: the mean of tanh(β(h + J s)) over the calibrated reads, within 4 SE
    of brute force (SE from those per-read terms' own spread), and with less spread than the
    spins themselves (the conditional expectation: Var E[s_i | rest] ≤ Var s_i)."""
    rng = np.random.default_rng(8)
    B, n, S = 3, 6, 2000
    h = rng.normal(size=(B, n)) * 0.5
    _, J = dense_model(n, 9)
    eng = DimodEngine("hidden-beta:2.5", num_reads=S, calibrate=True, pool=True, num_bootstrap=0, rao_blackwell=True)
    assert from_spec(to_spec(eng)) == eng  # the option saves in a model config
    out = eng.marginals(IsingModel(h, J, beta=TARGET), key=jax.random.PRNGKey(2))
    assert np.all(np.asarray(out.info["calibrated"]))
    x = np.asarray(out.samples)
    for b in range(B):
        terms = np.tanh(TARGET * (h[b] + x[b] @ J))  # [S, n]: E[s_i | the other spins of the read]
        np.testing.assert_allclose(np.asarray(out.mean)[b], terms.mean(0), rtol=1e-10, atol=1e-12)
        mean, _ = _exact_moments(h[b], J, TARGET)
        se = terms.std(0, ddof=1) / np.sqrt(S)
        assert np.max(np.abs(terms.mean(0) - mean) / se) < 4, b
        assert np.all(terms.var(0) < x[b].var(0)), b
    raw = DimodEngine("hidden-beta:2.5", num_reads=8, pool=True, rao_blackwell=True)
    with pytest.warns(UserWarning, match="belongs to neither temperature"):  # raw reads: said, not hidden
        raw.marginals(IsingModel(h, J, beta=TARGET), key=jax.random.PRNGKey(3))

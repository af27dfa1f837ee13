"""IsingModel: energy convention, dimod / networkx interop, pytree behaviour and input
validation (DESIGN.md §1).

Every check compares against an independent reference: an explicit numpy double
loop over ``j < k`` for the energy, dimod's own ``BinaryQuadraticModel.energies``,
or a closed form.
"""

import itertools

import dimod
import equinox as eqx
import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isingattn import IsingInputError, IsingModel
from isingattn.testing import all_spins, brute_force
from isingattn.instances import random_model
from isingattn.inference.exact import Exact

TOL = 1e-12


# ---- independent reference ---------------------------------------------------------


def np_energy(h, J, s, active=None):
    """E(s) = -Σ_j h_j s_j - Σ_{j<k} J_jk s_j s_k over active spins, as explicit loops."""
    h, J, s = np.asarray(h, np.float64), np.asarray(J, np.float64), np.asarray(s, np.float64)
    n = h.shape[-1]
    act = np.ones(n, bool) if active is None else np.asarray(active, bool)
    e = 0.0
    for j in range(n):
        if not act[j]:
            continue
        e -= h[j] * s[j]
        for k in range(j + 1, n):
            if act[k]:
                e -= J[j, k] * s[j] * s[k]
    return e


def random_spins(rng, shape):
    return rng.choice([-1.0, 1.0], size=shape)


# ---- energy ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_energy_matches_numpy_loops_and_dimod_on_every_configuration(n):
    rng = np.random.default_rng(n)
    h, J = random_model(rng, n, h_scale=1.3, J_scale=0.7)
    model = IsingModel(h, J, beta=0.7)
    S = all_spins(n)  # [2^n, n]
    E = np.asarray(model.energy(S))
    assert E.shape == (2**n,) and E.dtype == np.float64
    ref = np.array([np_energy(h, J, s) for s in S])
    np.testing.assert_allclose(E, ref, rtol=0, atol=TOL)

    # dimod's SPIN energy (plus sign convention, offset 0) must be the same number.
    bqm = model.to_bqm()
    assert bqm.vartype is dimod.SPIN and bqm.offset == 0
    np.testing.assert_allclose(bqm.energies((S, list(range(n)))), E, rtol=0, atol=TOL)
    for s in S[:: max(1, 2**n // 7)]:
        assert abs(bqm.energy(dict(enumerate(s))) - float(model.energy(s))) < TOL


def test_energy_sign_convention_ferromagnetic():
    # positive J favours aligned spins, positive h favours +1 (DESIGN.md §1)
    J = np.array([[0.0, 2.0], [2.0, 0.0]])
    m = IsingModel([0.5, 0.0], J)
    E = {tuple(s): float(m.energy(np.array(s, float))) for s in itertools.product([1, -1], repeat=2)}
    assert E[(1, 1)] == -2.5 and E[(-1, -1)] == -1.5 and E[(1, -1)] == 1.5 and E[(-1, 1)] == 2.5


def test_energy_masked_spins_do_not_contribute_numpy_and_dimod():
    rng = np.random.default_rng(1)
    n, B = 7, 4
    h = rng.normal(size=(B, n))
    _, J = random_model(rng, n, J_scale=1.1)
    mask = rng.random((B, n)) < 0.6
    mask[0] = True
    mask[1] = False
    mask[1, 3] = True  # a single active spin
    model = IsingModel(h, J, mask=mask)
    S = random_spins(rng, (5, B, n))
    E = np.asarray(model.energy(S))
    assert E.shape == (5, B)
    for r in range(5):
        for b in range(B):
            assert abs(E[r, b] - np_energy(h[b], J, S[r, b], mask[b])) < TOL
    # Changing masked spins never changes the energy.
    flipped = np.where(mask, S, -S)
    np.testing.assert_allclose(np.asarray(model.energy(flipped)), E, rtol=0, atol=TOL)
    # The BQM of batch element b contains exactly the active spins and agrees on them.
    for b in range(B):
        bqm = model.to_bqm(b)
        act = list(np.flatnonzero(mask[b]))
        assert list(bqm.variables) == act
        for r in range(5):
            assert abs(bqm.energy({j: S[r, b, j] for j in act}) - E[r, b]) < TOL


def test_energy_batched_models_and_to_bqm_index():
    rng = np.random.default_rng(2)
    n = 5
    # h [2, 3, n] with J per first batch axis [2, 1, n, n]: batch shape (2, 3)
    h = rng.normal(size=(2, 3, n)) * 2
    Js = np.stack([random_model(rng, n, J_scale=1.0)[1] for _ in range(2)])[:, None]
    model = IsingModel(h, Js, beta=2.0)
    assert model.batch_shape == (2, 3)
    S = random_spins(rng, (2, 3, n))
    E = np.asarray(model.energy(S))
    for a, c in itertools.product(range(2), range(3)):
        ref = np_energy(h[a, c], Js[a, 0], S[a, c])
        assert abs(E[a, c] - ref) < TOL
        bqm = model.to_bqm((a, c))
        assert abs(bqm.energy(dict(enumerate(S[a, c]))) - ref) < TOL
    # spins broadcast against the batch: one configuration for every model
    E1 = np.asarray(model.energy(S[0, 0]))
    assert E1.shape == (2, 3)
    for a, c in itertools.product(range(2), range(3)):
        assert abs(E1[a, c] - np_energy(h[a, c], Js[a, 0], S[0, 0])) < TOL
    with pytest.raises(IsingInputError, match="index"):
        model.to_bqm()  # batched: must pick one


@settings(max_examples=20)
@given(
    n=st.integers(1, 6),
    batch=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    h_scale=st.sampled_from([1e-3, 1.0, 1e3]),
    J_scale=st.sampled_from([1e-3, 1.0, 1e2]),
    seed=st.integers(0, 2**31 - 1),
    masked=st.booleans(),
)
def test_energy_property_random_shapes_and_scales(n, batch, h_scale, J_scale, seed, masked):
    rng = np.random.default_rng(seed)
    batch = tuple(batch)
    h = rng.normal(size=batch + (n,)) * h_scale
    _, J = random_model(rng, n, J_scale=J_scale)
    mask = (rng.random(batch + (n,)) < 0.7) if masked else None
    model = IsingModel(h, J, mask=mask)
    S = random_spins(rng, batch + (n,))
    E = np.asarray(model.energy(S))
    assert E.shape == batch
    for idx in np.ndindex(*batch):
        ref = np_energy(h[idx], J, S[idx], None if mask is None else mask[idx])
        scale = 1.0 + np.abs(h[idx]).sum() + np.abs(J).sum()
        assert abs(E[idx] - ref) <= 1e-14 * scale
        bqm = model.to_bqm(idx if batch else None)
        sample = {v: S[idx][v] for v in bqm.variables}
        assert abs(bqm.energy(sample) - E[idx]) <= 1e-14 * scale


# ---- dimod / networkx round trips ------------------------------------------------------


def test_bqm_round_trip_keeps_h_J_exactly():
    rng = np.random.default_rng(3)
    h, J = random_model(rng, 9, h_scale=2.0, J_scale=0.8, graph="lattice")
    model = IsingModel(h, J, beta=1.5)
    back = IsingModel.from_bqm(model.to_bqm(), beta=1.5)
    np.testing.assert_array_equal(np.asarray(back.h), h)
    np.testing.assert_array_equal(np.asarray(back.J), J)
    assert float(back.beta) == 1.5
    assert list(back.labels) == list(range(9))


def test_from_bqm_spin_sign_convention():
    # dimod SPIN: E = Σ a_j s_j + Σ b_jk s_j s_k, so h = -a, J = -b
    bqm = dimod.BinaryQuadraticModel({"a": 0.5, "b": -1.0}, {("a", "b"): 2.0}, 3.0, dimod.SPIN)
    m = IsingModel.from_bqm(bqm)
    np.testing.assert_array_equal(np.asarray(m.h), [-0.5, 1.0])
    np.testing.assert_array_equal(np.asarray(m.J), [[0.0, -2.0], [-2.0, 0.0]])
    assert m.labels == ("a", "b")


def test_from_bqm_binary_energies_up_to_constant_and_marginals():
    rng = np.random.default_rng(4)
    n = 6
    labels = [f"x{i}" for i in range(n)]
    lin = {v: rng.normal() for v in labels}
    quad = {(labels[j], labels[k]): rng.normal() for j in range(n) for k in range(j + 1, n) if rng.random() < 0.7}
    bqm = dimod.BinaryQuadraticModel(dimod.BINARY)
    bqm.add_linear_from(lin)  # linear first, so the variable order is `labels`
    bqm.add_quadratic_from(quad)
    bqm.offset = 1.25
    assert list(bqm.variables) == labels
    model = IsingModel.from_bqm(bqm, beta=0.8)
    assert list(model.labels) == labels
    S = all_spins(n)
    X = ((S + 1) / 2).astype(int)  # x = (s + 1) / 2
    e_bqm = bqm.energies((X, labels))
    e_model = np.asarray(model.energy(S))
    diff = e_bqm - e_model  # a constant (the dropped offset)
    np.testing.assert_allclose(diff, diff[0], rtol=0, atol=1e-12)
    # Boltzmann distribution of the BINARY bqm computed directly from dimod energies
    w = np.exp(-0.8 * (e_bqm - e_bqm.min()))
    p = w / w.sum()
    m = Exact().marginals(model)
    np.testing.assert_allclose(np.asarray(m.mean), p @ S, rtol=0, atol=1e-12)


def test_arbitrary_hashable_labels_kept_in_order():
    labels = ["z", ("t", 1), "a", 7, frozenset({"q"})]
    n = len(labels)
    rng = np.random.default_rng(5)
    h, J = random_model(rng, n)
    model = IsingModel(h, J, labels=labels)
    bqm = model.to_bqm()
    assert list(bqm.variables) == labels
    for j, v in enumerate(labels):
        assert bqm.get_linear(v) == -h[j]
    assert bqm.get_quadratic(labels[0], labels[1]) == -J[0, 1]
    back = IsingModel.from_bqm(bqm)
    assert list(back.labels) == labels
    np.testing.assert_array_equal(np.asarray(back.J), J)
    s = random_spins(rng, n)
    assert abs(bqm.energy(dict(zip(labels, s))) - float(model.energy(s))) < TOL

    G = model.to_networkx()
    assert list(G.nodes) == labels
    back = IsingModel.from_networkx(G)
    assert list(back.labels) == labels
    np.testing.assert_array_equal(np.asarray(back.h), h)


def test_labels_must_be_distinct_and_match_n():
    with pytest.raises(IsingInputError, match="distinct"):
        IsingModel(np.zeros(2), np.zeros((2, 2)), labels=["a", "a"])
    with pytest.raises(IsingInputError, match="2 distinct"):
        IsingModel(np.zeros(2), np.zeros((2, 2)), labels=["a"])


def test_networkx_round_trip_and_attributes():
    rng = np.random.default_rng(6)
    n = 6
    h, J = random_model(rng, n, graph="chain")
    model = IsingModel(h, J, beta=0.3)
    G = model.to_networkx()
    assert G.number_of_nodes() == n and G.number_of_edges() == n - 1  # a chain: only nonzero couplings
    for j in range(n):
        assert G.nodes[j]["h"] == h[j]
    for j in range(n - 1):
        assert G.edges[j, j + 1]["J"] == J[j, j + 1]
    back = IsingModel.from_networkx(G)
    np.testing.assert_array_equal(np.asarray(back.h), h)
    np.testing.assert_array_equal(np.asarray(back.J), J)
    assert float(back.beta) == pytest.approx(0.3)


def test_from_networkx_defaults_and_errors():
    G = nx.Graph()
    G.add_edge("a", "b", J=1.5)
    G.add_node("c", h=-2.0)
    m = IsingModel.from_networkx(G)
    np.testing.assert_array_equal(np.asarray(m.h), [0.0, 0.0, -2.0])  # missing h -> 0
    assert float(m.J[0, 1]) == 1.5 and float(m.J[1, 0]) == 1.5
    G.add_edge("a", "c")
    with pytest.raises(IsingInputError, match="'J'"):
        IsingModel.from_networkx(G)
    G = nx.Graph()
    G.add_edge("a", "a", J=1.0)
    with pytest.raises(IsingInputError, match="self-loop"):
        IsingModel.from_networkx(G)
    with pytest.raises(TypeError, match="BinaryQuadraticModel"):
        IsingModel.from_bqm({"a": 1.0})


def test_to_networkx_with_mask_leaves_out_masked_spins():
    rng = np.random.default_rng(7)
    h, J = random_model(rng, 5, J_scale=1.0)
    mask = np.array([True, False, True, True, False])
    G = IsingModel(h, J, mask=mask).to_networkx()
    assert sorted(G.nodes) == [0, 2, 3]
    back = IsingModel.from_networkx(G)
    idx = [0, 2, 3]
    np.testing.assert_array_equal(np.asarray(back.h), h[idx])
    np.testing.assert_array_equal(np.asarray(back.J), J[np.ix_(idx, idx)])


# ---- pytree behaviour --------------------------------------------------------------------


def test_model_is_a_pytree_through_jit():
    rng = np.random.default_rng(8)
    n = 6
    h, J = random_model(rng, n, J_scale=1.0)
    s = random_spins(rng, n)
    model = IsingModel(h, J, beta=2.0, mask=np.array([1, 1, 0, 1, 1, 1], bool))
    leaves = jax.tree_util.tree_leaves(model)
    assert len(leaves) == 4  # h, J, beta, mask are leaves; causal/labels are static

    f = jax.jit(lambda m, s: m.energy(s))
    ref = np_energy(h, J, s, model.mask)
    assert abs(float(f(model, s)) - ref) < TOL
    # construction under jit
    g = jax.jit(lambda h, J: IsingModel(h, J).energy(s))
    assert abs(float(g(h, J)) - np_energy(h, J, s)) < TOL
    # a model can be returned from jit and keeps its static fields
    m2 = eqx.filter_jit(lambda h: IsingModel(h, J, labels="abcdef"))(h)
    assert m2.labels == tuple("abcdef")
    np.testing.assert_array_equal(np.asarray(m2.h), h)


def test_vmap_over_a_batch_of_fields():
    rng = np.random.default_rng(9)
    n, B = 5, 7
    H = rng.normal(size=(B, n))
    _, J = random_model(rng, n, J_scale=1.0)
    S = random_spins(rng, (B, n))
    E = jax.vmap(lambda h, s: IsingModel(h, J).energy(s))(H, S)
    ref = np.array([np_energy(H[b], J, S[b]) for b in range(B)])
    np.testing.assert_allclose(np.asarray(E), ref, rtol=0, atol=TOL)
    # vmap over a batched model pytree
    models = IsingModel(H, J)
    axes = jax.tree_util.tree_map(lambda x: 0 if x is models.h else None, models)  # map h only
    E2 = jax.vmap(lambda m, s: m.energy(s), in_axes=(axes, 0))(models, S)
    np.testing.assert_allclose(np.asarray(E2), ref, rtol=0, atol=TOL)


def test_grad_of_energy_closed_form():
    rng = np.random.default_rng(10)
    n = 6
    h, J = random_model(rng, n, J_scale=1.0)
    s = random_spins(rng, n)
    gh = jax.grad(lambda h: IsingModel(h, J).energy(s))(h)
    np.testing.assert_allclose(np.asarray(gh), -s, rtol=0, atol=TOL)  # ∂E/∂h = -s
    # J is a full symmetric matrix, E = -½ sᵀ J s  =>  ∂E/∂J_jk = -½ s_j s_k per entry
    gJ = jax.grad(lambda J: IsingModel(h, J).energy(s))(J)
    np.testing.assert_allclose(np.asarray(gJ), -0.5 * np.outer(s, s), rtol=0, atol=TOL)
    # with a mask: masked spins get zero gradient
    mask = np.array([1, 0, 1, 1, 0, 1], bool)
    gh = jax.grad(lambda h: IsingModel(h, J, mask=mask).energy(s))(h)
    np.testing.assert_allclose(np.asarray(gh), -s * mask, rtol=0, atol=TOL)
    gJ = jax.grad(lambda J: IsingModel(h, J, mask=mask).energy(s))(J)
    np.testing.assert_allclose(np.asarray(gJ), -0.5 * np.outer(s * mask, s * mask), rtol=0, atol=TOL)
    # grad w.r.t. the whole model pytree
    gm = jax.grad(lambda m: m.energy(s))(IsingModel(h, J))
    np.testing.assert_allclose(np.asarray(gm.h), -s, rtol=0, atol=TOL)


def test_masked_parameters_zero_inactive_rows_and_columns():
    rng = np.random.default_rng(11)
    h, J = random_model(rng, 4, J_scale=1.0)
    mask = np.array([True, False, True, True])
    hm, Jm = IsingModel(h, J, mask=mask).masked_parameters()
    np.testing.assert_array_equal(np.asarray(hm), h * mask)
    np.testing.assert_array_equal(np.asarray(Jm), J * np.outer(mask, mask))


def test_float32_model_keeps_float32():
    h = np.array([0.1, -0.2, 0.3], np.float32)
    J = np.zeros((3, 3), np.float32)
    m = IsingModel(h, J, beta=2.0)
    assert m.h.dtype == jnp.float32 and m.J.dtype == jnp.float32 and m.beta.dtype == jnp.float32
    E = m.energy(np.ones(3, np.float32))
    assert E.dtype == jnp.float32
    assert abs(float(E) - (-0.2)) < 1e-6


def test_brute_force_reference_is_self_consistent():
    # sanity of the shared float64 reference used by the engine tests
    rng = np.random.default_rng(12)
    h, J = random_model(rng, 4, J_scale=1.0)
    r = brute_force(h, J, beta=1.3)
    E = np.array([np_energy(h, J, s) for s in r["spins"]])
    np.testing.assert_allclose(r["log_z"], np.log(np.exp(-1.3 * E).sum()), rtol=1e-14)
    np.testing.assert_allclose(r["probs"], np.exp(-1.3 * E - r["log_z"]), rtol=1e-12)


def test_energy_under_jit_with_concrete_spins_from_outside():
    """Under jit the model's parameters are traced while the spins are a concrete array
    closed over; the ±1 check is then staged (omnistaging) and must not be read as a bool.
    Reference: the closed form -Σh_i s_i - Σ_{i<j} J_ij s_i s_j in numpy."""
    rng = np.random.default_rng(5)
    h, J = rng.normal(size=4), np.triu(rng.normal(size=(4, 4)), 1)
    J = J + J.T
    s = np.sign(rng.normal(size=(3, 4)))
    ref = -(s @ h) - 0.5 * np.einsum("ci,ij,cj->c", s, J, s)
    got = jax.jit(lambda h: IsingModel(h, jnp.asarray(J)).energy(jnp.asarray(s)))(jnp.asarray(h))
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12)
    # a staged check fails as NaN (eagerly: "spins must be -1 or +1"), with no host callback
    bad = jax.jit(lambda h: IsingModel(h, jnp.asarray(J)).energy(jnp.zeros((3, 4))))
    assert bool(jnp.all(jnp.isnan(bad(jnp.asarray(h)))))
    assert "callback" not in bad.lower(jnp.asarray(h)).as_text()

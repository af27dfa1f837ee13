"""Bad models are refused at construction with messages that name the argument (issue 10),
and bad spins at evaluation; under jit a failed check makes the values NaN, with no host callback.

* A model without spins (``n = 0``), from arrays, an empty BQM or an empty graph, is an
  ``IsingInputError`` at construction instead of a ZeroDivisionError in an engine.
* Under ``jit`` every field carries the model's validation, so a function that reads
  only ``beta`` or only ``J`` of an invalid model returns NaN instead of the bad value, and
  the compiled program has no host callback (JAX's persistent cache stores it).
* ``beta=None``, ragged nested lists, unhashable labels, non-numeric BQM/graph biases and
  a finite input that overflows when cast to float32 get messages naming the argument.
"""

import warnings

import dimod
import equinox as eqx
import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.inference.exact import Exact

N = 3
H0, J0 = np.zeros(N), np.zeros((N, N))


# ---- n = 0 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: IsingModel(np.zeros(0), np.zeros((0, 0))),
        lambda: IsingModel(np.zeros((4, 0)), np.zeros((0, 0))),  # a batch of empty models
        lambda: IsingModel([], [[]]),
        lambda: IsingModel.from_bqm(dimod.BinaryQuadraticModel(dimod.SPIN)),
        lambda: IsingModel.from_networkx(nx.Graph()),
    ],
    ids=["arrays", "batched", "lists", "empty bqm", "empty graph"],
)
def test_model_without_spins_is_refused_at_construction(build):
    with pytest.raises(IsingInputError, match="at least one spin"):
        build()


def test_one_spin_is_still_a_model():
    # the smallest valid model: <s> = tanh(beta h) in closed form
    m = IsingModel([0.7], [[0.0]], beta=1.3)
    assert m.n == 1
    np.testing.assert_allclose(Exact().marginals(m).mean, [np.tanh(1.3 * 0.7)], rtol=1e-12)


# ---- validation under jit does not depend on h being used ---------------------------------


def _nan_at_runtime(f, *args, match):
    """Under jit a failed check poisons the result: every value NaN (``match``, the eager
    message, is what the same call raises outside jit), and no host callback in the program."""
    out = jax.block_until_ready(f(*args))
    assert bool(jnp.all(jnp.isnan(out))), (match, out)
    assert "callback" not in f.lower(*args).as_text(), "a check left a host callback in the program"


@pytest.mark.parametrize("beta", [-1.0, 0.0, np.nan, np.inf])
def test_jit_reading_only_beta_of_a_bad_beta_gives_nan(beta):
    f = jax.jit(lambda h, J, b: IsingModel(h, J, b).beta)
    assert float(f(jnp.zeros(N), jnp.zeros((N, N)), 2.0)) == 2.0  # a valid model passes through unchanged
    _nan_at_runtime(f, jnp.zeros(N), jnp.zeros((N, N)), beta, match="beta must be a finite positive")


@pytest.mark.parametrize(
    "J,match",
    [
        (np.triu(np.ones((N, N)), 1), "J must be symmetric"),
        (np.eye(N), "J must have a zero diagonal"),
        (np.where(np.eye(N) == 0, np.nan, 0.0), "J contains NaN or inf"),
        (np.where(np.eye(N) == 0, np.inf, 0.0), "J contains NaN or inf"),
    ],
    ids=["asymmetric", "diagonal", "nan", "inf"],
)
def test_jit_reading_only_J_of_a_bad_J_gives_nan(J, match):
    f = jax.jit(lambda h, J, b: IsingModel(h, J, b).J)
    good = np.array([[0.0, 0.5, 0.0], [0.5, 0.0, -1.0], [0.0, -1.0, 0.0]])
    np.testing.assert_array_equal(f(jnp.zeros(N), good, 1.0), good)
    _nan_at_runtime(f, jnp.zeros(N), jnp.asarray(J), 1.0, match=match)


def test_jit_reading_one_field_sees_the_other_fields_checks():
    # every field carries every check: an invalid h is caught through beta or J as well
    bad_h = jnp.array([np.nan, 0.0, 0.0])
    for read in (lambda m: m.beta, lambda m: m.J, lambda m: m.h):
        f = jax.jit(lambda h, J, b: read(IsingModel(h, J, b)))
        _nan_at_runtime(f, bad_h, jnp.zeros((N, N)), 1.0, match="h contains NaN or inf")
    g = jax.jit(lambda h, J, b: IsingModel(h, J, b).J)
    _nan_at_runtime(g, jnp.zeros(N), jnp.zeros((N, N)), -2.0, match="beta must be a finite positive")


def test_jit_model_fields_are_unchanged_when_valid():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(2, N))
    A = rng.normal(size=(N, N))
    J = np.triu(A, 1) + np.triu(A, 1).T
    m = jax.jit(lambda h, J, b: IsingModel(h, J, b))(h, J, 0.7)
    np.testing.assert_array_equal(m.h, h)
    np.testing.assert_array_equal(m.J, J)
    assert float(m.beta) == 0.7
    # and gradients through every field are the plain ones: d(beta E)/d beta = E
    s = np.array([1.0, -1.0, 1.0])
    gb = jax.grad(lambda b: jnp.sum(b * IsingModel(h, J, b).energy(s)))(0.7)
    E = -h @ s - 0.5 * s @ J @ s
    np.testing.assert_allclose(gb, E.sum(), rtol=1e-12)


# ---- constructor messages name the argument -----------------------------------------------


BAD = [
    ("beta None", dict(h=H0, J=J0, beta=None), IsingTypeError, r"^beta must be .*got None"),
    ("h None", dict(h=None, J=J0), IsingTypeError, r"^h must be .*got None"),
    ("ragged h", dict(h=[[1.0, 2.0], [3.0]], J=np.zeros((2, 2))), IsingInputError, r"^h must be .*ragged"),
    ("ragged J", dict(h=[1.0, 2.0], J=[[0.0, 1.0], [1.0]]), IsingInputError, r"^J must be .*ragged"),
    ("ragged mask", dict(h=[1.0, 2.0], J=np.zeros((2, 2)), mask=[[True], [True, False]]), IsingInputError,
     r"^mask must be .*ragged"),
    ("unhashable labels", dict(h=[1.0, 2.0], J=np.zeros((2, 2)), labels=[[1], [2]]), IsingTypeError,
     r"^labels must be hashable.*labels\[0\] = \[1\].*tuples"),
    ("labels not iterable", dict(h=[1.0, 2.0], J=np.zeros((2, 2)), labels=5), IsingTypeError, r"^labels must be a sequence"),
    ("beta string", dict(h=H0, J=J0, beta="1"), IsingTypeError, r"^beta must be a positive real number"),
    # x64 is on in the tests, so this is the float32 cast the constructor itself makes:
    # beta follows the dtype of h and J
    ("beta overflows float32", dict(h=np.ones(N, np.float32), J=np.zeros((N, N), np.float32), beta=1e39), IsingInputError,
     r"^beta must be .*beta is finite as given .*1e\+39.* overflows to inf when cast to float32"),
    ("beta underflows float32", dict(h=np.ones(N, np.float32), J=np.zeros((N, N), np.float32), beta=1e-50), IsingInputError,
     r"^beta must be .*underflows to 0 when cast to float32"),
    ("beta overflows float16", dict(h=np.ones(N, np.float16), J=np.zeros((N, N), np.float16), beta=1e5), IsingInputError,
     r"overflows to inf when cast to float16"),
]


@pytest.mark.parametrize("kwargs,exc,match", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_constructor_messages_name_the_argument(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        IsingModel(**kwargs)


def test_genuine_nonfinite_input_keeps_the_plain_message():
    # inf as given is not a cast problem: no overflow explanation
    with pytest.raises(IsingInputError, match="h contains NaN or inf") as info:
        IsingModel(np.array([np.inf, 0.0, 0.0]), J0)
    assert "cast" not in str(info.value)
    with pytest.raises(IsingInputError, match="beta must be a finite positive") as info:
        IsingModel(np.ones(N, np.float32), np.zeros((N, N), np.float32), beta=np.inf)
    assert "cast" not in str(info.value)


@pytest.mark.parametrize("name", ["h", "J"])
def test_float64_input_that_overflows_float32_with_x64_disabled(name):
    # With x64 off, float64 arrays are cast to float32: 1e39 is finite as given but inf after
    h = np.array([1e39, 0.0]) if name == "h" else np.zeros(2)
    J = np.array([[0.0, 1e39], [1e39, 0.0]]) if name == "J" else np.zeros((2, 2))
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # JAX notes that float64 is truncated, numpy that the cast overflows
        with pytest.raises(IsingInputError, match=rf"^{name} contains NaN or inf.*{name} is finite as given .*"
                                                  r"overflows to inf when cast to float32.*jax_enable_x64"):
            IsingModel(h, J)
        m = IsingModel(np.array([3e38, 0.0]), np.zeros((2, 2)))  # the float32 range itself is fine
        assert m.h.dtype == jnp.float32 and float(m.h[0]) == pytest.approx(3e38, rel=1e-6)


def test_from_networkx_non_numeric_attributes_name_the_node_or_edge():
    G = nx.Graph()
    G.add_node("a", h="up")
    G.add_node("b", h=0.5)
    G.add_edge("a", "b", J=1.0)
    with pytest.raises(IsingTypeError, match=r"node 'a' attribute 'h' must be a real number; got str 'up'"):
        IsingModel.from_networkx(G)
    G.nodes["a"]["h"] = 0.1
    G.edges["a", "b"]["J"] = 1 + 2j
    with pytest.raises(IsingTypeError, match=r"edge \('a', 'b'\) attribute 'J' must be a real number; got complex"):
        IsingModel.from_networkx(G)
    G.edges["a", "b"]["J"] = [1.0]
    with pytest.raises(IsingTypeError, match=r"edge \('a', 'b'\) attribute 'J' must be a real number; got list"):
        IsingModel.from_networkx(G)
    # numeric strings are not numbers either; a valid graph still converts
    G.edges["a", "b"]["J"] = -0.25
    m = IsingModel.from_networkx(G)
    np.testing.assert_array_equal(m.h, [0.1, 0.5])
    np.testing.assert_array_equal(m.J, [[0.0, -0.25], [-0.25, 0.0]])


def test_from_bqm_non_numeric_biases_name_the_variable():
    bqm = dimod.BinaryQuadraticModel({"a": "x", "b": 0.5}, {}, 0.0, dimod.SPIN, dtype=object)
    with pytest.raises(IsingTypeError, match=r"from_bqm: the linear bias of 'a' must be a real number; got str 'x'"):
        IsingModel.from_bqm(bqm)
    bqm = dimod.BinaryQuadraticModel({"a": 0.1, "b": 0.5}, {}, 0.0, dimod.SPIN, dtype=object)
    bqm.set_quadratic("a", "b", "y")
    with pytest.raises(IsingTypeError, match=r"from_bqm: the quadratic bias of \('a', 'b'\) must be a real number; got str"):
        IsingModel.from_bqm(bqm)
    # an object BQM of real numbers converts, signs as for float BQMs (h = -linear, J = -quadratic)
    bqm = dimod.BinaryQuadraticModel({"a": 0.1, "b": 0.5}, {("a", "b"): 2}, 0.0, dimod.SPIN, dtype=object)
    m = IsingModel.from_bqm(bqm)
    np.testing.assert_array_equal(m.h, [-0.1, -0.5])
    np.testing.assert_array_equal(m.J, [[0.0, -2.0], [-2.0, 0.0]])


def test_from_networkx_graph_beta_none_names_beta():
    G = nx.Graph(beta=None)
    G.add_node(0, h=1.0)
    with pytest.raises(IsingTypeError, match=r"^beta must be .*got None"):
        IsingModel.from_networkx(G, beta=None)


# ---- bad input -----------------------------------------------------------------------------

J_ASYM = np.triu(np.ones((N, N)), 1)
J_DIAG = np.eye(N)
J_NAN = np.where(np.eye(N) == 0, np.nan, 0.0)
J_INF = np.where(np.eye(N) == 0, np.inf, 0.0)

BAD_MODELS = [
    ("J shape", dict(h=H0, J=np.zeros((4, 4))), ValueError, r"J must have shape \[\.\.\., n, n\]"),
    ("J 1d", dict(h=H0, J=np.zeros(3)), ValueError, r"J must have shape"),
    ("h scalar", dict(h=0.0, J=J0), ValueError, r"h must have shape"),
    ("batch", dict(h=np.zeros((2, N)), J=np.zeros((5, N, N))), ValueError, r"do not broadcast"),
    ("mask batch", dict(h=np.zeros((2, N)), J=J0, mask=np.ones((5, N), bool)), ValueError, r"do not broadcast"),
    ("asymmetric", dict(h=H0, J=J_ASYM), ValueError, r"symmetric"),
    ("diagonal", dict(h=H0, J=J_DIAG), ValueError, r"zero diagonal"),
    ("h nan", dict(h=np.array([0.0, np.nan, 0.0]), J=J0), ValueError, r"h contains NaN or inf"),
    ("h inf", dict(h=np.array([0.0, -np.inf, 0.0]), J=J0), ValueError, r"h contains NaN or inf"),
    ("J nan", dict(h=H0, J=J_NAN), ValueError, r"J contains NaN or inf"),
    ("J inf", dict(h=H0, J=J_INF), ValueError, r"J contains NaN or inf"),
    ("beta 0", dict(h=H0, J=J0, beta=0.0), ValueError, r"beta must be a finite positive"),
    ("beta < 0", dict(h=H0, J=J0, beta=-1.0), ValueError, r"beta must be a finite positive"),
    ("beta nan", dict(h=H0, J=J0, beta=np.nan), ValueError, r"beta must be a finite positive"),
    ("beta inf", dict(h=H0, J=J0, beta=np.inf), ValueError, r"beta must be a finite positive"),
    ("beta vector", dict(h=H0, J=J0, beta=[1.0, 2.0]), ValueError, r"beta must be a scalar"),
    ("mask shape", dict(h=H0, J=J0, mask=np.ones(N + 1, bool)), ValueError, r"mask must have shape \[\.\.\., n\]"),
    ("mask float", dict(h=H0, J=J0, mask=np.ones(N)), TypeError, r"mask must be boolean"),
    ("mask int", dict(h=H0, J=J0, mask=np.ones(N, int)), TypeError, r"mask must be boolean"),
    ("h complex", dict(h=H0 + 1j, J=J0), TypeError, r"h must be real"),
    ("J complex", dict(h=H0, J=J0.astype(complex)), TypeError, r"J must be real"),
    ("beta complex", dict(h=H0, J=J0, beta=1.0 + 0j), TypeError, r"beta must be real"),
    ("h strings", dict(h=["up", "down", "left"], J=J0), TypeError, r"h must be array-like of real numbers"),
    ("causal no query axis", dict(h=H0, J=J0, causal=True), ValueError, r"causal=True needs a query axis"),
]


@pytest.mark.parametrize("kwargs,exc,match", [b[1:] for b in BAD_MODELS], ids=[b[0] for b in BAD_MODELS])
def test_bad_model_input_raises_with_message(kwargs, exc, match):
    with pytest.raises(exc, match=match) as info:
        IsingModel(**kwargs)
    assert isinstance(info.value, (ValueError, TypeError))
    # the library's own error classes
    assert isinstance(info.value, (IsingInputError, IsingTypeError))


def test_asymmetry_tolerance_is_relative():
    # float32 round-off of a symmetric matrix is accepted; a real asymmetry is not
    J = np.array([[0.0, 1e3], [1e3 * (1 + 1e-7), 0.0]])
    IsingModel(np.zeros(2), J)
    with pytest.raises(IsingInputError, match="Largest asymmetry"):
        IsingModel(np.zeros(2), np.array([[0.0, 1e3], [1e3 * (1 + 1e-3), 0.0]]))


@pytest.mark.parametrize(
    "spins,exc,match",
    [
        (np.array([1.0, 0.0, -1.0]), ValueError, r"-1 or \+1"),
        (np.array([1.0, 2.0, -1.0]), ValueError, r"-1 or \+1"),
        (np.array([0.0, 1.0, 1.0]), ValueError, r"2\*x - 1"),  # 0/1 variables: says how to convert
        (np.array([1.0, np.nan, 1.0]), ValueError, r"-1 or \+1"),
        (np.ones(N + 1), ValueError, r"spins must have shape \[\.\.\., 3\]"),
        (np.ones(N, complex), TypeError, r"spins must be real"),
    ],
    ids=["zero", "two", "binary", "nan", "shape", "complex"],
)
def test_bad_spins_raise(spins, exc, match):
    model = IsingModel(np.ones(N), np.zeros((N, N)))
    with pytest.raises(exc, match=match):
        model.energy(spins)


def test_nan_under_jit_nan_at_runtime():
    J = np.zeros((N, N))
    f = jax.jit(lambda h: IsingModel(h, J).energy(jnp.ones(N)))
    assert float(f(jnp.array([1.0, 2.0, 3.0]))) == -6.0
    _nan_at_runtime(f, jnp.array([1.0, np.nan, 3.0]), match="h contains NaN or inf")
    _nan_at_runtime(jax.jit(lambda h: IsingModel(h, J).h), jnp.array([np.inf, 0.0, 0.0]), match="h contains NaN")
    g = jax.jit(lambda J: IsingModel(jnp.zeros(N), J).energy(jnp.ones(N)))
    _nan_at_runtime(g, jnp.asarray(J_ASYM), match="J must be symmetric")
    b = jax.jit(lambda beta: IsingModel(jnp.zeros(N), J, beta=beta).energy(jnp.ones(N)))
    _nan_at_runtime(b, -1.0, match="beta must be a finite positive")
    s = jax.jit(lambda s: IsingModel(jnp.zeros(N), J).energy(s))
    _nan_at_runtime(s, jnp.array([1.0, 0.0, 1.0]), match=r"-1 or \+1")
    # the same under vmap inside jit: the bad row is NaN, the good row is its energy
    v = jax.jit(jax.vmap(lambda h: IsingModel(h, J).energy(jnp.ones(N))))
    out = v(jnp.array([[1.0, 0.0, 0.0], [np.nan, 0.0, 0.0]]))
    assert float(out[0]) == -1.0 and bool(jnp.isnan(out[1]))

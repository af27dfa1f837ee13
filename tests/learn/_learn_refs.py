"""References written for the learning tests (independent of isingattn.learn): exact
sampling by brute-force enumeration, moments in numpy, and the symmetric pseudo-likelihood
objective with its gradient in float64 numpy, for scipy's L-BFGS-B."""

import numpy as np

from isingattn.testing import brute_force


def symmetric(n, edges, w):
    J = np.zeros((n, n))
    J[edges[:, 0], edges[:, 1]] = w
    J[edges[:, 1], edges[:, 0]] = w
    return J


def exact_samples(rng, h, J, S, beta=1.0):
    """``S`` independent draws ``[S, n]`` from ``p(s) ∝ exp(-βE(s))`` by enumeration."""
    bf = brute_force(h, J, beta)
    idx = rng.choice(len(bf["probs"]), size=S, p=bf["probs"])
    return bf["spins"][idx].astype(np.int8)


def moments(s, p=None):
    """⟨s⟩ [n] and ⟨s sᵀ⟩ [n, n] of spins [S, n] (weights p summing to 1, default uniform)."""
    s = np.asarray(s, np.float64)
    p = np.full(len(s), 1 / len(s)) if p is None else np.asarray(p) / np.sum(p)
    return p @ s, (s * p[:, None]).T @ s


def pl_objective(theta, s, p, beta, l2, edges):
    """``-Σ_s p_s Σ_i log σ(2β s_i φ_i) + l2 |θ|²`` and its gradient, θ = (h [n], w [E])."""
    n = s.shape[1]
    h, w = theta[:n], theta[n:]
    J = symmetric(n, edges, w)
    z = 2 * beta * s * (h + s @ J)
    f = np.sum(p[:, None] * np.logaddexp(0.0, -z)) + l2 * theta @ theta
    dphi = -p[:, None] / (1 + np.exp(z)) * 2 * beta * s  # d f / d φ
    gJ = s.T @ dphi
    g = np.concatenate([dphi.sum(0), gJ[edges[:, 0], edges[:, 1]] + gJ[edges[:, 1], edges[:, 0]]])
    return f, g + 2 * l2 * theta


def scipy_plm(s, p, beta, l2, edges, l1=0.0):
    """The PLM optimum by scipy's L-BFGS-B, float64; L1 by splitting w = u - v, u, v ≥ 0."""
    from scipy.optimize import minimize

    s = np.asarray(s, np.float64)
    n, E = s.shape[1], len(edges)
    if l1 == 0:
        r = minimize(pl_objective, np.zeros(n + E), args=(s, p, beta, l2, edges), jac=True, method="L-BFGS-B",
                     options=dict(maxiter=10000, ftol=1e-16, gtol=1e-11))
        return r.x

    def split(z):
        theta = np.concatenate([z[:n], z[n:n + E] - z[n + E:]])
        f, g = pl_objective(theta, s, p, beta, l2, edges)
        return f + l1 * np.sum(z[n:]), np.concatenate([g[:n], g[n:] + l1, -g[n:] + l1])

    bounds = [(None, None)] * n + [(0, None)] * (2 * E)
    r = minimize(split, np.zeros(n + 2 * E), jac=True, method="L-BFGS-B", bounds=bounds,
                 options=dict(maxiter=10000, ftol=1e-16, gtol=1e-11))
    return np.concatenate([r.x[:n], r.x[n:n + E] - r.x[n + E:]])

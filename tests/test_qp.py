"""The working-set QP of the cutting-plane solver, on its own, against scipy.optimize."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from distsvm.solvers import qp


def _scipy_reference(G, b, C):
    """min ½‖Gᵀα‖² − bᵀα, α ≥ 0, Σα ≤ C by SLSQP (an independent method), from α = 0.
    ftol 1e-12: with 1e-15, SciPy 1.17's SLSQP gives up (status 8, "positive directional
    derivative for linesearch") on three of these problems."""
    k = len(b)
    H = G @ G.T
    res = minimize(lambda a: 0.5 * a @ H @ a - b @ a, np.zeros(k), jac=lambda a: H @ a - b,
                   method="SLSQP", bounds=[(0, None)] * k,
                   constraints=[{"type": "ineq", "fun": lambda a: C - a.sum(),
                                 "jac": lambda a: -np.ones(k)}],
                   options={"ftol": 1e-12, "maxiter": 2000})
    assert res.success, res.message
    return -res.fun, G.T @ res.x


def _check_kkt(G, b, C, r, tol):
    """Optimality of the returned α, checked directly: feasibility and ∇ᵢ ≥ λ, = λ on α > 0."""
    a = r.alpha
    assert np.all(a >= 0) and a.sum() <= C * (1 + 1e-12)
    grad = G @ (G.T @ a) - b
    # λ is the multiplier of Σα ≤ C (sign-flipped); a slack Σα < C pins it to 0
    lam = 0.0 if a.sum() < C * (1 - 1e-9) else grad.min()
    assert lam <= tol and np.all(grad >= lam - tol)
    assert np.all(np.abs(grad[a > 0] - lam) <= tol)


def _problems():
    rng = np.random.default_rng(0)
    for k, d in [(1, 5), (5, 20), (30, 10), (120, 40)]:  # k > d: H singular
        G = rng.normal(size=(k, d)) / np.sqrt(d)
        yield f"random k={k} d={d}", G, rng.uniform(0, 1, k), float(rng.uniform(0.1, 50))
    G = rng.normal(size=(10, 8))
    yield "duplicated constraints", np.vstack([G, G, G[:3]]), np.concatenate(
        [b := rng.uniform(0, 1, 10), b, b[:3]]), 5.0
    G = rng.normal(size=(12, 6))
    G[[2, 5, 7]] = 0.0
    yield "zero constraints (no violated row)", G, rng.uniform(0, 1, 12), 3.0
    yield "rank one, equal b", np.outer(rng.uniform(0.5, 2, 15), rng.normal(size=9)), \
        np.full(15, 0.3), 100.0
    yield "H = 0, a linear program", np.zeros((6, 4)), rng.uniform(0, 1, 6), 2.0
    yield "b <= 0: α = 0 is optimal", rng.normal(size=(8, 5)), -rng.uniform(0, 1, 8), 4.0
    G = rng.normal(size=(20, 30)) * 1e-4
    yield "tiny curvature, sum constraint active", G, rng.uniform(0.5, 1, 20), 1e3


@pytest.mark.parametrize("name,G,b,C", list(_problems()), ids=[p[0] for p in _problems()])
def test_matches_scipy_and_meets_kkt(name, G, b, C):
    r = qp.solve(G @ G.T, b, C, tol=1e-11)
    assert r.converged
    ref_obj, ref_w = _scipy_reference(G, b, C)
    scale = max(1.0, abs(ref_obj))
    assert r.objective >= ref_obj - 1e-7 * scale, (r.objective, ref_obj)
    assert r.objective <= ref_obj + 1e-7 * scale  # SLSQP is tight: ours is not "better"
    # w = Gᵀα is unique (strictly convex in w) even where α is not
    np.testing.assert_allclose(G.T @ r.alpha, ref_w, atol=1e-4 * max(1.0, np.abs(ref_w).max()))
    _check_kkt(G, b, C, r, tol=1e-8)


def test_warm_start_from_previous_optimum_is_short_and_exact():
    """The cutting-plane pattern: solve, add a constraint, re-solve from the old α."""
    rng = np.random.default_rng(1)
    G = rng.normal(size=(60, 25)) / 5
    b = rng.uniform(0, 1, 60)
    C = 20.0
    prev = qp.solve(G[:59] @ G[:59].T, b[:59], C, tol=1e-11)
    cold = qp.solve(G @ G.T, b, C, tol=1e-11)
    warm = qp.solve(G @ G.T, b, C, alpha0=prev.alpha, tol=1e-11)
    assert warm.converged and abs(warm.objective - cold.objective) <= 1e-9 * abs(cold.objective)
    assert warm.iterations < cold.iterations
    # infeasible warm starts are repaired: negative entries clipped, the sum scaled to C
    bad = qp.solve(G @ G.T, b, C, alpha0=np.full(60, 1.0) - 2 * (np.arange(60) % 2))
    assert bad.converged and abs(bad.objective - cold.objective) <= 1e-9 * abs(cold.objective)


def test_iteration_limit_is_reported():
    rng = np.random.default_rng(2)
    G = rng.normal(size=(50, 10))
    r = qp.solve(G @ G.T, rng.uniform(0, 1, 50), 100.0, tol=1e-14, max_iter=3)
    assert not r.converged and r.iterations == 3 and r.violation > 1e-14


def test_bad_input():
    with pytest.raises(ValueError, match="H must be"):
        qp.solve(np.eye(3), np.ones(2), 1.0)
    with pytest.raises(ValueError, match="C must be > 0"):
        qp.solve(np.eye(2), np.ones(2), 0.0)

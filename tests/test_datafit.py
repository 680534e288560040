"""The datafit functions of workers/losses.py: ξ′ and ξ″ against finite differences of ξ,
the SVM dual's Dᵢᵢ and U against LIBLINEAR's table and against ξ by conjugacy, the logistic
dual term against ξ, and the one loss registry."""

import math

import numpy as np
import pytest

from distsvm.workers import losses
from distsvm.workers.kernels import dcd, linear

CODES = [losses.HINGE, losses.SQUARED_HINGE, losses.LOGISTIC]
REGRESSION_CODES = [losses.EPSILON_INSENSITIVE, losses.SQUARED_EPSILON_INSENSITIVE]
# margins on both sides of the hinge's kink at 1, close to it and far from it
MARGINS = [-30.0, -3.0, -0.5, 0.0, 0.3, 0.999, 1.001, 1.5, 4.0, 30.0]
H = 1e-6  # finite-difference step, below every margin's distance to the kink


def central(f, m):
    return (f(m + H) - f(m - H)) / (2 * H)


@pytest.mark.parametrize("loss", CODES)
@pytest.mark.parametrize("m", MARGINS)
def test_derivatives_match_finite_differences(loss, m):
    d1 = central(lambda t: losses.xi(t, loss), m)
    d2 = central(lambda t: losses.dxi(t, loss), m)
    assert losses.dxi(m, loss) == pytest.approx(d1, abs=1e-7)
    assert losses.d2xi(m, loss) == pytest.approx(d2, abs=1e-7)


@pytest.mark.parametrize("m", MARGINS)
def test_xi_of_the_slack(m):
    """Primal CD's ξ(1 − s) of a slack s = 1 − m, against the losses written out."""
    s = 1.0 - m
    assert losses.xi_slack(s, losses.HINGE) == max(s, 0.0)
    assert losses.xi_slack(s, losses.SQUARED_HINGE) == max(s, 0.0) ** 2
    assert losses.xi_slack(s, losses.LOGISTIC) == pytest.approx(np.logaddexp(0.0, -m),
                                                                rel=1e-14, abs=1e-300)


def test_values():
    for m in MARGINS:
        assert losses.xi(m, losses.HINGE) == max(0.0, 1.0 - m)
        assert losses.xi(m, losses.SQUARED_HINGE) == max(0.0, 1.0 - m) ** 2
        assert losses.xi(m, losses.LOGISTIC) == pytest.approx(np.logaddexp(0.0, -m), rel=1e-14)


def test_kink():
    """At m = 1 the hinge's ξ′ is its right derivative 0 (the rows with m < 1 are the
    violated ones, as the cutting plane counts them), a subgradient; the squared hinge's ξ″
    is 0 there, LIBLINEAR's I = {i: mᵢ < 1} (Fan et al. 2008, Appendix D)."""
    left = (losses.xi(1.0, losses.HINGE) - losses.xi(1.0 - H, losses.HINGE)) / H
    assert left == pytest.approx(-1.0)
    assert losses.dxi(1.0, losses.HINGE) == 0.0
    assert losses.dxi(1.0, losses.SQUARED_HINGE) == 0.0
    assert losses.d2xi(1.0 - 1e-12, losses.SQUARED_HINGE) == 2.0
    assert losses.d2xi(1.0, losses.SQUARED_HINGE) == 0.0


def test_logistic_does_not_overflow():
    big = 800.0  # e^800 overflows a float64
    assert losses.xi(-big, losses.LOGISTIC) == big
    assert losses.xi(big, losses.LOGISTIC) == 0.0
    assert losses.dxi(-big, losses.LOGISTIC) == -1.0
    assert losses.dxi(big, losses.LOGISTIC) == 0.0
    assert losses.d2xi(-big, losses.LOGISTIC) == 0.0
    assert losses.d2xi(big, losses.LOGISTIC) == 0.0


@pytest.mark.parametrize("loss", CODES)
def test_d2xi_max_is_the_supremum(loss):
    grid = np.linspace(-10.0, 10.0, 20001)  # holds 0, where σ(1 − σ) peaks
    values = [losses.d2xi(m, loss) for m in grid]
    assert max(values) == pytest.approx(losses.d2xi_max(loss), rel=1e-12)


def test_dual_constants_are_liblinears_table():
    """Hsieh et al. 2008, (4) / Fan et al. 2008, A.2: L1 loss Dᵢᵢ = 0, U = C; L2 loss
    Dᵢᵢ = 1/(2C), U = ∞.  A row of cost 0 has no dual variable: U = 0."""
    for C in (0.25, 1.0, 7.0):
        assert losses.dual_diag(C, losses.HINGE) == 0.0
        assert losses.dual_upper(C, losses.HINGE) == C
        assert losses.dual_diag(C, losses.SQUARED_HINGE) == 1.0 / (2.0 * C)
        assert losses.dual_upper(C, losses.SQUARED_HINGE) == math.inf
    for loss in (losses.HINGE, losses.SQUARED_HINGE):
        assert losses.dual_diag(0.0, loss) == 0.0
        assert losses.dual_upper(0.0, loss) == 0.0


@pytest.mark.parametrize("loss", [losses.HINGE, losses.SQUARED_HINGE])
@pytest.mark.parametrize("m", MARGINS)
def test_dual_constants_are_the_conjugate_of_xi(loss, m):
    """C ξ(m) = max over 0 ≤ α ≤ U of α(1 − m) − ½Dα², reached at α = −Cξ′(m): the dual
    (4) is the conjugate of the primal loss with these D and U."""
    C = 2.5
    D, U = losses.dual_diag(C, loss), losses.dual_upper(C, loss)

    def inner(a):
        return a * (1.0 - m) - 0.5 * D * a * a

    best = -C * losses.dxi(m, loss)
    assert 0.0 <= best <= U
    assert inner(best) == pytest.approx(C * losses.xi(m, loss), rel=1e-12, abs=1e-12)
    grid = np.linspace(0.0, min(U, 200.0), 4001)
    assert max(inner(a) for a in grid) <= inner(best) + 1e-9


@pytest.mark.parametrize("m", [-5.0, -0.5, 0.0, 0.7, 3.0])
def test_logistic_dual_is_the_conjugate_of_xi(m):
    """C ξ(m) = max over 0 < α < C of −αm − (αlogα + (C − α)log(C − α) − C log C)
    (Fan et al. 2008, (5)-(6)), reached where the derivative of the dual term is −m, at
    α = −Cξ′(m)."""
    C = 3.0
    a = -C * losses.dxi(m, losses.LOGISTIC)
    assert losses.logistic_dual_d1(a, C) == pytest.approx(-m, abs=1e-12)
    value = -a * m - losses.logistic_dual(a, C - a, C)
    assert value == pytest.approx(C * losses.xi(m, losses.LOGISTIC), rel=1e-12)
    for z in (0.1, 1.0, 2.9):
        assert losses.logistic_dual_d1(z, C) == pytest.approx(
            central(lambda t: losses.logistic_dual(t, C - t, C), z), abs=1e-7)
        assert losses.logistic_dual_d2(z, C) == pytest.approx(
            central(lambda t: losses.logistic_dual_d1(t, C), z), rel=1e-7)


@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 3.0])
@pytest.mark.parametrize("m", MARGINS)
def test_power_hinge(p, m):
    assert losses.power_hinge(m, p) == pytest.approx(max(0.0, 1.0 - m) ** p, rel=1e-14)
    assert losses.dpower_hinge(m, p) == pytest.approx(
        central(lambda t: losses.power_hinge(t, p), m), rel=1e-6, abs=1e-7)
    if p in (1.0, 2.0):  # the hinge and the squared hinge
        loss = losses.HINGE if p == 1.0 else losses.SQUARED_HINGE
        assert losses.power_hinge(m, p) == losses.xi(m, loss)
        assert losses.dpower_hinge(m, p) == losses.dxi(m, loss)


@pytest.mark.parametrize("loss", CODES)
def test_kernels_sum_xi(loss):
    """The shared primal-loss kernel and DCD's ΣDᵢᵢαᵢ² are the datafit functions summed."""
    rng = np.random.default_rng(0)
    n, d = 50, 4
    X = rng.normal(size=(n, d)).astype(np.float32)
    indptr = np.arange(0, n * d + 1, d, dtype=np.int64)
    indices = np.tile(np.arange(d, dtype=np.int32), n)
    y = rng.integers(0, 2, n).astype(np.int32)
    w = rng.normal(size=(1, d))
    cost = np.array([[0.5, 2.0]])
    totals, correct = np.zeros(1), np.zeros(1, dtype=np.int64)
    linear.loss_sums(indptr, indices, X.ravel(), y, np.array([1], dtype=np.int32), w, -1.0, d,
                     loss, cost, np.empty(0), totals, correct)
    margins = np.where(y == 1, 1.0, -1.0) * (X.astype(np.float64) @ w[0])
    expected = sum(cost[0, y[i]] * losses.xi(margins[i], loss) for i in range(n))
    assert totals[0] == pytest.approx(expected, rel=1e-12)
    assert correct[0] == (margins > 0).sum()
    alpha, c = rng.uniform(0.0, 1.0, n), rng.uniform(0.5, 2.0, n)
    c[:5] = 0.0
    alpha[:5] = 0.0
    assert dcd.dual_dsq(alpha, loss, c) == pytest.approx(
        sum(losses.dual_diag(c[i], loss) * alpha[i] ** 2 for i in range(n)), rel=1e-12)


def test_one_registry():
    """The coded losses are losses the solver registry names, and every solver's losses are
    in its table of losses."""
    from distsvm.solvers import registry

    assert set(losses.CODES) <= set(registry.LOSSES)
    for solver in registry.SOLVERS.values():
        assert set(solver.losses) <= set(registry.LOSSES)
    assert {losses.NAMES[c] for c in CODES + REGRESSION_CODES} == set(losses.CODES)
    with pytest.raises(ValueError, match="'loss' parameter must be one of"):
        losses.code("lp")

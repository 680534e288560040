"""SVM-ALM: the e-update against brute force, optima against independent references, distribution."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize

from workers.kernels import alm as kernel


def _F(e, t, yi, gamma, p):
    return gamma * max(0.0, yi * e) ** p + 0.5 * (e - t) ** 2


@pytest.mark.parametrize("p", [1.0, 2.0, 1.5, 1.1, 1.9, 3.0])
def test_e_update_minimizes_F_against_brute_force(p):
    """(10)-(13): the kernel's eᵢ against a dense grid refined by bounded scalar minimization."""
    rng = np.random.default_rng(int(p * 10))
    for _ in range(300):
        t = rng.normal(scale=rng.choice([0.01, 1.0, 100.0]))
        yi = rng.choice([-1.0, 1.0])
        gamma = 10.0 ** rng.uniform(-4, 3)
        e = kernel.e_update(t, yi, gamma, p)
        lo, hi = min(0.0, t) - 1.0, max(0.0, t) + 1.0
        grid = np.linspace(lo, hi, 20001)
        vals = gamma * np.maximum(0.0, yi * grid) ** p + 0.5 * (grid - t) ** 2
        j = int(np.argmin(vals))
        ref = scipy.optimize.minimize_scalar(
            _F, bounds=(grid[max(j - 1, 0)], grid[min(j + 1, len(grid) - 1)]),
            args=(t, yi, gamma, p), method="bounded", options={"xatol": 1e-13})
        best = min(ref.fun, vals[j], _F(0.0, t, yi, gamma, p))
        f = _F(e, t, yi, gamma, p)
        assert f <= best + 1e-12 * (1.0 + abs(best)), (t, yi, gamma, p, e, ref.x)
        # and it is the minimizer, not merely as good: F is strongly convex (modulus 1)
        assert abs(e - ref.x) <= 1e-5 * (1.0 + abs(t)) or f < ref.fun


@pytest.mark.parametrize("p", [1.2, 1.5, 1.8, 2.5])
def test_lp_root_solves_eq_11_to_stated_precision(p):
    rng = np.random.default_rng(3)
    for _ in range(500):
        s = 10.0 ** rng.uniform(-6, 4)
        gamma = 10.0 ** rng.uniform(-5, 5)
        u = kernel.lp_root(s, gamma, p)
        assert 0.0 <= u <= s
        # the exact root by a bracketing solver at full precision
        ref = scipy.optimize.brentq(lambda v: p * gamma * v ** (p - 1) + v - s, 0.0, s,
                                    xtol=1e-300, rtol=1e-15)
        assert abs(u - ref) <= 2 * kernel.REL_TOL * s + 1e-300, (s, gamma, p, u, ref)


def test_closed_forms_equal_the_root_of_eq_11():
    """(12) and (13) agree with the general root-finder for p → 1⁺ and p → 2."""
    for t, yi, gamma in [(2.0, 1.0, 0.5), (-3.0, -1.0, 0.1), (0.3, 1.0, 1.0), (5.0, 1.0, 4.9)]:
        s = yi * t  # > 0 in every case: the branch where (11) is solved
        assert kernel.e_update(t, yi, gamma, 2.0) == pytest.approx(
            yi * kernel.lp_root(s, gamma, 2.0 + 1e-9), rel=1e-7)
        assert kernel.e_update(t, yi, gamma, 1.0) == pytest.approx(
            yi * kernel.lp_root(s, gamma, 1.0 + 1e-9), abs=1e-6)

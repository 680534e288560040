"""The one loss registry and datafit module: every loss's name, the code compiled kernels
branch on, the solvers that train it, and its functions of the margin m = yᵢwᵀxᵢ.

Every objective in distsvm is LIBLINEAR's: ``½‖w‖² + Σᵢ Cᵢ ξ(yᵢwᵀxᵢ)`` (Fan et al. 2008,
Appendix A); C, the class weights and the instance weights become the rows' Cᵢ here
(:func:`class_costs`, :func:`costs`).  The kernels call, per loss code, ξ(m), ξ′(m) and
ξ″(m) (:func:`xi`, :func:`dxi`, :func:`d2xi`) and the constants Dᵢᵢ and U of the SVM dual
(:func:`dual_diag`, :func:`dual_upper`); the dual of logistic regression has its own term
(:func:`logistic_dual` and its derivatives), and SVM-ALM its loss max(0, 1 − m)ᵖ
(:func:`power_hinge`).  The names, the codes and the functions live in this one module so
that a loss is added in one place; the kernels import it, and ``distsvm`` reads the names.

Kernels take an ``int`` code rather than a function or class, so Numba's disk cache
(``cache=True``) stays valid across processes (Numba issues #4830, #6522).  The functions
are ``inline="always"``: Numba inlines them into each kernel, where LLVM merges what two of
them compute for one margin (one exponential serves ξ′ and ξ″ of the logistic loss);
``benchmarks/bench_datafit.py`` checks that none is left as a call and that no kernel got
slower.  Numba's cache does not see changes in another file: after editing this module,
delete the kernels' cached ``*.nbi``/``*.nbc`` files.
"""

import math

import numba
import numpy as np

HINGE = 0  # L1-loss SVM: max(0, 1 - m)
SQUARED_HINGE = 1  # L2-loss SVM: max(0, 1 - m)²
LOGISTIC = 2  # logistic regression: log(1 + e^{-m})
# Support vector regression (Fan et al. 2008, A.6), of the residual r = wᵀxᵢ − yᵢ and the
# ε of the loss, p (LIBLINEAR's -p): max(0, |r| − p) and max(0, |r| − p)²
EPSILON_INSENSITIVE = 3  # L1-loss SVR
SQUARED_EPSILON_INSENSITIVE = 4  # L2-loss SVR

CODES = {"hinge": HINGE, "squared_hinge": SQUARED_HINGE, "logistic": LOGISTIC,
         "epsilon_insensitive": EPSILON_INSENSITIVE,
         "squared_epsilon_insensitive": SQUARED_EPSILON_INSENSITIVE}
NAMES = {v: k for k, v in CODES.items()}

def code(name: str) -> int:
    """The code of a loss name; a ``ValueError`` in scikit-learn's wording otherwise."""
    try:
        return CODES[name]
    except KeyError:
        raise ValueError(f"The 'loss' parameter must be one of {sorted(CODES)}. "
                         f"Got {name!r} instead.") from None


def class_costs(C: float, class_weight, positive: int | None = None) -> np.ndarray:
    """C per class index: C times each class's weight (``class_weight``, one per class index,
    :func:`distsvm.params.class_weights`), or in one-vs-rest problem ``positive`` that
    class's alone, the rest plain C, as LIBLINEAR's ``train`` gives problem k
    ``weighted_C[k]`` and ``param->C``.  With :func:`costs`, the one place C becomes costs."""
    weight = np.asarray(class_weight, dtype=np.float64)
    if positive is not None:
        weight = np.where(np.arange(len(weight)) == positive, weight, 1.0)
    return float(C) * weight


def costs(class_cost: np.ndarray, y: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
    """Each row's cost Cᵢ = ``class_cost[yᵢ]`` (:func:`class_costs`) times row i's instance
    weight if the store has them: LIBLINEAR's ``-wi`` and ``-W``, and the constants Dᵢᵢ and U
    of the dual (:func:`dual_diag`, :func:`dual_upper`) take it (the kernel
    :func:`distsvm.workers.kernels.linear.loss_sums` applies the same rule row by row)."""
    cost = np.asarray(class_cost, dtype=np.float64)[y]
    return cost if weight is None else cost * weight


@numba.njit(cache=True, nogil=True, inline="always")
def _sigma_neg(m, e):
    """σ(−m) = 1/(1 + eᵐ) given e = e^{−|m|}, without overflow (LIBLINEAR's form)."""
    return e / (1.0 + e) if m >= 0.0 else 1.0 / (1.0 + e)


@numba.njit(cache=True, nogil=True, inline="always")
def _logistic(m):
    """log(1 + e^{−m}) as max(−m, 0) + log1p(e^{−|m|}): no exponential overflows."""
    return max(-m, 0.0) + math.log1p(math.exp(-abs(m)))


@numba.njit(cache=True, nogil=True, inline="always")
def xi(m, loss):
    """ξ(m): max(0, 1 − m), max(0, 1 − m)², or log(1 + e^{−m}) (Fan et al. 2008, A.2-A.3)."""
    if loss == LOGISTIC:
        return _logistic(m)
    if m >= 1.0:
        return 0.0
    return 1.0 - m if loss == HINGE else (1.0 - m) * (1.0 - m)


@numba.njit(cache=True, nogil=True, inline="always")
def xi_slack(s, loss):
    """ξ(1 − s), of the slack s = 1 − m that primal CD keeps per row (its b): max(0, s),
    max(0, s)², or log(1 + e^{s−1}); the hinges take s as it is, with no round trip
    through m."""
    if loss == SQUARED_HINGE:
        return s * s if s > 0.0 else 0.0
    if loss == HINGE:
        return s if s > 0.0 else 0.0
    return _logistic(1.0 - s)


@numba.njit(cache=True, nogil=True, inline="always")
def dxi(m, loss):
    """ξ′(m): −1 (the hinge's subgradient, 0 at the kink m = 1), −2 max(0, 1 − m), or −σ(−m)."""
    if loss == LOGISTIC:
        return -_sigma_neg(m, math.exp(-abs(m)))
    if m < 1.0:
        return -1.0 if loss == HINGE else -2.0 * (1.0 - m)
    return 0.0


@numba.njit(cache=True, nogil=True, inline="always")
def d2xi(m, loss):
    """ξ″(m): 0 for the hinge, σ(m)σ(−m) for the logistic loss, and for the squared hinge
    the generalized second derivative 2 if m < 1 else 0 that LIBLINEAR's Newton and primal CD
    use (Fan et al. 2008, Appendix D (12); Chang, Hsieh & Lin 2008, (10))."""
    if loss == LOGISTIC:
        s = _sigma_neg(m, math.exp(-abs(m)))
        return s * (1.0 - s)
    if loss == SQUARED_HINGE and m < 1.0:
        return 2.0
    return 0.0


@numba.njit(cache=True, nogil=True, inline="always")
def d2xi_max(loss):
    """sup ξ″: 2 (squared hinge), ¼ (logistic: σ(1 − σ) ≤ ¼) or 0 (hinge), the bound on
    the second derivative that primal CD's step-size test (14) needs."""
    if loss == SQUARED_HINGE:
        return 2.0
    return 0.25 if loss == LOGISTIC else 0.0


@numba.njit(cache=True, nogil=True, inline="always")
def dual_diag(c, loss):
    """Dᵢᵢ of the SVM dual for a row of cost Cᵢ = c: 0 (L1 loss) or 1/(2Cᵢ) (L2 loss)
    (Hsieh et al. 2008, (4); Fan et al. 2008, A.2).  A row of cost 0 has no dual variable
    (LIBLINEAR drops it): 0."""
    return 0.5 / c if loss == SQUARED_HINGE and c != 0.0 else 0.0


@numba.njit(cache=True, nogil=True, inline="always")
def dual_upper(c, loss):
    """U of the SVM dual for a row of cost Cᵢ = c: Cᵢ (L1 loss) or ∞ (L2 loss); 0 for a row
    of cost 0, so that its αᵢ stays 0."""
    return math.inf if loss == SQUARED_HINGE and c != 0.0 else c


@numba.njit(cache=True, nogil=True, inline="always")
def svr_diag(c, loss):
    """λᵢ of the SVR dual (Fan et al. 2008, A.6 (10)) for a row of cost Cᵢ = c: 0 (L1-loss
    SVR) or 1/(2Cᵢ) (L2-loss SVR); 0 for a row of cost 0.  (Apart from :func:`dual_diag`,
    so that the classification kernels keep their one-compare test.)"""
    return 0.5 / c if loss == SQUARED_EPSILON_INSENSITIVE and c != 0.0 else 0.0


@numba.njit(cache=True, nogil=True, inline="always")
def svr_upper(c, loss):
    """The bound U of |βᵢ| in the SVR dual (A.6 (10)): Cᵢ (L1-loss SVR) or ∞ (L2-loss
    SVR); 0 for a row of cost 0, so that its βᵢ stays 0."""
    return math.inf if loss == SQUARED_EPSILON_INSENSITIVE and c != 0.0 else c


@numba.njit(cache=True, nogil=True, inline="always")
def logistic_dual(a, a_c, c):
    """αlogα + (C − α)log(C − α) − C log C for α = a, C − α = a_c, C = c: a row's term of the
    logistic regression dual (Fan et al. 2008, (6)), equal to −max over m of (−αm − Cξ(m))."""
    return a * math.log(a) + a_c * math.log(a_c) - c * math.log(c)


@numba.njit(cache=True, nogil=True, inline="always")
def logistic_dual_d1(z, c):
    """The derivative log(z/(C − z)) of :func:`logistic_dual` in z = α (or in z = C − α)."""
    return math.log(z / (c - z))


@numba.njit(cache=True, nogil=True, inline="always")
def logistic_dual_d2(z, c):
    """The second derivative C/((C − z)z) of :func:`logistic_dual` in z = α (or z = C − α)."""
    return c / (c - z) / z


@numba.njit(cache=True, nogil=True, inline="always")
def power_hinge(m, p):
    """max(0, 1 − m)ᵖ, p ≥ 1: SVM-ALM's Lp loss (Nie et al. 2014, (4))."""
    if m < 1.0:
        r = 1.0 - m
        return r if p == 1.0 else r ** (p - 1.0) * r
    return 0.0


@numba.njit(cache=True, nogil=True, inline="always")
def dpower_hinge(m, p):
    """Its derivative −p max(0, 1 − m)ᵖ⁻¹ (for p = 1 the hinge's subgradient of :func:`dxi`)."""
    if m < 1.0:
        return -1.0 if p == 1.0 else -p * (1.0 - m) ** (p - 1.0)
    return 0.0


# ---------------------------------------------------------------- regression (SVR)
# Functions of the residual r = wᵀxᵢ − yᵢ and the tube's half-width p ≥ 0 (the ε of the
# loss, LIBLINEAR's -p), not of a margin: the SVR primal is ½‖w‖² + Σᵢ Cᵢ ξ(wᵀxᵢ − yᵢ)
# (Fan et al. 2008, A.6 (9)).


@numba.njit(cache=True, nogil=True, inline="always")
def is_regression(loss):
    """Whether a loss code is an SVR loss (a function of the residual, not the margin)."""
    return loss == EPSILON_INSENSITIVE or loss == SQUARED_EPSILON_INSENSITIVE


@numba.njit(cache=True, nogil=True, inline="always")
def xi_residual(r, p, loss):
    """ξ(r): max(0, |r| − p) (L1-loss SVR) or max(0, |r| − p)² (L2-loss SVR)."""
    d = abs(r) - p
    if d <= 0.0:
        return 0.0
    return d if loss == EPSILON_INSENSITIVE else d * d


@numba.njit(cache=True, nogil=True, inline="always")
def dxi_residual(r, p, loss):
    """ξ′(r): sign(r) outside the tube |r| > p, else 0 (L1-loss SVR, a subgradient), or
    2 sign(r) max(0, |r| − p) (L2-loss SVR; LIBLINEAR's l2r_l2_svr_fun::grad)."""
    if r > p:
        return 1.0 if loss == EPSILON_INSENSITIVE else 2.0 * (r - p)
    if r < -p:
        return -1.0 if loss == EPSILON_INSENSITIVE else 2.0 * (r + p)
    return 0.0


@numba.njit(cache=True, nogil=True, inline="always")
def d2xi_residual(r, p, loss):
    """ξ″(r): the generalized second derivative 2 if |r| > p else 0 of the L2-loss SVR (the
    index set I of LIBLINEAR's l2r_l2_svr_fun, whose Hessian is I + 2C X_Iᵀ X_I); 0 for
    the L1 loss."""
    if loss == SQUARED_EPSILON_INSENSITIVE and abs(r) > p:
        return 2.0
    return 0.0

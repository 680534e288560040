"""The one registry of loss codes that compiled kernels branch on.

Kernels take an ``int`` code rather than a function or class, so Numba's disk
cache (``cache=True``) stays valid across processes (Numba issues #4830, #6522).
Every objective in distsvm is LIBLINEAR's: ``½‖w‖² + C Σᵢ loss(yᵢ wᵀxᵢ)``.
"""

HINGE = 0  # L1-loss SVM: max(0, 1 - m)
SQUARED_HINGE = 1  # L2-loss SVM: max(0, 1 - m)²
LOGISTIC = 2  # logistic regression: log(1 + e^{-m})

CODES = {"hinge": HINGE, "squared_hinge": SQUARED_HINGE, "logistic": LOGISTIC}
NAMES = {v: k for k, v in CODES.items()}


def code(name: str) -> int:
    """The code of a loss name; a ``ValueError`` in scikit-learn's wording otherwise."""
    try:
        return CODES[name]
    except KeyError:
        raise ValueError(f"The 'loss' parameter must be one of {sorted(CODES)}. "
                         f"Got {name!r} instead.") from None

"""How a linear model's weights meet data: the one rule of the model, its predictions and a
validation set's scores (no compiled code: the coordinator imports it)."""

from __future__ import annotations

import numpy as np


def laid_out(w: np.ndarray, bias: float, n_features: int) -> np.ndarray:
    """A model's weights ``w`` (the bias weight last where ``bias`` >= 0; a row per class for
    a multi-class W) laid out for data with ``n_features`` columns, float64 (LIBLINEAR's
    rule: features the model has not seen weigh 0, those the data lacks are dropped)."""
    has_bias = bias >= 0
    trained = w.shape[-1] - has_bias
    out = np.zeros(w.shape[:-1] + (n_features + has_bias,))
    k = min(n_features, trained)
    out[..., :k] = w[..., :k]
    if has_bias:
        out[..., n_features] = w[..., trained]
    return out

"""A validation block's share of the validation scores of a round's models (issue 31:
anytime training; the coordinator's side is :mod:`distsvm.anytime`).

One task a block, on the worker that holds it: the decision values of each problem's
weights by :func:`distsvm.workers.blocks.block_decisions` (the per-block task of every
prediction, its Numba kernel), then the labels by the model's rule
(:meth:`distsvm.model.Model.class_index`: binary and one-class, the positive label where the
value is > 0; a multi-class W, the class of the largest value) and the block's share of the
score: (correct, rows) for accuracy, (Σ(p − t)², rows) for the mean squared error, the
decision values and truths for the area under the ROC curve, the scores and rank indices
for a ranking model's pairwise accuracy (summed on the coordinator).
"""

from __future__ import annotations

import numpy as np

from distsvm.storage import BlockInfo

from . import blocks, losses


def blocks_scores(url: str, infos: list[BlockInfo], problems: list[dict], *ws,
                  **kwargs) -> list:
    """:func:`block_scores` of each block of ``infos`` (one worker's): one call a worker."""
    return [block_scores(url, info, problems, *ws, **kwargs) for info in infos]


def block_scores(url: str, info: BlockInfo, problems: list[dict], *ws, metric: str,
                 bias: float, n_features: int, store_classes: tuple, cache_bytes: int,
                 storage_options: dict | None = None) -> list:
    """The block's share of each problem's score.  ``ws[j]`` are problem j's weights laid
    out for this store (a row per class for a multi-class W); ``problems[j]``: ``positive``
    (the label of its +1 side), ``negative`` (the label of its −1 side; None: every other
    label, one-vs-rest), ``offset`` (subtracted from the values: a one-class model's ρ),
    ``classes`` (a multi-class W's labels, row order), ``ranks`` (a ranking model's labels,
    in rank order) or ``regression``."""
    out = []
    labels = np.asarray(store_classes, dtype=np.float64)
    for w, prob in zip(ws, problems):
        dv, truth = blocks.block_decisions(url, info, np.asarray(w), bias, n_features,
                                           cache_bytes, storage_options)
        dv = dv - prob.get("offset", 0.0)
        if prob.get("regression"):  # truth: the targets
            out.append((float(np.sum((dv - truth) ** 2)), len(dv)))
            continue
        y = labels[truth]
        if "ranks" in prob:  # a ranking model: its scores and the rows' rank indices
            out.append((dv, np.searchsorted(np.asarray(prob["ranks"]), y)))
            continue
        if dv.ndim == 2:  # a multi-class W: the class of the largest value
            pred = np.asarray(prob["classes"], dtype=np.float64)[np.argmax(dv, axis=1)]
            out.append((int(np.sum(pred == y)), len(y)))
            continue
        positive = y == prob["positive"]
        if metric == "auc":
            out.append((dv, positive))
            continue
        negative = ~positive if prob.get("negative") is None else y == prob["negative"]
        up = dv > 0
        out.append((int(np.sum(up & positive) + np.sum(~up & negative)), len(y)))
    return out


def held_out(n_rows: int, fraction: float, seed: int) -> np.ndarray:
    """The rows ``validation_fraction`` holds out of a store of ``n_rows`` (a mask in the
    store's row order): round(fraction·l) of them drawn by ``seed``, the same for every
    solver, whether it reads row blocks or the column view."""
    held = np.zeros(n_rows, dtype=bool)
    held[np.random.default_rng([seed, 31]).choice(n_rows, int(round(fraction * n_rows)),
                                                  replace=False)] = True
    return held


def row_costs(url: str, cmeta, class_cost, row_infos: list[BlockInfo] | None, holdout,
              storage_options: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The class indices and costs Cⱼ (:func:`losses.costs`) of a column view's rows
    (:func:`blocks.column_rows`), those held out as the validation set (``holdout``:
    (fraction, seed) of :func:`held_out`; None: none) at cost 0: the column view covers
    every row of the store, and a row of cost 0 takes no part in LIBLINEAR's L1 and
    primal CD objectives or steps, so the solvers that read it train on the other rows."""
    y, weight = blocks.column_rows(url, cmeta, row_infos, storage_options)
    cost = losses.costs(class_cost, y, weight)
    if holdout is not None:
        cost[held_out(len(y), *holdout)] = 0.0
    return y, cost

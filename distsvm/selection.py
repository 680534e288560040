"""Model selection: LIBLINEAR's cross-validation over row folds, and its C search.

Folds.  As LIBLINEAR's ``-v n`` (``cross_validation`` in linear.cpp), the
store's row numbers (0 to l−1, in block order) are permuted with the seed and
the permutation is cut into n folds (fold k gets rows ``perm[k·l/n : (k+1)·l/n]``),
so a store of one block is cross-validated as well as one of many, and the
folds do not depend on the block count.  What differs from LIBLINEAR: the
permutation is numpy's (``default_rng(seed)``), not the C library's ``rand()``,
and nothing is copied — fold k trains on a view of the store
(:meth:`storage.Dataset.take`) whose blocks are the other rows of each stored
block (joined blocks: memory stays bounded by a block) and predicts a view of
its own rows, so every solver that reads row blocks trains on a fold unchanged.
The workers make a fold's blocks from their cached stored blocks
(:func:`distsvm.workers.blocks.load`): the folds read each stored block once.  More
folds than rows become leave-one-out with LIBLINEAR's warning.

The C search (:func:`find_c`) is LIBLINEAR's ``find_parameters`` for ``-s 0``
and ``-s 2`` (linear.cpp ``find_parameter_C``, ``calc_start_C``; Chu, Chin & Lin,
"Warm start for parameter selection of linear classifiers", KDD 2015): C starts
at ``2^⌊log₂ C_min⌋`` with C_min = 1/(l·max‖xᵢ‖²) for logistic regression and
1/(2l·max‖xᵢ‖²) for the L2-loss SVM (below it every model predicts alike),
doubles up to 1024, trains each fold from the fold's model at the previous C
(warm start, when the solver takes ``warm_start``), keeps the first C of the
best CV accuracy, and stops early once no fold's w has changed for five
consecutive values of C (w stays put when the warm start already meets the
stopping rule: larger C change nothing).
"""

from __future__ import annotations

import concurrent.futures as concurrent_futures
import dataclasses
import math

import numpy as np

import distsvm.workers.blocks

from . import cluster, jobs, params, prediction
from .progress import Progress
from .solvers import registry

MAX_C = 1024.0  # LIBLINEAR's max_C for -s 0 and -s 2
UNCHANGED_STOP = 5  # LIBLINEAR: stop after this many C values with no fold's w changed
# The loss of each LIBLINEAR type find_c searches: -s 0 and -s 2, as LIBLINEAR's -C.
SEARCH_TYPES = {"logistic": 0, "squared_hinge": 2}


def fold_of_rows(n_rows: int, n_folds: int, seed: int) -> np.ndarray:
    """Each row's fold (int64, ``n_rows``): a seeded permutation of the rows cut into
    ``n_folds`` contiguous parts (LIBLINEAR's ``fold_start[i] = i·l/nr_fold``)."""
    perm = np.random.default_rng(seed).permutation(n_rows)
    fold = np.empty(n_rows, dtype=np.int64)
    for k in range(n_folds):
        fold[perm[k * n_rows // n_folds:(k + 1) * n_rows // n_folds]] = k
    return fold


class _Folds:
    """The folds of a dataset on a cluster: a training view and a test view per fold."""

    def __init__(self, c, dataset, n_folds: int, seed: int, n_workers, concurrent: int,
                 progress: Progress):
        params.check_int("cross_validate", "n_folds", n_folds, 2)
        params.check_int("cross_validate", "concurrent_folds", concurrent, 1)
        meta = dataset.meta
        if n_folds > meta.n_rows:
            progress.note("WARNING: # folds > # data. Will use # folds = # data instead "
                          "(i.e., leave-one-out cross validation)")
            n_folds = meta.n_rows
        self.fold = fold_of_rows(meta.n_rows, n_folds, seed)
        self.plan = plan = cluster.plan(c, len(meta.blocks), n_workers, dataset)
        self.groups = min(concurrent, len(plan.workers))
        starts = np.cumsum([0] + [info.n_rows for info in meta.blocks])
        # one task a block: its class counts and non-zeros per fold, its largest ‖xᵢ‖²
        # (a regression store's rows all have class index 0: one "class")
        n_classes = 1 if meta.regression else len(meta.classes)
        futures = [c.submit(distsvm.workers.blocks.block_stats, dataset.url, info, n_classes,
                            self.fold[starts[b]:starts[b + 1]], n_folds,
                            plan.cache_bytes[plan.owners[b]], dataset.storage_options,
                            workers=[plan.owners[b]], pure=False)
                   for b, info in enumerate(meta.blocks)]
        stats = cluster.gather(c, futures, plan.workers)
        counts = sum(s[0] for s in stats)  # (n_folds, K)
        nnz = np.array([s[1] for s in stats]).reshape(len(stats), n_folds)  # (B, n_folds)
        self.max_sqnorm = max((s[2] for s in stats), default=0.0)
        self.n_folds, self.dataset, self.counts, self.nnz = n_folds, dataset, counts, nnz

    def views(self, k: int):
        """Fold ``k``'s training view (the other rows) and test view (its rows), made when
        the fold trains: the coordinator holds the row numbers of the running folds only."""
        block_nnz = np.array([info.nnz for info in self.dataset.meta.blocks])
        return (self.dataset.take(np.flatnonzero(self.fold != k), block_nnz - self.nnz[:, k],
                                  self.counts.sum(axis=0) - self.counts[k]),
                self.dataset.take(np.flatnonzero(self.fold == k), self.nnz[:, k],
                                  self.counts[k]))

    def plan_of(self, k: int, view) -> cluster.WorkerPlan:
        """The workers of fold ``k`` (planned once for all folds): a view's block on the
        worker that owns (and caches) its stored block; with concurrent folds, the folds
        that run together on disjoint groups of workers (fold k: workers j ≡ k mod the
        number of groups), so that a fold of a store one worker holds does not queue
        behind another fold on the same worker."""
        workers = self.plan.workers
        mine = [a for j, a in enumerate(workers) if j % self.groups == k % self.groups]
        owners = tuple(a if a in mine else mine[j % len(mine)] for j, a in
                       enumerate(self.plan.owners[b] for b in view.block_ids))
        return dataclasses.replace(self.plan, owners=owners,
                                   cache_bytes={a: self.plan.cache_bytes[a] for a in mine},
                                   threads={a: self.plan.threads.get(a, 1) for a in mine})


def _run_folds(c, folds: _Folds, train_kwargs: dict, concurrent: int,
               warm=None, progress: Progress | None = None) -> tuple[list, list]:
    """Train every fold (from ``warm[k]`` if given) and predict its held-out rows, up to
    ``concurrent`` folds at a time (each its own job on the cluster: their tasks interleave
    on the workers, hiding each other's scheduler round trips); ``progress`` gets a line
    per fold done."""
    def one(k):
        train_view, test_view = folds.views(k)
        extra = ({} if warm is None or warm[k] is None or np.ndim(warm[k]) != 1  # one-vs-rest:
                 else {"warm_start": warm[k]})                              # cold (binary only)
        model = jobs.train(train_view, client=c, plan=folds.plan_of(k, train_view),
                           **train_kwargs, **extra)
        res = prediction.predict(test_view, model, client=c, plan=folds.plan_of(k, test_view))
        row = {"fold": k, "n_train": train_view.meta.n_rows, "n_test": res["n_rows"],
               "rounds": model.summary["rounds"]}
        if model.is_regression:
            row.update(mean_squared_error=res["mean_squared_error"],
                       regression_sums=res["regression_sums"])
            what = f"mean squared error {res['mean_squared_error']:g}"
        else:
            row.update(correct=int(round(res["accuracy"] * res["n_rows"])),
                       accuracy=res["accuracy"])
            what = f"accuracy {100 * res['accuracy']:g}%"
        if progress is not None:
            progress.note(f"fold {k + 1}/{folds.n_folds}: {res['n_rows']} rows, {what} "
                          f"({model.summary['rounds']} rounds)")
        return model, row

    with concurrent_futures.ThreadPoolExecutor(concurrent) as pool:
        done = list(pool.map(one, range(folds.n_folds)))
    return [m for m, _ in done], [r for _, r in done]


def cross_validate(data, n_folds: int = 5, *, seed: int = 0, concurrent_folds: int = 1,
                   scheduler: str | None = None, n_workers: int | None = None, client=None,
                   progress: Progress | None = None, **train_kwargs) -> dict:
    """``n_folds``-fold cross-validation over row folds (LIBLINEAR ``-v n``).

    ``train_kwargs`` go to :func:`distsvm.jobs.train` for every fold; ``seed`` draws
    the folds and is the solver's seed too.  Each fold trains on the cluster on a view
    of the other rows and predicts its own rows there.  Returns ``accuracy`` (held-out
    rows predicted correctly / all rows, as LIBLINEAR's "Cross Validation Accuracy"; on a
    regression store ``mean_squared_error`` and ``squared_correlation`` instead, over all
    held-out rows as LIBLINEAR's "Cross Validation Mean squared error") and
    ``folds``, one entry per fold (its row counts, accuracy, solver rounds).
    ``concurrent_folds`` folds train at the same time (each holds its solver state on the
    workers, so memory grows with it; 1, the default, trains them one after the other).
    """
    progress = progress or Progress(quiet=True)
    train_kwargs, why = for_folds(train_kwargs, "cross_validate")
    dataset = params.for_task(train_kwargs.get("loss", params.DEFAULTS.loss),
                              jobs.as_dataset(data))  # SVR folds of a store of numbers
    if why:
        progress.note(why)
    with jobs.client_for(scheduler, n_workers, client) as c:
        folds = _Folds(c, dataset, n_folds, seed, n_workers, concurrent_folds, progress)
        _, rows = _run_folds(c, folds, dict(train_kwargs, seed=seed), concurrent_folds,
                             progress=progress)
    n = dataset.meta.n_rows
    if dataset.meta.regression:  # LIBLINEAR's train.c: the sums over all held-out rows
        sums = np.sum([r["regression_sums"] for r in rows], axis=0)
        return {**prediction.regression_metrics(n, sums), "n_folds": len(rows), "n_rows": n,
                "folds": rows}
    correct = sum(r["correct"] for r in rows)
    return {"accuracy": correct / max(1, n), "n_folds": len(rows), "n_rows": n,
            "folds": rows}


def start_c(loss: str, n_rows: int, max_sqnorm: float) -> float:
    """LIBLINEAR's ``calc_start_C``: 2^⌊log₂ C_min⌋, C_min = 1/(l·max‖x‖²) (logistic) or
    1/(2l·max‖x‖²) (L2-loss SVM); ‖x‖² counts the bias feature."""
    min_c = 1.0 / ((1 if loss == "logistic" else 2) * n_rows * max_sqnorm)
    return 2.0 ** math.floor(math.log2(min_c))


def fold_solver(solver: str, loss: str, owner: str) -> tuple[str, str | None]:
    """The solver that trains the folds for ``solver`` and ``loss``, and why if it differs.

    A solver that reads the store's column view (pcd), which covers every row, cannot
    train a fold; for the L2-loss or L1-loss SVM dual CD minimizes the same problem
    (LIBLINEAR ``-s 1`` is ``-s 2``'s problem), so it takes over, without warm start.
    """
    if solver not in registry.SOLVERS or registry.SOLVERS[solver].reads != "columns":
        return solver, None
    code = registry.liblinear_type(solver, loss)
    if code is not None and registry.TYPES[code].penalty != "l2":  # -s 5, -s 6: no solver
        raise ValueError(  # of row blocks has their problem (dcd's would be -s 1's: wrong)
            f"-s {code} cannot be cross-validated here: its solver {solver!r} reads the "
            "store's column view, which covers every row, so it cannot train a fold, and no "
            f"solver of row blocks minimizes its {registry.TYPES[code].penalty.upper()}-"
            "regularized problem (LIBLINEAR's -v does; not yet here)")
    if loss in registry.SOLVERS["dcd"].losses:
        return "dcd", (f"{owner}: solver {solver!r} reads the store's column view and cannot "
                       f"train a fold (some rows of the store); dcd minimizes the same {loss} "
                       "problem")
    raise ValueError(f"The 'solver' parameter of {owner} cannot be {solver!r} with loss "
                     f"{loss!r}: it reads the store's column view, which covers every row, so "
                     "it cannot train a fold (some rows of the store); use a solver that reads "
                     "row blocks")


def for_folds(kwargs: dict, owner: str) -> tuple[dict, str | None]:
    """The training parameters ``kwargs`` of :func:`distsvm.jobs.train` for the folds: the
    solver :func:`fold_solver` picks (``kwargs`` then without the column view's mode,
    which the substitute does not take), and why, if it differs."""
    solver, why = fold_solver(kwargs.get("solver", params.DEFAULTS.solver),
                              kwargs.get("loss", params.DEFAULTS.loss), owner)
    out = {**kwargs, "solver": solver}
    if why:
        out.pop("pcd_mode", None)
    return out, why


def find_c(data, n_folds: int = 5, *, loss: str = "squared_hinge", solver: str | None = None,
           start_C: float | None = None, max_C: float = MAX_C, seed: int = 0,
           concurrent_folds: int = 1, scheduler: str | None = None,
           n_workers: int | None = None, client=None,
           progress: Progress | None = None, **train_kwargs) -> dict:
    """LIBLINEAR's ``-C``: the C of the best ``n_folds``-fold CV accuracy (see the module
    docstring) for ``loss`` "logistic" (``-s 0``) or "squared_hinge" (``-s 2``), trained
    by ``solver`` (default: LIBLINEAR's type's, from :data:`~.registry.TYPES`,
    or :func:`fold_solver`'s substitute).

    ``start_C`` (LIBLINEAR's ``-c`` with ``-C``) replaces :func:`start_c`; ``max_C`` is
    LIBLINEAR's 1024; ``concurrent_folds`` as :func:`cross_validate`'s.  Logs LIBLINEAR's
    ``log2c=… rate=…`` line per C.  Returns
    ``best_C``, ``accuracy`` (its CV accuracy) and ``history`` (C, accuracy, folds per C).
    """
    progress = progress or Progress(quiet=True)
    if loss not in SEARCH_TYPES:
        raise ValueError(f"The 'loss' parameter of find_c must be one of "
                         f"{list(SEARCH_TYPES)} (LIBLINEAR's -C searches -s 0 and -s 2). "
                         f"Got {loss!r} instead.")
    kwargs, why = for_folds(dict(train_kwargs, loss=loss, seed=seed, solver=solver or
                                 registry.TYPES[SEARCH_TYPES[loss]].solver), "find_c")
    if why:
        progress.note(why)
    solver = kwargs["solver"]
    if start_C is not None:
        params.check_real("find_c", "start_C", start_C, 0.0)
    params.check_real("find_c", "max_C", max_C, 0.0)
    # warm start where the solver takes it (LIBLINEAR's own -s 0/-s 2 solver), as LIBLINEAR
    warm_start = solver in registry.SOLVERS and params.takes(solver, "warm_start")
    dataset = jobs.as_dataset(data)
    bias = float(train_kwargs.get("bias", -1.0))
    history = []
    with jobs.client_for(scheduler, n_workers, client) as c:
        folds = _Folds(c, dataset, n_folds, seed, n_workers, concurrent_folds, progress)
        C = start_C or start_c(loss, dataset.meta.n_rows,
                               folds.max_sqnorm + (bias * bias if bias >= 0 else 0.0))
        C = min(C, max_C)
        best_C, best = C, 0.0
        prev = [None] * folds.n_folds
        unchanged = 0
        while C <= max_C:
            models, rows = _run_folds(c, folds, dict(kwargs, C=C), concurrent_folds,
                                      prev if warm_start else None)
            ws = [np.asarray(m.w, dtype=np.float64) for m in models]
            if prev[0] is not None and any(np.linalg.norm(w - p) > 1e-15
                                           for w, p in zip(ws, prev, strict=True)):
                unchanged = -1
            prev = ws
            rate = sum(r["correct"] for r in rows) / max(1, dataset.meta.n_rows)
            if rate > best:
                best_C, best = C, rate
            history.append({"C": C, "accuracy": rate, "folds": rows})
            progress.note(f"log2c={math.log2(C):7.2f}\trate={100 * rate:g}")
            unchanged += 1
            if unchanged == UNCHANGED_STOP:
                break
            C *= 2
    if C > max_C:
        progress.note("WARNING: maximum C reached.")
    return {"best_C": best_C, "accuracy": best, "n_folds": len(prev), "solver": solver,
            "loss": loss, "warm_start": warm_start, "history": history}

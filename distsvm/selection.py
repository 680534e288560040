"""Model selection: cross-validation over folds that are sets of row blocks; LIBLINEAR's C search.

Folds (what differs from LIBLINEAR).  LIBLINEAR's ``-v n`` shuffles the *rows*
and cuts the permutation into n folds (``cross_validation`` in linear.cpp).
Here a fold is a set of whole row blocks: the blocks are shuffled with the
seed and the permutation is cut the same way (fold k gets blocks
``perm[k·B/n : (k+1)·B/n]``), and each fold trains on a view of the store
restricted to the other blocks (:meth:`storage.Dataset.subset`) and predicts
its own, so nothing is copied and every solver that reads row blocks trains on
a view unchanged.  Ingest shuffles rows into blocks, so a set of blocks is a
random sample of rows as a row fold is; the folds differ from LIBLINEAR's only
as two random partitions do (and in size by at most one block).  A store with
fewer blocks than folds is refused: ingest it again with a smaller
``--block-rows``.

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
import math

import numpy as np

import workers.blocks

from . import cluster, jobs
from .progress import Progress

MAX_C = 1024.0  # LIBLINEAR's max_C for -s 0 and -s 2
UNCHANGED_STOP = 5  # LIBLINEAR: stop after this many C values with no fold's w changed
# The loss of each LIBLINEAR type find_c searches: -s 0 and -s 2, as LIBLINEAR's -C.
SEARCH_TYPES = {"logistic": 0, "squared_hinge": 2}
# Solvers that read the store's column view, which covers every row: they cannot train a fold.
COLUMN_SOLVERS = ("pcd",)


def fold_blocks(n_blocks: int, n_folds: int, seed: int, where: str = "dataset",
                n_rows: int | None = None) -> list[np.ndarray]:
    """The block ids of each fold: a seeded permutation of the blocks cut into ``n_folds``
    contiguous parts (LIBLINEAR's ``fold_start[i] = i·l/nr_fold`` over blocks)."""
    jobs._check_int("cross_validate", "n_folds", n_folds, 2)
    if n_blocks < n_folds:
        smaller = f" (at most {n_rows // n_folds} rows a block)" if n_rows else ""
        raise ValueError(f"{where}: {n_blocks} row blocks cannot make {n_folds} folds (a fold "
                         f"is a set of whole blocks, no data is copied); ingest it again with "
                         f"a smaller --block-rows{smaller}, or use fewer folds")
    perm = np.random.default_rng(seed).permutation(n_blocks)
    return [np.sort(perm[k * n_blocks // n_folds:(k + 1) * n_blocks // n_folds])
            for k in range(n_folds)]


def _block_stats(c, dataset, plan) -> tuple[np.ndarray, float]:
    """Per-block class counts (B, K) and the largest ‖xᵢ‖² of the store, one task a block."""
    meta = dataset.meta
    futures = [c.submit(workers.blocks.block_stats, dataset.url, info, len(meta.classes),
                        plan.cache_bytes[plan.owners[b]], dataset.storage_options,
                        workers=[plan.owners[b]], pure=False)
               for b, info in enumerate(meta.blocks)]
    stats = cluster.gather(c, futures, plan.workers)
    counts = np.array([s[0] for s in stats], dtype=np.int64).reshape(len(stats), -1)
    return counts, max((s[1] for s in stats), default=0.0)


class _Folds:
    """The folds of a dataset on a cluster: a training view and a test view per fold."""

    def __init__(self, c, dataset, n_folds: int, seed: int, n_workers, concurrent: int):
        jobs._check_int("cross_validate", "concurrent_folds", concurrent, 1)
        meta = dataset.meta
        self.ids = fold_blocks(len(meta.blocks), n_folds, seed, dataset.url, meta.n_rows)
        plan = cluster.plan(c, len(meta.blocks), n_workers, dataset)
        counts, self.max_sqnorm = _block_stats(c, dataset, plan)
        everything = np.arange(len(meta.blocks))
        self.views = []
        for test in self.ids:
            rest = np.setdiff1d(everything, test)
            self.views.append((dataset.subset(rest, counts[rest].sum(axis=0)),
                               dataset.subset(test, counts[test].sum(axis=0))))


def _run_folds(c, folds: _Folds, train_kwargs: dict, n_workers, concurrent: int,
               warm=None, progress: Progress | None = None) -> tuple[list, list]:
    """Train every fold (from ``warm[k]`` if given) and predict its held-out blocks, up to
    ``concurrent`` folds at a time (each its own job on the cluster: their tasks interleave
    on the workers, hiding each other's scheduler round trips); ``progress`` gets a line
    per fold done."""
    def one(k):
        train_view, test_view = folds.views[k]
        extra = {} if warm is None or warm[k] is None else {"warm_start": warm[k]}
        model = jobs.train(train_view, client=c, n_workers=n_workers, **train_kwargs, **extra)
        res = jobs.predict(test_view, model, client=c, n_workers=n_workers)
        if progress is not None:
            progress.note(f"fold {k + 1}/{len(folds.views)}: {len(folds.ids[k])} blocks, "
                          f"{res['n_rows']} rows, accuracy {100 * res['accuracy']:g}% "
                          f"({model.summary['rounds']} rounds)")
        return model, {"fold": k, "blocks": [int(b) for b in folds.ids[k]],
                       "n_train": train_view.meta.n_rows, "n_test": res["n_rows"],
                       "correct": int(round(res["accuracy"] * res["n_rows"])),
                       "accuracy": res["accuracy"], "rounds": model.summary["rounds"]}

    with concurrent_futures.ThreadPoolExecutor(concurrent) as pool:
        done = list(pool.map(one, range(len(folds.views))))
    return [m for m, _ in done], [r for _, r in done]


def cross_validate(data, n_folds: int = 5, *, seed: int = 0, concurrent_folds: int = 1,
                   scheduler: str | None = None, n_workers: int | None = None, client=None,
                   progress: Progress | None = None, **train_kwargs) -> dict:
    """``n_folds``-fold cross-validation with folds as sets of row blocks (LIBLINEAR ``-v n``).

    ``train_kwargs`` go to :func:`distsvm.jobs.train` for every fold; ``seed`` draws
    the folds and is the solver's seed too.  Each fold trains on the cluster on a view
    of the other blocks and predicts its own blocks there.  Returns ``accuracy`` (held-out
    rows predicted correctly / all rows, as LIBLINEAR's "Cross Validation Accuracy") and
    ``folds``, one entry per fold (its blocks, row counts, accuracy, solver rounds).
    ``concurrent_folds`` folds train at the same time (each holds its solver state on the
    workers, so memory grows with it; 1, the default, trains them one after the other).
    """
    progress = progress or Progress(quiet=True)
    dataset = jobs.as_dataset(data)
    solver, why = fold_solver(train_kwargs.pop("solver", "dcd"), train_kwargs.get(
        "loss", "squared_hinge"), "cross_validate")
    if why:
        progress.note(why)
    with jobs.client_for(scheduler, n_workers, client) as c:
        folds = _Folds(c, dataset, n_folds, seed, n_workers, concurrent_folds)
        _, rows = _run_folds(c, folds, dict(train_kwargs, solver=solver, seed=seed), n_workers,
                             concurrent_folds, progress=progress)
    correct = sum(r["correct"] for r in rows)
    return {"accuracy": correct / max(1, dataset.meta.n_rows), "n_folds": n_folds,
            "n_rows": dataset.meta.n_rows, "folds": rows}


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
    if solver not in COLUMN_SOLVERS:
        return solver, None
    if loss in jobs.SOLVER_LOSSES["dcd"]:
        return "dcd", (f"{owner}: solver {solver!r} reads the store's column view and cannot "
                       f"train a fold (a set of row blocks); dcd minimizes the same {loss} "
                       "problem")
    raise ValueError(f"The 'solver' parameter of {owner} cannot be {solver!r} with loss "
                     f"{loss!r}: it reads the store's column view, which covers every row, so "
                     "it cannot train a fold (a set of row blocks); use a solver that reads "
                     "row blocks")


def find_c(data, n_folds: int = 5, *, loss: str = "squared_hinge", solver: str | None = None,
           start_C: float | None = None, max_C: float = MAX_C, seed: int = 0,
           concurrent_folds: int = 1, scheduler: str | None = None,
           n_workers: int | None = None, client=None,
           progress: Progress | None = None, **train_kwargs) -> dict:
    """LIBLINEAR's ``-C``: the C of the best ``n_folds``-fold CV accuracy (see the module
    docstring) for ``loss`` "logistic" (``-s 0``) or "squared_hinge" (``-s 2``), trained
    by ``solver`` (default: LIBLINEAR's type's, from :data:`distsvm.jobs.LIBLINEAR_TYPES`,
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
    solver, why = fold_solver(solver or jobs.LIBLINEAR_TYPES[SEARCH_TYPES[loss]][0], loss,
                              "find_c")
    if why:
        progress.note(why)
    if start_C is not None:
        jobs._check_real("find_c", "start_C", start_C, 0.0)
    jobs._check_real("find_c", "max_C", max_C, 0.0)
    # warm start with LIBLINEAR's own -s 0/-s 2 solver, as LIBLINEAR
    warm_start = (solver in jobs.WARM_START_SOLVERS
                  and solver == jobs.LIBLINEAR_TYPES[SEARCH_TYPES[loss]][0])
    dataset = jobs.as_dataset(data)
    bias = float(train_kwargs.get("bias", -1.0))
    kwargs = dict(train_kwargs, solver=solver, loss=loss, seed=seed)
    history = []
    with jobs.client_for(scheduler, n_workers, client) as c:
        folds = _Folds(c, dataset, n_folds, seed, n_workers, concurrent_folds)
        C = start_C or start_c(loss, dataset.meta.n_rows,
                               folds.max_sqnorm + (bias * bias if bias >= 0 else 0.0))
        C = min(C, max_C)
        best_C, best = C, 0.0
        prev = [None] * n_folds
        unchanged = 0
        while C <= max_C:
            models, rows = _run_folds(c, folds, dict(kwargs, C=C), n_workers,
                                      concurrent_folds, prev if warm_start else None)
            ws = [np.asarray(m.w, dtype=np.float64) for m in models]
            if prev[0] is not None and any(np.linalg.norm(w - p) > 1e-15
                                           for w, p in zip(ws, prev)):
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
    return {"best_C": best_C, "accuracy": best, "n_folds": n_folds, "solver": solver,
            "loss": loss, "warm_start": warm_start, "history": history}

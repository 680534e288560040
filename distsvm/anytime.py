"""Anytime training (issue 31): a validation set scored after each round, early stopping on
it, a time budget — the settings and the validation set's scoring.  The mechanism is the
round driver's, once for every solver (:func:`distsvm.solvers.driver.drive`): it scores each
round's model here, keeps each problem's best round, stops a problem whose score has not
improved for ``n_iter_no_change`` rounds, ends the run at the deadline and returns the best
model so far, with why it stopped (``stopped_by``).

:func:`distsvm.jobs.train` makes the :class:`Settings` of a run (:func:`prepare`: the
validation store, or the rows held out of the training store by ``seed``) and hands them to
the driver through :data:`CURRENT` (:func:`using`; a one-vs-rest problem's thread gets a copy
of its context, :func:`distsvm.solvers.ovr.solve`), so that no solver's signature carries them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time

import numpy as np

import distsvm.workers.blocks
import distsvm.workers.cutting_plane
import distsvm.workers.layout
import distsvm.workers.validation
from distsvm.storage import Dataset, open_dataset

from . import cluster

# metric -> whether higher is better (its name in the round row: "validation_<metric>")
METRICS = {"accuracy": True, "mse": False, "auc": True, "pairwise_accuracy": True}
# the metrics that score each kind of model (:func:`kind_of`), "auto" the first: a one-class
# model's ±1 predictions (+1: an inlier) against the labels, as predict's accuracy and
# LIBLINEAR's, or the AUC of its decision values for the rows labelled +1; a ranking model's
# pairwise accuracy (its thresholds are fit after training, its order is what it learns)
KINDS = {"classification": ("accuracy", "auc"), "regression": ("mse",),
         "one-class": ("accuracy", "auc"), "ranking": ("pairwise_accuracy",)}


@dataclasses.dataclass
class Settings:
    """A run's anytime settings: ``validation`` (None: no validation set), early stopping
    after ``n_iter_no_change`` rounds without an improvement of more than ``tol`` (None:
    off), the ``deadline`` (``time.time()``; None: no budget) and ``problems``, each problem's
    scoring (:func:`distsvm.workers.validation.block_scores`), in the drive's problem order."""

    validation: Validation | None = None
    n_iter_no_change: int | None = None
    tol: float = 1e-3
    deadline: float | None = None
    problems: list | None = None

    def expired(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline


CURRENT: contextvars.ContextVar[Settings | None] = contextvars.ContextVar("distsvm_anytime",
                                                                           default=None)


def current() -> Settings:
    """The settings of the run this thread drives (none: :class:`Settings`' defaults)."""
    return CURRENT.get() or Settings()


@contextlib.contextmanager
def using(settings: Settings | None, **changes):
    """:data:`CURRENT` is ``settings`` (with ``changes``) inside the block."""
    if settings is not None and changes:
        settings = dataclasses.replace(settings, **changes)
    token = CURRENT.set(settings)
    try:
        yield settings
    finally:
        CURRENT.reset(token)


def check(owner: str, p) -> None:
    """The anytime options that go together: early stopping needs a validation set."""
    if p.n_iter_no_change is not None and p.validation is None and p.validation_fraction is None:
        raise ValueError(f"The 'n_iter_no_change' parameter of {owner} needs a validation set "
                         "(validation or validation_fraction)")
    if p.validation is not None and p.validation_fraction is not None:
        raise ValueError(f"The 'validation' and 'validation_fraction' parameters of {owner} "
                         "exclude each other")


def metric_of(p, kind: str) -> str:
    """The validation metric of ``p`` for a model of ``kind`` (:data:`KINDS`)."""
    allowed = KINDS[kind]
    if p.validation_metric == "auto":
        return allowed[0]
    if p.validation_metric not in allowed:
        raise ValueError(f"validation metric {p.validation_metric!r} does not score a {kind} "
                         f"model (it is scored by {' or '.join(allowed)})")
    return p.validation_metric


def holdout(client, dataset: Dataset, fraction: float, seed: int, plan) -> tuple[Dataset, Dataset]:
    """The rows of ``dataset`` for training and the held-out validation rows: round(fraction·l)
    rows drawn by ``seed`` (:func:`distsvm.workers.validation.held_out`), as two views
    (:meth:`Dataset.take`, nothing copied); their non-zeros and class counts by one task a
    block on its owner in ``plan``.  A solver over the column view trains on the first by
    weighing the others 0 (:func:`distsvm.columns.training_rows`)."""
    meta = dataset.meta
    if dataset.is_subset or any(info.parts for info in meta.blocks):
        raise ValueError(f"{dataset.url}: validation_fraction holds out rows of a stored "
                         "dataset, not of a view (a fold); give a validation store instead")
    n_held = int(round(fraction * meta.n_rows))
    if not 0 < n_held < meta.n_rows:
        raise ValueError(f"validation_fraction={fraction:g} of {meta.n_rows} rows holds out "
                         f"{n_held}: none would be left to {'score' if not n_held else 'train'}")
    held = distsvm.workers.validation.held_out(meta.n_rows, fraction, seed).astype(np.int64)
    starts = np.cumsum([0] + [info.n_rows for info in meta.blocks])
    n_classes = 1 if meta.regression else len(meta.classes)
    futures = [client.submit(distsvm.workers.blocks.block_stats, dataset.url, info, n_classes,
                             held[starts[b]:starts[b + 1]], 2, plan.cache_bytes[plan.owners[b]],
                             dataset.storage_options, workers=[plan.owners[b]], pure=False)
               for b, info in enumerate(meta.blocks)]
    stats = cluster.gather(client, futures, plan.workers)
    counts = sum(s[0] for s in stats)
    nnz = np.array([s[1] for s in stats]).reshape(len(stats), 2)
    return (dataset.take(np.flatnonzero(held == 0), nnz[:, 0], counts[0]),
            dataset.take(np.flatnonzero(held == 1), nnz[:, 1], counts[1]))


def view_plan(plan, stored, view: Dataset):
    """A view's plan: each of its blocks on the worker that owns its stored block."""
    ids = view.block_ids if view.block_ids is not None else range(len(view.meta.blocks))
    return dataclasses.replace(plan, owners=tuple(stored[b] for b in ids))


class Validation:
    """A validation set on the cluster: its blocks on the workers of ``plan`` (they cache
    them), scored by one call on each worker that owns some
    (:func:`distsvm.workers.validation.blocks_scores`, :class:`distsvm.cluster.Runners`)."""

    def __init__(self, client, dataset: Dataset, plan, metric: str, *, bias: float):
        self.client, self.dataset, self.plan, self.metric = client, dataset, plan, metric
        self.runners = cluster.Runners(client)
        self.bias = bias  # the model's: w's last weight is its bias weight where >= 0
        self.name = f"validation_{metric}"

    @classmethod
    def of_store(cls, client, url: str, storage_options, metric: str, regression: bool, **kw):
        dataset = open_dataset(url, storage_options)
        if dataset.meta.regression != regression:
            raise ValueError(f"{url}: the validation store has "
                             f"{'real-valued targets' if dataset.meta.regression else 'classes'}"
                             f"; the training store "
                             f"{'real-valued targets' if regression else 'classes'}")
        plan = cluster.plan(client, len(dataset.meta.blocks), None, dataset)
        return cls(client, dataset, plan, metric, **kw)

    def scores(self, ws: list[np.ndarray], problems: list[dict]) -> list[float]:
        """The score of each problem's weights ``ws[j]`` (scoring ``problems[j]``); run again
        on the survivors if a worker holding validation blocks leaves."""
        meta = self.dataset.meta
        ws = [distsvm.workers.layout.laid_out(np.asarray(w), self.bias, meta.n_features)
              for w in ws]
        while True:
            plan = self.plan
            try:
                self.runners.keep(plan.workers)
                calls = [self.runners.call(
                    a, distsvm.workers.validation.blocks_scores, self.dataset.url, infos,
                    problems, *ws, metric=self.metric, bias=self.bias,
                    n_features=meta.n_features, store_classes=tuple(meta.classes),
                    cache_bytes=plan.cache_bytes[a], storage_options=self.dataset.storage_options)
                    for a, infos in plan.shares(meta.blocks)]
                parts = [p for ps in cluster.gather(self.client, calls, [c.worker for c in calls])
                         for p in ps]
                break
            except cluster.WorkerLost as lost:
                self.plan = cluster.replan(plan, lost.gone)
        return [self._score([part[j] for part in parts], problems[j])
                for j in range(len(problems))]

    def _score(self, parts: list, problem: dict) -> float:
        if self.metric in ("auc", "pairwise_accuracy"):  # of every row's value and truth
            values, truths = (np.concatenate([p[i] for p in parts]) for i in (0, 1))
            if self.metric == "auc":
                return auc(values, truths)
            return distsvm.workers.cutting_plane.pairwise_accuracy(
                values, truths, len(problem["ranks"]))[0]
        total, n = (sum(p[0] for p in parts), sum(p[1] for p in parts))
        return float(total / max(1, n))


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """The area under the ROC curve of ``scores`` for the rows ``positive`` (ties count ½);
    NaN without both kinds of rows."""
    from sklearn.metrics import roc_auc_score

    if np.all(positive) or not np.any(positive):
        return float("nan")
    return float(roc_auc_score(positive, scores))


def better(metric: str, score: float, than: float, tol: float = 0.0) -> bool:
    """Whether ``score`` improves on ``than`` by more than ``tol`` (scikit-learn's rule:
    a score below best + tol counts as no improvement)."""
    if not np.isfinite(than):
        return np.isfinite(score)
    return score > than + tol if METRICS[metric] else score < than - tol

"""Training and prediction jobs over a dataset: the one place that validates parameters.

Both the CLI and the scikit-learn style estimators call :func:`check_params`
and :func:`train`, so a parameter means the same thing, and fails the same
way, everywhere.  Objective scaling is LIBLINEAR's everywhere:
``½‖w‖² + C Σᵢ loss`` (scikit-learn's LinearSVC uses the same C).
"""

from __future__ import annotations

import contextlib
import numbers
import os

import numpy as np

import workers.blocks
from storage import Dataset, open_dataset

from . import cluster
from .model import Model
from .progress import Progress
from .solvers import dcd, pcd

SOLVERS = ("dcd", "pcd", "auto")
LOSSES = ("hinge", "squared_hinge", "logistic")
# The losses each solver trains ("auto" picks a solver that trains the loss).
SOLVER_LOSSES = {"dcd": ("hinge", "squared_hinge"), "pcd": pcd.LOSSES}
# LIBLINEAR's -s codes that this version trains, as (solver, loss).
LIBLINEAR_TYPES = {0: ("pcd", "logistic"), 1: ("dcd", "squared_hinge"),
                   2: ("pcd", "squared_hinge"), 3: ("dcd", "hinge")}
# --solver auto takes the primal when rows outnumber features by this factor (l ≫ n).
AUTO_PRIMAL_RATIO = 50


def _check_real(owner, name, value, low, high=np.inf, low_open=True):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        hi = "inf" if high == np.inf else f"{high:g}"
        raise ValueError(f"The '{name}' parameter of {owner} must be a float in the range "
                         f"{bracket}{low:g}, {hi}{')' if high == np.inf else ']'}. "
                         f"Got {value!r} instead.")


def _check_int(owner, name, value, low):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise ValueError(f"The '{name}' parameter of {owner} must be an int in the range "
                         f"[{low}, inf). Got {value!r} instead.")


def check_params(owner: str, *, solver: str, loss: str, C, eps, bias, max_rounds, seed,
                 inner_passes) -> None:
    """Raise ``ValueError`` in scikit-learn's wording for the first invalid parameter."""
    if solver not in SOLVERS:
        raise ValueError(f"The 'solver' parameter of {owner} must be one of {list(SOLVERS)}. "
                         f"Got {solver!r} instead.")
    if loss not in LOSSES:
        raise ValueError(f"The 'loss' parameter of {owner} must be one of {list(LOSSES)}. "
                         f"Got {loss!r} instead.")
    if solver in SOLVER_LOSSES and loss not in SOLVER_LOSSES[solver]:
        raise ValueError(f"The 'loss' parameter of {owner} must be one of "
                         f"{list(SOLVER_LOSSES[solver])} with solver={solver!r}. "
                         f"Got {loss!r} instead.")
    _check_real(owner, "C", C, 0.0)
    _check_real(owner, "tol", eps, 0.0)
    if not isinstance(bias, numbers.Real) or isinstance(bias, bool) or not np.isfinite(bias):
        raise ValueError(f"The 'bias' parameter of {owner} must be a finite float "
                         f"(< 0 for no bias feature). Got {bias!r} instead.")
    _check_int(owner, "max_iter", max_rounds, 1)
    _check_int(owner, "random_state", seed, 0)
    _check_int(owner, "inner_passes", inner_passes, 1)


def as_dataset(data) -> Dataset:
    return data if isinstance(data, Dataset) else open_dataset(os.fspath(data))


@contextlib.contextmanager
def client_for(scheduler=None, n_workers=None, client=None):
    """The client given, one for ``scheduler``, the active default client, or an embedded cluster."""
    if client is None and scheduler is None:
        from distributed import default_client

        with contextlib.suppress(ValueError):
            client = default_client()
    with cluster.connect(scheduler, n_workers, client=client) as c:
        yield c


def choose_solver(dataset: Dataset, loss: str) -> tuple[str, str]:
    """``--solver auto``: the solver for this store and loss, and why.

    Primal CD when the store has far more rows than features (l ≫ n: the primal
    has fewer variables, and the dual method "may not be stable for some
    non-document data with a small number of features" — Chang, Hsieh & Lin
    2008, §1), dual CD otherwise (document-like data, where Hsieh et al. 2008
    find it faster); a loss only one solver trains decides by itself.
    """
    from storage.columns import read_columns_meta
    from storage.errors import IncompleteStoreError

    m = dataset.meta
    ratio = m.n_rows / max(1, m.n_features)
    if loss not in SOLVER_LOSSES["pcd"]:
        return "dcd", f"only dcd trains the {loss} loss"
    if loss not in SOLVER_LOSSES["dcd"]:
        return "pcd", f"only pcd trains the {loss} loss"
    if ratio < AUTO_PRIMAL_RATIO:
        return "dcd", (f"l={m.n_rows} rows vs n={m.n_features} features (ratio {ratio:.3g} < "
                       f"{AUTO_PRIMAL_RATIO}): the dual, with l variables, suits n ≳ l")
    try:
        read_columns_meta(dataset)
    except IncompleteStoreError:
        return "dcd", (f"l ≫ n (ratio {ratio:.3g}) favours the primal, but the store has no "
                       "column view (run `distsvm columnize`)")
    return "pcd", (f"l={m.n_rows} rows ≫ n={m.n_features} features (ratio {ratio:.3g} ≥ "
                   f"{AUTO_PRIMAL_RATIO}): the primal has fewer variables")


def train(data, *, solver: str = "dcd", loss: str = "squared_hinge", C: float = 1.0,
          eps: float = 0.1, bias: float = -1.0, max_rounds: int = 1000, seed: int = 0,
          inner_passes: int = 1, pcd_mode: str = "exact", scheduler: str | None = None,
          n_workers: int | None = None, client=None, progress: Progress | None = None,
          owner: str = "train") -> Model:
    """Train a binary linear classifier on a dataset (or its URL) and return the model."""
    check_params(owner, solver=solver, loss=loss, C=C, eps=eps, bias=bias,
                 max_rounds=max_rounds, seed=seed, inner_passes=inner_passes)
    if pcd_mode not in pcd.MODES:
        raise ValueError(f"The 'pcd_mode' parameter of {owner} must be one of "
                         f"{list(pcd.MODES)}. Got {pcd_mode!r} instead.")
    dataset = as_dataset(data)
    meta = dataset.meta
    if len(meta.classes) != 2:
        raise ValueError(f"{dataset.url}: {len(meta.classes)} classes; this version trains "
                         "binary classifiers only (labels must take exactly two values)")
    progress = progress or Progress(quiet=True)
    why = None
    if solver == "auto":
        solver, why = choose_solver(dataset, loss)
        progress.note(f"train: --solver auto picked {solver}: {why}")
    with client_for(scheduler, n_workers, client) as c:
        plan = cluster.plan(c, len(meta.blocks), n_workers)
        progress.note(f"train: {solver} ({loss}) C={C:g} eps={eps:g} on {meta.n_rows} rows x "
                      f"{meta.n_features} features, {len(meta.blocks)} blocks, "
                      f"{len(plan.workers)} workers")
        if solver == "pcd":
            result = pcd.solve(c, dataset, plan, loss=loss, C=float(C), eps=float(eps),
                               bias=float(bias), max_rounds=max_rounds, seed=seed,
                               mode=pcd_mode, progress=progress)
        else:
            result = dcd.solve(c, dataset, plan, loss=loss, C=float(C), eps=float(eps),
                               bias=float(bias), max_rounds=max_rounds, seed=seed,
                               inner_passes=inner_passes, progress=progress)
    params = {"C": float(C), "eps": float(eps), "bias": float(bias), "max_rounds": max_rounds,
              "seed": seed, "inner_passes": inner_passes}
    if solver == "pcd":
        params["pcd_mode"] = pcd_mode
    if why:
        params["auto_choice"] = why
    summary = {"rounds": result.rounds, "converged": result.converged,
               "primal_objective": result.primal_objective,
               "dual_objective": result.dual_objective, "duality_gap": result.duality_gap,
               "train_seconds": result.train_seconds, "n_rows": meta.n_rows,
               "n_features": meta.n_features, "dataset": dataset.url,
               "history": result.history}
    return Model(w=result.w, bias=float(bias), classes=meta.classes, solver=solver, loss=loss,
                 params=params, summary=summary, n_features=meta.n_features)


def _weights_for(model: Model, n_features: int) -> np.ndarray:
    """The model's weights laid out for data with ``n_features`` columns (LIBLINEAR's rule:
    features the model has not seen weigh 0; a bias weight goes last)."""
    has_bias = model.bias >= 0
    w = np.zeros(n_features + has_bias)
    k = min(n_features, model.n_features)
    w[:k] = model.w[:k]
    if has_bias:
        w[n_features] = model.w[model.n_features]
    return w


def predict(data, model: Model, *, scheduler: str | None = None, n_workers: int | None = None,
            client=None, output=None) -> dict:
    """Predict every row of a dataset; return accuracy and row count, optionally write labels.

    ``output`` (a path) receives one predicted label per line in the store's row order.
    """
    dataset = as_dataset(data)
    meta = dataset.meta
    w = _weights_for(model, meta.n_features)
    truth_values = np.asarray(meta.classes)
    classes = np.asarray(model.classes)
    correct = 0
    with client_for(scheduler, n_workers, client) as c:
        plan = cluster.plan(c, len(meta.blocks), n_workers)
        wf = c.scatter(w, broadcast=True, hash=False)
        futures = [c.submit(workers.blocks.block_decisions, dataset.url, info, wf, model.bias,
                            meta.n_features, plan.cache_bytes[plan.owners[b]],
                            dataset.storage_options, workers=[plan.owners[b]], pure=False)
                   for b, info in enumerate(meta.blocks)]
        with open(output, "w") if output else contextlib.nullcontext() as out:
            for f in futures:  # in block order; each block's result is released once used
                dv, y = f.result()
                f.release()
                pred = classes[(dv > 0).astype(np.int64)]
                correct += int(np.sum(pred == truth_values[y]))
                if out is not None:
                    out.writelines(f"{p:g}\n" for p in pred)
    return {"accuracy": correct / max(1, meta.n_rows), "n_rows": meta.n_rows}

"""Training and prediction jobs over a dataset.

The CLI, the scikit-learn style estimators, job specs, the pipeline and model selection
(:mod:`distsvm.selection`) all train by :func:`train`, whose parameters
:mod:`distsvm.params` checks and whose solvers :mod:`distsvm.solvers.registry` lists, and
predict by :func:`predict`.  Objective scaling is LIBLINEAR's everywhere:
``½‖w‖² + C Σᵢ loss`` (scikit-learn's LinearSVC uses the same C).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

import numpy as np

import workers.blocks
from storage import Dataset, open_dataset
from storage.checkpoint import atomic_file
from workers import losses

from . import cluster, params, resources
from .model import ONECLASS_CLASSES, Model, liblinear_label_order, probabilities
from .progress import Progress
from .solvers import cutting_plane, ovr, registry, resident


def as_dataset(data) -> Dataset:
    return data if isinstance(data, Dataset) else open_dataset(os.fspath(data))


@contextlib.contextmanager
def client_for(scheduler=None, n_workers=None, client=None, progress=None):
    """The client given, one for ``scheduler``, the active default client, or an embedded
    cluster (announced on ``progress``, with its dashboard address)."""
    if client is None and scheduler is None:
        from distributed import default_client

        with contextlib.suppress(ValueError):
            client = default_client()
    with cluster.connect(scheduler, n_workers, client=client, progress=progress) as c:
        yield c


def train(data, *, client=None, scheduler: str | None = None, n_workers: int | None = None,
          progress: Progress | None = None, owner: str = "train", checkpoint=None,
          plan: cluster.WorkerPlan | None = None, **kwargs) -> Model:
    """Train a linear classifier (or a ranking model) on a dataset (or its URL); return it.

    ``kwargs`` are the training parameters (:class:`distsvm.params.Params`, checked by
    :mod:`distsvm.params` in the words of ``owner``); the solver runs by its entry in
    :mod:`distsvm.solvers.registry`, "auto" by :func:`distsvm.params.choose_solver`'s
    pick.  A store of K > 2 classes trains K one-vs-rest problems (:mod:`distsvm.solvers.ovr`) unless the
    solver is multi-class itself; ``objective="ordinal"`` a ranking model whose thresholds
    :func:`distsvm.solvers.cutting_plane.fit_thresholds` fits.

    ``checkpoint`` (a :class:`distsvm.checkpoint.Checkpointer`) makes the run write
    checkpoints and continue from the latest one (in one-vs-rest, each problem in its own
    directory, :meth:`~distsvm.checkpoint.Checkpointer.problem`, or the K together where one
    job runs them).  ``plan`` (a :class:`distsvm.cluster.WorkerPlan`, an owner per block of
    ``data``) replaces :func:`distsvm.cluster.plan`'s (cross-validation plans its folds once).
    """
    p = params.Params(**kwargs)
    params.check_params(owner, p)
    dataset = as_dataset(data)
    progress = progress or Progress(quiet=True)
    why = None
    if p.solver not in registry.SOLVERS:  # "auto" (check_params refused the rest)
        solver, why = params.choose_solver(dataset, p.loss)
        progress.note(f"train: --solver auto picked {solver}: {why}")
        p = dataclasses.replace(p, solver=solver)
    p = params.check_solver(owner, p, dataset.meta.weighted, given=kwargs)
    p, class_weight, multiclass = params.check_data(owner, p, dataset)
    meta = dataset.meta
    with client_for(scheduler, n_workers, client, progress) as c:
        resources.check_dataset(dataset, c)  # w and the blocks fit a worker, or one line
        plan = plan or cluster.plan(c, len(meta.blocks), n_workers, dataset)
        if not multiclass:
            p, why = primal_where_spread(p, dataset, plan, progress, why)
        progress.note(f"train: {p.solver} ({p.loss}) C={p.C:g} eps={p.eps:g} on {meta.n_rows} "
                      f"rows x {meta.n_features} features, {len(meta.blocks)} blocks, "
                      f"{len(plan.workers)} workers"
                      + (f", {len(meta.classes)} classes one-vs-rest" if multiclass else ""))
        start = time.perf_counter()
        results = _solve(c, p, dataset, plan, class_weight, multiclass, progress, checkpoint)
        seconds = time.perf_counter() - start
        ranks = (_fit_ranks(c, dataset, plan, results[0].w, p.bias, progress)
                 if p.objective == "ordinal" else None)
    return _model(p, dataset, class_weight, results, seconds, ranks, why)


# primal_where_spread's Newton tolerance, times the dual's eps: 0.001 (LIBLINEAR's for its own
# switch from -s 12 to -s 11), so that -s 1 ends nearer f* than LIBLINEAR's -s 1 (pypi-summaries:
# -s 1 stops 5.0e-6 above f*, -s 2 at eps 0.01 — 0.1·eps, LIBLINEAR's -s 1 switch — 1.6e-4
# above, at 0.001 1.3e-6, at 0.0001 3e-8); -s 7's dual stops far nearer (a9a: 10529.5635,
# where -s 0 at eps 1e-4 ends at 10529.5637-10529.5690, at 1e-5 at 10529.5627): 0.0001.
PRIMAL_TOLERANCE = {"logistic": 1e-4}


def primal_where_spread(p, dataset: Dataset, plan: cluster.WorkerPlan, progress: Progress,
                        why: str | None) -> tuple:
    """Sequential dual CD of a loss the primal Newton solver also minimizes (``-s 1``,
    ``-s 7``, ``-s 12``) on a store spread over several workers' memory that no one worker
    holds: the primal Newton solver instead, on every worker that holds a share.  Dual CD
    would stream the store through one worker, the others idle, and its parallel modes take
    several times the rounds (docs/benchmarks.md, "Scale out"); Newton's iterations do not
    depend on the number of workers.  Its tolerance is ``PRIMAL_TOLERANCE``·eps, so that it
    ends at least as near the optimum as the dual solver.  Only with dual CD's own options
    at their defaults; (p, why) unchanged otherwise."""
    if (not params.takes(p.solver, "primal_switch", p.loss)
            or not params.transferable(dataclasses.replace(p, primal_switch=None), "newton")
            or not resident.spread(dataset, plan)):
        return p, why
    tighter = PRIMAL_TOLERANCE.get(p.loss, 1e-3)
    owners = len(resident.owners(plan))
    why = (f"the store spans {owners} workers' memory and no one worker holds it: the "
           f"primal Newton solver (LIBLINEAR's -s {registry.liblinear_type('newton', p.loss)}, "
           f"the same objective) on all {owners}, eps={tighter * p.eps:g}, instead of "
           f"streaming it through one worker")
    progress.note(f"train: {why}")
    return dataclasses.replace(p, solver="newton", eps=tighter * p.eps, primal_switch=None), why


def _solve(client, p, dataset, plan, class_weight, multiclass: bool, progress,
           checkpoint) -> list:
    """The result of the binary problem (or of a multi-class solver's one), or the K results
    of one-vs-rest — in one job where the solver runs them so (sequential dual CD), else
    problem by problem (:func:`distsvm.solvers.ovr.solve`) — each continued by the primal
    solver where ``primal_switch`` says so (:func:`_switch_to_primal`).  Each problem's C
    per class index comes from :func:`workers.losses.class_costs`."""
    spec = registry.SOLVERS[p.solver]
    solver = spec.module()
    held = resident.hold(dataset, plan, p) if spec.joins else None
    classes = dataset.meta.classes
    positives = range(len(classes)) if multiclass else [1]  # problem k: index k (+1) vs rest
    costs = {k: losses.class_costs(p.C, class_weight, k if multiclass else None)
             for k in positives}

    def fit(k, plan_k, progress_k, checkpoint_k=checkpoint):
        return solver.solve(client, *(held or (dataset, plan_k)), p, positive=k, cost=costs[k],
                            progress=progress_k, checkpoint=checkpoint_k)

    if multiclass and spec.batches_ovr and p.parallel is None:  # K problems, one read a block
        results = solver.solve_ovr(client, *(held or (dataset, plan)), p,
                                   costs=list(costs.values()), progress=progress,
                                   checkpoint=checkpoint)
    elif multiclass:
        results = ovr.solve(fit, classes, plan, progress, checkpoint)
    else:
        results = [fit(1, plan, progress)]
    if p.primal_switch is None:
        return results
    return [r if r.converged else _switch_to_primal(
        client, dataset, plan, r, k, costs[k], p,
        ovr.Tagged(progress, f"{classes[k]:g}") if multiclass else progress)
        for k, r in zip(positives, results)]


def _switch_to_primal(client, dataset, plan, dual, positive: int, cost, p, progress):
    """LIBLINEAR's switch (``train_one``, linear.cpp, since 2.40) for a dual CD result
    ``dual`` that stopped at its round limit: the primal Newton solver of the same loss from
    its w, stopping at 0.1·eps, or 0.001·eps for SVR (-s 12 → -s 11; LIBLINEAR:
    "primal_solver_tol obtained from eps for dual may be too loose").  The result is
    Newton's, its rounds and history after the dual's."""
    progress.note(f"{p.solver} reached {dual.rounds} rounds without converging: switching to "
                  f"the primal Newton solver (LIBLINEAR's -s "
                  f"{registry.liblinear_type('newton', p.loss)})")
    tighter = PRIMAL_TOLERANCE.get(p.loss, 1e-3)
    primal = registry.SOLVERS["newton"].module().solve(
        client, dataset, plan, dataclasses.replace(p, eps=tighter * p.eps, warm_start=dual.w),
        positive=positive, cost=cost, progress=progress, checkpoint=None)
    history = dual.history + [{**row, "round": dual.rounds + row["round"]}
                              for row in primal.history[1:]]
    return dataclasses.replace(primal, rounds=dual.rounds + primal.rounds, history=history,
                               train_seconds=dual.train_seconds + primal.train_seconds)


def _fit_ranks(client, dataset, plan, w, bias: float, progress) -> tuple:
    """A ranking model's thresholds and training metrics, logged."""
    thresholds, ranking = cutting_plane.fit_thresholds(client, dataset, plan, w, float(bias),
                                                       progress)
    progress.note(f"train: {len(dataset.meta.classes)} ranks, thresholds "
                  f"{' '.join(f'{t:.6g}' for t in thresholds)}; training rank "
                  f"accuracy {ranking['rank_accuracy']:.4f}, mean absolute rank "
                  f"error {ranking['mean_abs_rank_error']:.4f}, pairwise "
                  f"accuracy {ranking['pairwise_accuracy']:.4f}")
    return thresholds, ranking


def _model(p, dataset, class_weight, results: list, seconds: float, ranks, why) -> Model:
    """The model of a run: its params (the settings it trained with, as saved models have
    them) and summary (:func:`_combined`)."""
    meta = dataset.meta
    recorded = {**params.recorded(p), **results[0].options,
                **registry.SOLVERS[p.solver].recorded(p, meta)}
    if p.class_weight is not None:
        recorded["class_weight"] = {f"{c:g}": float(v)
                                    for c, v in zip(meta.classes, class_weight)}
    if meta.weighted:
        recorded["sample_weight"] = True
    if why:
        recorded["auto_choice"] = why
    w, summary = _combined(results, seconds)
    summary.update(n_rows=meta.n_rows, n_features=meta.n_features, dataset=dataset.url)
    if ranks is not None:
        summary.update({f"train_{k}": v for k, v in ranks[1].items()})
    oneclass = not registry.SOLVERS[p.solver].labels  # (w, ρ), classes ±1 (model.py)
    return Model(w=w, bias=float(p.bias), classes=ONECLASS_CLASSES if oneclass else meta.classes,
                 solver=p.solver, loss=p.loss, params=recorded, summary=summary,
                 n_features=meta.n_features,
                 thresholds=None if ranks is None else tuple(float(t) for t in ranks[0]),
                 rho=summary["rho"] if oneclass else None)


def _summary(result) -> dict:
    """A binary run's summary."""
    return {"rounds": result.rounds, "converged": result.converged,
            "primal_objective": result.primal_objective,
            "dual_objective": result.dual_objective, "duality_gap": result.duality_gap,
            "train_seconds": result.train_seconds, "history": result.history, **result.extra}


def _combined(results: list, seconds: float) -> tuple[np.ndarray, dict]:
    """w and summary of one binary run, or of K one-vs-rest runs: W (K × n [+1]) with
    problem k in row k, and a summary whose objectives are the sums of the K problems'
    (each is a separate problem), ``train_seconds`` the wall time of all of them, and
    ``per_class`` the K runs' own summaries."""
    if len(results) == 1:
        return results[0].w, _summary(results[0])
    per = [_summary(r) for r in results]
    summary = {"rounds": max(s["rounds"] for s in per),
               "converged": all(s["converged"] for s in per), "train_seconds": seconds,
               "per_class": per, "history": []}
    for key in ("primal_objective", "dual_objective", "duality_gap"):
        summary[key] = sum(s[key] for s in per)
    for key in ("nnz", "n_weights"):  # an L1-regularized model's sparsity, over the K
        if key in per[0]:
            summary[key] = sum(s[key] for s in per)
    return np.stack([r.w for r in results]), summary


def _weights_for(model: Model, n_features: int) -> np.ndarray:
    """The model's weights laid out for data with ``n_features`` columns (LIBLINEAR's rule:
    features the model has not seen weigh 0; a bias weight goes last)."""
    has_bias = model.bias >= 0
    w = np.zeros(model.w.shape[:-1] + (n_features + has_bias,))  # one row per class if K > 2
    k = min(n_features, model.n_features)
    w[..., :k] = model.w[..., :k]
    if has_bias:
        w[..., n_features] = model.w[..., model.n_features]
    return w


def check_task(model: Model, dataset: Dataset) -> None:
    """A regression model predicts a regression store and a classifier a store of classes:
    one ``ValueError`` line otherwise (the error and accuracy would compare unlike things)."""
    if model.is_regression != dataset.meta.regression:
        what, wants = (("regression", "regression store (ingest --regression)")
                       if model.is_regression else ("classification", "store of classes"))
        has = ("real-valued targets" if dataset.meta.regression
               else f"class labels {list(dataset.meta.classes)}")
        raise ValueError(f"{dataset.url}: a {what} model ({model.loss}) predicts a {wants}; "
                         f"this store has {has}")


def regression_sums(pred, target) -> np.ndarray:
    """LIBLINEAR's sums for the regression metrics (predict.c): Σ(p − t)², Σp, Σt, Σp², Σt²,
    Σpt, in float64."""
    p, t = np.asarray(pred, np.float64), np.asarray(target, np.float64)
    return np.array([np.sum((p - t) ** 2), p.sum(), t.sum(), p @ p, t @ t, p @ t])


def regression_metrics(n: int, sums) -> dict:
    """``mean_squared_error`` and ``squared_correlation`` from :func:`regression_sums` over
    n rows, by LIBLINEAR's formulas (predict.c; train.c's cross-validation the same): the
    squared correlation is (nΣpt − ΣpΣt)² / ((nΣp² − (Σp)²)(nΣt² − (Σt)²)), NaN where a
    variance is 0 (LIBLINEAR prints nan or inf there)."""
    error, sp, st, spp, stt, spt = sums
    num = (n * spt - sp * st) ** 2
    den = (n * spp - sp * sp) * (n * stt - st * st)
    return {"mean_squared_error": float(error / max(1, n)),
            "squared_correlation": float(num / den) if den > 0 else float("nan")}


def predict(data, model: Model, *, scheduler: str | None = None, n_workers: int | None = None,
            client=None, output=None, probability: bool = False,
            plan: cluster.WorkerPlan | None = None) -> dict:
    """Predict every row of a dataset; return accuracy and row count, optionally write labels.

    ``output`` (a path) receives one predicted label per line in the store's row order.
    With ``probability`` (a logistic model only, else ``ValueError``; LIBLINEAR's
    ``predict -b 1``), LIBLINEAR's format: a header ``labels l₁ … l_K`` and per row the
    label and the K probabilities in that order (:func:`distsvm.model.probabilities`); the
    labels are in the order of the model's LIBLINEAR export (binary: the class of positive
    decision values first).
    For a ranking model the labels are ranks, "accuracy" is the rank accuracy, and the
    result adds the mean absolute rank error and the pairwise ordering accuracy
    (:func:`distsvm.solvers.cutting_plane.ranking_metrics`; the scores of every row are
    then held on the coordinator, 12 bytes a row).  ``plan`` as :func:`train`'s.
    An ``output`` ending in .parquet or .zarr is written by tasks on the workers instead
    (:func:`distsvm.dask_io.write_predictions`: labels, decision values, probabilities).
    """
    from .dask_io import output_kind, write_predictions

    if output is not None and output_kind(output):
        dataset = as_dataset(data)
        return write_predictions(dataset, model, os.fspath(output), probability=probability,
                                 client=client, scheduler=scheduler, n_workers=n_workers,
                                 storage_options=dataset.storage_options)
    if probability:
        model.check_probability()
    dataset = as_dataset(data)
    meta = dataset.meta
    check_task(model, dataset)
    if model.is_regression:
        sums = np.zeros(6)  # LIBLINEAR's error, sump, sumt, sumpp, sumtt, sumpt (predict.c)
    w = _weights_for(model, meta.n_features)
    truth_values = np.asarray(meta.classes)
    classes = np.asarray(model.classes)
    correct = 0
    if model.is_ranking:
        unknown = sorted(set(meta.classes) - set(model.classes))
        if unknown:
            raise ValueError(f"{dataset.url}: labels {unknown} are not ranks of the model "
                             f"(its ranks: {list(model.classes)})")
        true_rank = np.searchsorted(classes, truth_values)  # store class index -> model rank
        scores, ranks = [], []
    with client_for(scheduler, n_workers, client) as c:
        plan = plan or cluster.plan(c, len(meta.blocks), n_workers, dataset)
        wf = c.scatter(w, broadcast=True, hash=False)
        futures = [c.submit(workers.blocks.block_decisions, dataset.url, info, wf, model.bias,
                            meta.n_features, plan.cache_bytes[plan.owners[b]],
                            dataset.storage_options, workers=[plan.owners[b]], pure=False)
                   for b, info in enumerate(meta.blocks)]
        with atomic_file(output, "w") if output else contextlib.nullcontext() as out:
            columns = liblinear_label_order(model)
            if out is not None and probability:
                out.write("labels" + "".join(f" {classes[k]:g}" for k in columns) + "\n")
            for f in futures:  # in block order; each block's result is released once used
                [(dv, y)] = cluster.gather(c, [f], plan.workers)
                f.release()
                if model.rho is not None:  # one-class: wᵀx − ρ > 0 is +1, as LIBLINEAR's
                    dv = dv - model.rho
                if model.is_regression:  # y: the targets
                    pred = dv
                    sums += regression_sums(dv, y)
                elif model.is_ranking:
                    pred = classes[model.ranks_of(dv)]
                    scores.append(dv)
                    ranks.append(true_rank[y])
                elif dv.ndim == 2:  # one-vs-rest: the class of the largest decision value
                    pred = classes[np.argmax(dv, axis=1)]
                else:
                    pred = classes[(dv > 0).astype(np.int64)]
                if not model.is_regression:
                    correct += int(np.sum(pred == truth_values[y]))
                if out is not None and probability:
                    out.writelines(f"{p:g}" + "".join(f" {v:g}" for v in row) + "\n"
                                   for p, row in zip(pred, probabilities(dv)[:, columns]))
                elif out is not None:
                    out.writelines(f"{p:g}\n" for p in pred)
    if model.is_regression:
        return {"n_rows": meta.n_rows, **regression_metrics(meta.n_rows, sums),
                "regression_sums": sums.tolist()}
    result = {"accuracy": correct / max(1, meta.n_rows), "n_rows": meta.n_rows}
    if model.is_ranking:
        metrics = cutting_plane.ranking_metrics(
            np.concatenate(scores) if scores else np.zeros(0),
            np.concatenate(ranks) if ranks else np.zeros(0, np.int64),
            np.asarray(model.thresholds), len(classes))
        result.update(ranks=list(model.classes), **metrics)
    return result


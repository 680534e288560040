"""Training jobs over a dataset, and the cluster they run on.

The CLI, the scikit-learn style estimators, job specs, the pipeline and model selection
(:mod:`distsvm.selection`) all train by :func:`train`, whose parameters
:mod:`distsvm.params` checks and whose solvers :mod:`distsvm.solvers.registry` lists (and
predict by :func:`distsvm.prediction.predict`, on the cluster of :func:`client_for`).
Objective scaling is LIBLINEAR's everywhere: ``½‖w‖² + C Σᵢ loss`` (scikit-learn's
LinearSVC uses the same C).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

import numpy as np

from distsvm.storage import Dataset
from distsvm.workers import losses

from . import anytime, cluster, params, resources
from .model import ONECLASS_CLASSES, Model
from .progress import Progress
from .solvers import cutting_plane, ovr, registry, resident


def as_dataset(data) -> Dataset:
    """``data``, or the store its path names, or a data file's (:mod:`distsvm.sources`:
    ingested beside it, or reused while it is unchanged)."""
    from .sources import dataset

    return data if isinstance(data, Dataset) else dataset(os.fspath(data))


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
    anytime.check(owner, p)
    dataset = as_dataset(data)
    progress = progress or Progress(quiet=True)
    why = None
    if p.solver not in registry.SOLVERS:  # "auto" (check_params refused the rest)
        solver, why = params.choose_solver(dataset, p.loss)
        progress.note(f"train: --solver auto picked {solver}: {why}")
        p = dataclasses.replace(p, solver=solver)
    p = params.check_solver(owner, p, dataset.meta.weighted, given=kwargs)
    dataset = params.for_task(p.loss, dataset)  # -s decides: labels as targets for SVR
    p, class_weight, multiclass = params.check_data(owner, p, dataset)
    meta = dataset.meta
    with client_for(scheduler, n_workers, client, progress) as c:
        deadline = None if p.time_budget is None else time.time() + p.time_budget
        resources.check_dataset(dataset, c)  # w and the blocks fit a worker, or one line
        cmeta = None
        if registry.SOLVERS[p.solver].reads == "columns":  # -s 5/6, pcd: built if missing
            from .columns import ensure_columns, say_where

            cmeta = ensure_columns(dataset, c, progress)
        plan = plan or cluster.plan(c, len(meta.blocks), n_workers, dataset)
        dataset, plan, settings = _anytime(c, p, dataset, plan, progress, deadline)
        meta = dataset.meta
        if not multiclass:
            p, why = primal_where_spread(p, dataset, plan, progress, why)
        progress.note(f"train: {p.solver} ({p.loss}) C={p.C:g} eps={p.eps:g} on {meta.n_rows} "
                      f"rows x {meta.n_features} features, {len(meta.blocks)} blocks, "
                      f"{len(plan.workers)} workers"
                      + (f", {len(meta.classes)} classes one-vs-rest" if multiclass else ""))
        if cmeta is not None:
            say_where(progress, p, plan, cmeta)
        start = time.perf_counter()
        with anytime.using(settings):
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
# ... and the fewest workers holding the store's shares for it to pay, 2 unless said here.
# -s 1 on 2 (2 x 512 MB, pypi-summaries): Newton on both 7.0-9.0 s, dual CD streamed through
# one (with its cache of informative rows) 4.6-5.1 s (docs/benchmarks.md); simulated on 4 and
# more, Newton 1.3-1.7x faster than dual CD on one worker holding it all; on 3 (not
# measured), its passes split three ways would make it about even (~4.7-6 s).  -s 7
# streamed (no such cache) ends farther from f* than LIBLINEAR (a9a: 10529.5725 against
# its 10529.5628-10529.5648): Newton on 2.
PRIMAL_OWNERS = {"squared_hinge": 3}


def primal_where_spread(p, dataset: Dataset, plan: cluster.WorkerPlan, progress: Progress,
                        why: str | None) -> tuple:
    """Sequential dual CD of a loss the primal Newton solver also minimizes (``-s 1``,
    ``-s 7``, ``-s 12``) on a store spread over several workers' memory (``PRIMAL_OWNERS``)
    that no one worker holds: the primal Newton solver instead, on every worker that holds a
    share.  Dual CD would stream the store through one worker, the others idle, and its
    parallel modes take several times the rounds (docs/benchmarks.md, "Scale out");
    Newton's iterations do not depend on the number of workers.  Its tolerance is
    ``PRIMAL_TOLERANCE``·eps, so that it ends at least as near the optimum as the dual
    solver.  Only with dual CD's own options at their defaults; (p, why) unchanged
    otherwise."""
    owners = len(resident.owners(plan))
    if (not params.takes(p.solver, "primal_switch", p.loss)
            or not params.transferable(dataclasses.replace(p, primal_switch=None), "newton")
            or owners < PRIMAL_OWNERS.get(p.loss, 2) or not resident.spread(dataset, plan)):
        return p, why
    tighter = PRIMAL_TOLERANCE.get(p.loss, 1e-3)
    why = (f"the store spans {owners} workers' memory and no one worker holds it: the "
           f"primal Newton solver (LIBLINEAR's -s {registry.liblinear_type('newton', p.loss)}, "
           f"the same objective) on all {owners}, eps={tighter * p.eps:g}, instead of "
           f"streaming it through one worker")
    progress.note(f"train: {why}")
    return dataclasses.replace(p, solver="newton", eps=tighter * p.eps, primal_switch=None), why


def _anytime(c, p, dataset: Dataset, plan: cluster.WorkerPlan, progress: Progress,
             deadline: float | None) -> tuple:
    """The training rows, their plan and the run's anytime settings (:mod:`distsvm.anytime`):
    the validation store, or ``validation_fraction`` of the rows held out by ``seed`` (the
    training view then the other rows, each block on its stored block's owner)."""
    meta = dataset.meta
    settings = anytime.Settings(n_iter_no_change=p.n_iter_no_change, tol=p.validation_tol,
                                deadline=deadline)
    if p.validation is None and p.validation_fraction is None:
        return dataset, plan, settings
    kind = _kind(p, meta)
    metric = anytime.metric_of(p, kind)
    if p.validation is not None:
        validation = anytime.Validation.of_store(c, p.validation, dataset.storage_options, metric,
                                                 meta.regression, bias=float(p.bias))
    else:
        train, held = anytime.holdout(c, dataset, p.validation_fraction, p.seed, plan)
        validation = anytime.Validation(c, held, anytime.view_plan(plan, plan.owners, held),
                                        metric, bias=float(p.bias))
        dataset, plan = train, anytime.view_plan(plan, plan.owners, train)
    if metric == "auc" and len(meta.classes) > 2 and registry.SOLVERS[p.solver].multiclass:
        raise ValueError("validation metric 'auc' scores binary problems (one-vs-rest's too), "
                         f"not solver {p.solver!r}'s multi-class model")
    v = validation.dataset.meta
    labels = {"one-class": {-1.0, 1.0}, "ranking": set(meta.classes)}.get(kind)
    if labels is not None and not set(v.classes) <= labels:
        odd = ", ".join(f"{c:g}" for c in sorted(set(v.classes) - labels))
        raise ValueError(f"{validation.dataset.url}: labels {odd} are "
                         + ("neither +1 (inlier) nor -1 (outlier), what a one-class model is "
                            "scored against" if kind == "one-class" else
                            "not ranks of the training store"))
    progress.note(f"train: validation set of {v.n_rows} rows"
                  + (f" ({p.validation})" if p.validation else
                     f" held out of the training store ({p.validation_fraction:g}, seed {p.seed})")
                  + f", scored by {metric} after each round")
    return dataset, plan, dataclasses.replace(settings, validation=validation)


def _kind(p, meta) -> str:
    """The kind of model ``p`` trains on a store of ``meta`` (:data:`distsvm.anytime.KINDS`)."""
    if not registry.SOLVERS[p.solver].labels:
        return "one-class"
    if p.objective == "ordinal":
        return "ranking"
    return "regression" if meta.regression else "classification"


def _problem(meta, k: int | None, multiclass_solver: bool, kind: str) -> dict:
    """How a validation task scores problem k (:func:`distsvm.workers.validation.block_scores`):
    class index k's rows against the rest (a binary store: index 1 against index 0), a
    multi-class W (``k`` None), a regression, a one-class model (+1 against −1; its solver
    sets each round's ρ, ``offset``) or a ranking model (its ranks, the store's labels)."""
    if kind == "one-class":
        return {"positive": 1.0, "negative": -1.0, "offset": 0.0}
    if meta.regression:
        return {"regression": True}
    classes = [float(c) for c in meta.classes]
    if kind == "ranking":
        return {"ranks": classes}
    if k is None or multiclass_solver:
        return {"classes": classes}
    return {"positive": classes[k], "negative": classes[0] if len(classes) == 2 else None}


def _say_where_held(progress: Progress, p, plan: cluster.WorkerPlan, held: tuple) -> None:
    """A dual solver run sequentially on blocks that several workers own trains on one of
    them (:func:`distsvm.solvers.resident.held_by_one`): say which and why, as the job's
    first line counts every worker."""
    view, one = held
    owners = resident.owners(one)
    if len(owners) != 1 or len(resident.owners(plan)) < 2:
        return
    if len(view.meta.blocks) == 1:
        progress.note(f"train: {p.solver} on one worker ({owners[0]}), whose memory holds the "
                      "store joined: each round visits every row in one random order, as "
                      "LIBLINEAR does")
        return
    parallel = params.takes(p.solver, "parallel", p.loss)
    progress.note(f"train: {p.solver} streams the store's {len(view.meta.blocks)} blocks through "
                  f"one worker ({owners[0]}), the others idle: no worker's memory holds the "
                  "store" + ("; --parallel line runs on every worker, in several times the "
                             'rounds (docs/benchmarks.md, "Scale out")' if parallel else ""))


def _solve(client, p, dataset, plan, class_weight, multiclass: bool, progress,
           checkpoint) -> list:
    """The result of the binary problem (or of a multi-class solver's one), or the K results
    of one-vs-rest — in one job where the solver runs them so (sequential dual CD), else
    problem by problem (:func:`distsvm.solvers.ovr.solve`) — each continued by the primal
    solver where ``primal_switch`` says so (:func:`_switch_to_primal`).  Each problem's C
    per class index comes from :func:`distsvm.workers.losses.class_costs`."""
    spec = registry.SOLVERS[p.solver]
    solver = spec.module()
    held = resident.hold(dataset, plan, p) if spec.joins else None
    if held is not None and p.parallel is None:
        _say_where_held(progress, p, plan, held)
    classes = dataset.meta.classes
    positives = range(len(classes)) if multiclass else [1]  # problem k: index k (+1) vs rest
    costs = {k: losses.class_costs(p.C, class_weight, k if multiclass else None)
             for k in positives}

    settings = anytime.current()
    kind = _kind(p, dataset.meta)

    def fit(k, plan_k, progress_k, checkpoint_k=checkpoint):
        with anytime.using(settings, problems=[_problem(dataset.meta, k, spec.multiclass, kind)]):
            return solver.solve(client, *(held or (dataset, plan_k)), p, positive=k,
                                cost=costs[k], progress=progress_k, checkpoint=checkpoint_k)

    if multiclass and spec.batches_ovr and p.parallel is None:  # K problems, one read a block
        with anytime.using(settings, problems=[_problem(dataset.meta, k, False, kind)
                                               for k in positives]):
            results = solver.solve_ovr(client, *(held or (dataset, plan)), p,
                                       costs=list(costs.values()), progress=progress,
                                       checkpoint=checkpoint)
    elif multiclass:
        results = ovr.solve(fit, classes, plan, progress, checkpoint)
    else:
        results = [fit(1, plan, progress)]
    if p.primal_switch is None:
        return results
    return [r if r.converged or not p.primal_switch <= r.rounds < p.max_rounds
            or r.extra.get("stopped_by") != "round limit"
            else _switch_to_primal(
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
    tighter = 1e-3 if p.loss in registry.REGRESSION_LOSSES else 0.1
    with anytime.using(anytime.current(),
                       problems=[_problem(dataset.meta, positive, False, _kind(p, dataset.meta))]):
        primal = registry.SOLVERS["newton"].module().solve(
            client, dataset, plan, dataclasses.replace(p, eps=tighter * p.eps, warm_start=dual.w,
                                                       max_rounds=p.max_rounds - dual.rounds),
            positive=positive, cost=cost, progress=progress, checkpoint=None)
    history = dual.history + [{**row, "round": dual.rounds + row["round"]}
                              for row in primal.history[1:]]
    result = dataclasses.replace(primal, rounds=dual.rounds + primal.rounds, history=history,
                                 train_seconds=dual.train_seconds + primal.train_seconds)
    metric = dual.extra.get("validation_metric")
    if metric is not None and (anytime.current().n_iter_no_change
                               or primal.extra["stopped_by"] == "time budget"):
        # early stopping or a spent budget: the best model of both (anytime training)
        name = f"validation_{metric}"
        if anytime.better(metric, dual.extra[name], primal.extra.get(name, np.nan)):
            result = dataclasses.replace(
                result, w=dual.w, extra={**primal.extra, **{k: dual.extra[k] for k in (
                    name, "best_round", "kept_duality_gap", "kept_model") if k in dual.extra}},
                primal_objective=dual.primal_objective, dual_objective=dual.dual_objective,
                duality_gap=dual.duality_gap)
        else:
            result.extra["best_round"] = dual.rounds + primal.extra["best_round"]
    return result


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
    if "stopped_by" in per[0]:  # anytime training: why the problems stopped (distinct, joined)
        summary["stopped_by"] = ", ".join(dict.fromkeys(s["stopped_by"] for s in per))
    return np.stack([r.w for r in results]), summary

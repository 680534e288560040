"""Training and prediction jobs over a dataset: the one place that validates parameters.

Both the CLI and the scikit-learn style estimators call :func:`check_params`
and :func:`train`, so a parameter means the same thing, and fails the same
way, everywhere.  Objective scaling is LIBLINEAR's everywhere:
``½‖w‖² + C Σᵢ loss`` (scikit-learn's LinearSVC uses the same C).
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
import os
import time

import numpy as np

import workers.blocks
from storage import Dataset, open_dataset

from . import cluster
from .model import Model, liblinear_label_order, probabilities
from .progress import Progress
from .solvers import alm, crammer_singer, cutting_plane, dcd, newton, ovr, pcd, resident

SOLVERS = ("dcd", "pcd", "cutting_plane", "alm", "newton", "crammer_singer", "auto")
LOSSES = ("hinge", "squared_hinge", "logistic", "lp", "crammer_singer")
# The losses each solver trains ("auto" picks a solver that trains the loss).
SOLVER_LOSSES = {"dcd": ("hinge", "squared_hinge", "logistic"), "pcd": pcd.LOSSES,
                 "cutting_plane": ("hinge",), "alm": ("hinge", "squared_hinge", "lp"),
                 "newton": newton.LOSSES, "crammer_singer": ("crammer_singer",)}
# SVM-ALM (solver "alm"): the exponent p of each loss; "lp" takes any p >= 1.
ALM_P = {"hinge": 1.0, "squared_hinge": 2.0}
ALM_METHODS = ("inexact", "exact")
# LIBLINEAR's -s codes that this version trains, as (solver, loss).
LIBLINEAR_TYPES = {0: ("newton", "logistic"), 1: ("dcd", "squared_hinge"),
                   2: ("newton", "squared_hinge"), 3: ("dcd", "hinge"),
                   4: ("crammer_singer", "crammer_singer"), 7: ("dcd", "logistic")}
# --solver auto takes the primal when rows outnumber features by this factor (l ≫ n).
AUTO_PRIMAL_RATIO = 50
# default stopping tolerance per solver: LIBLINEAR's eps for dcd and pcd (whose rule is
# relative to the gradient at w = 0); the paper's ε = 0.001 (precision of the average
# training loss) for the cutting-plane solver (Joachims 2006 §4.4); ‖∇obj‖ ≤ 0.01 for
# SVM-ALM, as Nie et al. 2014; LIBLINEAR's 0.01 for its Newton solver (-s 0, -s 2)
DEFAULT_EPS = {"dcd": 0.1, "pcd": 0.1, "auto": 0.1, "cutting_plane": 1e-3, "alm": 0.01,
               "newton": 0.01, "crammer_singer": 0.1}
# default round limit per solver: LIBLINEAR's max_iter, 100000 outer iterations for -s 4
# (Solver_MCSVM_CS; a round over one joined block is one of them, and news20 needs ~21000),
# 1000 for its dual CD (-s 1/3/7) and its Newton solvers
DEFAULT_MAX_ROUNDS = {"crammer_singer": 100000}
ROUND_LIMIT = 1000  # every other solver's
# solvers that take no class or instance weights (LIBLINEAR has no such solvers)
UNWEIGHTED = ("cutting_plane", "alm")
# solvers that start from a given w (train's warm_start: the C search, the pipeline)
WARM_START_SOLVERS = ("newton",)
# LIBLINEAR 2.40+'s -s 1 and -s 7 (train_one in linear.cpp): a problem whose dual CD has
# not converged after this many iterations continues with the primal Newton solver of the
# same loss (-s 2, -s 0) from the dual's w; train's ``primal_switch`` (the CLI's -s 1, -s 7)
LIBLINEAR_DUAL_ROUNDS = 300


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
                 inner_passes, gap_tol=0.0, objective="classification", c_perf=None) -> None:
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
    _check_real(owner, "gap_tol", gap_tol, 0.0, low_open=False)
    if not isinstance(bias, numbers.Real) or isinstance(bias, bool) or not np.isfinite(bias):
        raise ValueError(f"The 'bias' parameter of {owner} must be a finite float "
                         f"(< 0 for no bias feature). Got {bias!r} instead.")
    _check_int(owner, "max_iter", max_rounds, 1)
    _check_int(owner, "random_state", seed, 0)
    _check_int(owner, "inner_passes", inner_passes, 1)
    if gap_tol and solver not in ("dcd", "crammer_singer"):
        raise ValueError(f"The 'gap_tol' parameter of {owner} applies to solvers 'dcd' and "
                         f"'crammer_singer' only (their duality gaps are the certificates). "
                         f"Got solver {solver!r}.")
    if objective not in cutting_plane.OBJECTIVES or (objective != "classification"
                                                     and solver != "cutting_plane"):
        raise ValueError(f"The 'objective' parameter of {owner} must be one of "
                         f"{list(cutting_plane.OBJECTIVES)} ('ordinal' with the cutting_plane "
                         f"solver only). Got {objective!r} with solver {solver!r} instead.")
    if c_perf is not None:
        if solver != "cutting_plane":
            raise ValueError(f"The 'c_perf' parameter of {owner} (SVMperf's C) applies to "
                             f"the cutting_plane solver only; use C with solver {solver!r}")
        _check_real(owner, "c_perf", c_perf, 0.0)


def check_alm_params(owner: str, *, loss: str, p, method, mu0, rho, rtol) -> float:
    """Check the SVM-ALM parameters; return the loss exponent p."""
    if loss == "lp":
        if p is None:
            raise ValueError(f"The 'p' parameter of {owner} is required with loss 'lp'.")
        _check_real(owner, "p", p, 1.0, low_open=False)
    elif p is not None and float(p) != ALM_P[loss]:
        raise ValueError(f"The 'p' parameter of {owner} must be {ALM_P[loss]:g} (or None) with "
                         f"loss {loss!r}. Got {p!r} instead.")
    if method not in ALM_METHODS:
        raise ValueError(f"The 'method' parameter of {owner} must be one of "
                         f"{list(ALM_METHODS)}. Got {method!r} instead.")
    _check_real(owner, "mu0", mu0, 0.0)
    _check_real(owner, "rho", rho, 1.0, low_open=False)
    _check_real(owner, "rtol", rtol, 0.0, low_open=False)
    return float(p) if loss == "lp" else ALM_P[loss]


def class_costs(owner: str, class_weight, C: float, meta) -> np.ndarray:
    """C times each class's weight, in the store's class order (see :func:`train`)."""
    n = np.asarray(meta.class_counts, dtype=np.float64)
    if class_weight is None:
        return np.full(len(n), C)
    if isinstance(class_weight, str) and class_weight == "balanced":
        return C * n.sum() / (len(n) * np.maximum(n, 1))
    if not isinstance(class_weight, dict):
        raise ValueError(f"The 'class_weight' parameter of {owner} must be None, a dict or "
                         f"'balanced'. Got {class_weight!r} instead.")
    unknown = [k for k in class_weight if float(k) not in meta.classes]
    if unknown:
        raise ValueError(f"The 'class_weight' parameter of {owner} names labels {unknown} "
                         f"that are not classes of the data {list(meta.classes)}.")
    weights = {float(k): v for k, v in class_weight.items()}
    for k, v in weights.items():
        _check_real(owner, f"class_weight[{k:g}]", v, 0.0)
    return np.array([C * float(weights.get(c, 1.0)) for c in meta.classes])


def check_solver_options(owner: str, *, solver: str, meta, C: float, bias: float,
                         regularize_bias: bool, class_weight, warm_start):
    """Check the options some solvers do not take: -R and the warm start (solver "newton"
    only), class and instance weights (all but :data:`UNWEIGHTED`); return the per-class
    costs (:func:`class_costs`) and the warm start as float64 (or None)."""
    if not regularize_bias and (solver != "newton" or bias < 0):
        raise ValueError(f"regularize_bias=False (LIBLINEAR's -R) of {owner} needs solver "
                         f"'newton' and a bias feature (bias >= 0). Got solver {solver!r} and "
                         f"bias {bias!r}.")
    class_cost = class_costs(owner, class_weight, C, meta)
    if (class_weight is not None or meta.weighted) and solver in UNWEIGHTED:
        raise ValueError(f"Class and instance weights of {owner} are not taken by solver "
                         f"{solver!r} (nor by {', '.join(repr(u) for u in UNWEIGHTED)}: "
                         f"LIBLINEAR has no such solver). Got class_weight={class_weight!r} "
                         f"on a store {'with' if meta.weighted else 'without'} instance "
                         "weights.")
    if warm_start is not None:
        if solver not in WARM_START_SOLVERS:
            raise ValueError(f"The 'warm_start' parameter of {owner} belongs to solver(s) "
                             f"{list(WARM_START_SOLVERS)}. Got solver {solver!r}.")
        warm_start = np.asarray(warm_start, dtype=np.float64)
        dim = meta.n_features + (bias >= 0)
        if warm_start.shape != (dim,) or not np.all(np.isfinite(warm_start)):
            raise ValueError(f"The 'warm_start' parameter of {owner} must be {dim} finite "
                             f"weights (n_features + 1 with a bias). Got shape "
                             f"{warm_start.shape}.")
    return class_cost, warm_start


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
    if dataset.is_subset and loss in SOLVER_LOSSES["dcd"]:
        return "dcd", "a view of some row blocks (a fold) has no column view for pcd"
    if loss == "crammer_singer":
        return "crammer_singer", "only crammer_singer trains the crammer_singer loss"
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
          eps: float | None = None, bias: float = -1.0, max_rounds: int | None = None,
          seed: int = 0,
          inner_passes: int = 1, gap_tol: float = 0.0, objective: str = "classification",
          c_perf: float | None = None, p: float | None = None, method: str = "inexact",
          mu0: float = 0.01, rho: float = 1.02, rtol: float = 1e-6, pcd_mode: str = "exact",
          parallel: str | None = None, join_blocks: bool = True, regularize_bias: bool = True,
          warm_start=None, class_weight=None, scheduler: str | None = None,
          n_workers: int | None = None, primal_switch: int | None = None,
          client=None, progress: Progress | None = None, owner: str = "train",
          checkpoint=None, plan: cluster.WorkerPlan | None = None) -> Model:
    """Train a binary linear classifier (or a ranking model) on a dataset (or its URL) and
    return the model.

    Training stops when LIBLINEAR's rule holds for ``eps``, or, if ``gap_tol`` > 0, when
    the duality gap certifies the primal objective to within ``gap_tol`` relative.
    ``parallel="average"`` or ``"add"`` runs DCD as CoCoA / CoCoA+ across the workers
    (see :mod:`distsvm.solvers.dcd`).

    ``solver="alm"`` (SVM-ALM, :mod:`distsvm.solvers.alm`) minimizes
    ``½‖w‖² + C Σ max(0, 1 − y(wᵀx + b))ᵖ`` with an *unregularized* intercept b
    when ``bias >= 0`` (stored as a bias feature of value 1) and none when
    ``bias < 0``; ``p`` (loss "lp"), ``method``, ``mu0``, ``rho`` and ``rtol``
    are its parameters, ``eps`` bounds ‖∇obj‖ and ``max_rounds`` its iterations.

    ``join_blocks`` (sequential dual CD, ``-s 1/3/4/7``): where one worker's block cache
    holds the whole store, its rows are visited in one permutation per round, as
    LIBLINEAR's, with the rounds run on that worker; ``False`` keeps the block-wise visits
    of a store that does not fit (:func:`distsvm.solvers.resident.held_by_one`).

    ``regularize_bias=False`` (solver "newton", ``bias >= 0``) leaves the bias feature's
    weight out of ½‖w‖², as LIBLINEAR's ``-R``.

    ``class_weight`` (every solver but :data:`UNWEIGHTED`): None, ``{label: weight}``
    (missing labels weigh 1) or ``"balanced"`` (n_rows / (n_classes · rows of the class), as
    scikit-learn); row i costs Cᵢ = C · class_weight[yᵢ] · its instance weight if the store
    has them (LIBLINEAR's ``-wi`` and ``-W``); in one-vs-rest, problem k's rows of class k
    cost their weighted C and the others C (:func:`distsvm.solvers.ovr.problem_cost`).

    ``warm_start`` (solver "newton"): the initial w, n_features (+1 with a bias) values,
    e.g. a model's ``w`` for a nearby C; the stopping rule stays relative to ∇f(0).

    ``primal_switch`` (solver "dcd", loss squared_hinge or logistic): LIBLINEAR's fallback
    for ``-s 1`` and ``-s 7`` (:data:`LIBLINEAR_DUAL_ROUNDS`, 300 there) — a problem whose
    dual CD has not converged after ``primal_switch`` rounds continues with the primal
    Newton solver of the same loss (``-s 2``, ``-s 0``) from the dual's w, with LIBLINEAR's
    tolerance 0.1·eps and at most ``max_rounds`` iterations (:func:`_switch_to_primal`).
    Dual CD converges slowly when C·‖xᵢ‖² is large (unscaled features: on pendigits, values
    0–100, LIBLINEAR's own dual CD stops at its limit on every class and switches).

    ``eps`` defaults to :data:`DEFAULT_EPS` of the solver, ``max_rounds`` to
    :data:`DEFAULT_MAX_ROUNDS` (else :data:`ROUND_LIMIT`).  ``objective`` and ``c_perf``
    (SVMperf's C, replacing ``C``) are for the cutting-plane solver; see
    :mod:`distsvm.solvers.cutting_plane` for their meaning.  ``objective="ordinal"`` takes
    a store whose R ≥ 2 labels are ordered ranks and returns a ranking model (its
    thresholds fitted by :func:`distsvm.solvers.cutting_plane.fit_thresholds`).

    ``checkpoint`` (a :class:`distsvm.checkpoint.Checkpointer`) makes the run write
    checkpoints and continue from the latest one; every solver does, in one-vs-rest too
    (:func:`distsvm.solvers.dcd.solve_ovr` checkpoints its K problems together, the other
    solvers each problem in its own directory, :meth:`distsvm.checkpoint.Checkpointer.problem`).

    ``plan`` (a :class:`distsvm.cluster.WorkerPlan`, an owner per block of ``data``) replaces
    the one made by :func:`distsvm.cluster.plan` (cross-validation plans once for its folds).
    """
    eps = DEFAULT_EPS[solver] if solver in DEFAULT_EPS and eps is None else eps
    if max_rounds is None:
        max_rounds = DEFAULT_MAX_ROUNDS.get(solver, ROUND_LIMIT)
    check_params(owner, solver=solver, loss=loss, C=C, eps=eps, bias=bias,
                 max_rounds=max_rounds, seed=seed, inner_passes=inner_passes,
                 gap_tol=gap_tol, objective=objective, c_perf=c_perf)
    if parallel not in (None, "average", "add"):
        raise ValueError(f"The 'parallel' parameter of {owner} must be one of "
                         f"[None, 'average', 'add']. Got {parallel!r} instead.")
    if parallel is not None and (solver != "dcd" or loss == "logistic"):
        raise ValueError(f"The 'parallel' parameter of {owner} belongs to solver 'dcd' with "
                         "the hinge or squared_hinge loss.")
    alm_options = dict(method=method, mu0=mu0, rho=rho, rtol=rtol)
    if solver == "alm":
        p = check_alm_params(owner, loss=loss, p=p, **alm_options)
    elif p is not None or alm_options != dict(method="inexact", mu0=0.01, rho=1.02, rtol=1e-6):
        raise ValueError(f"The parameters p, method, mu0, rho and rtol of {owner} belong to "
                         f"solver 'alm'; solver {solver!r} does not take them.")
    if primal_switch is not None:
        _check_int(owner, "primal_switch", primal_switch, 1)
        if solver != "dcd" or loss not in newton.LOSSES:
            raise ValueError(f"The 'primal_switch' parameter of {owner} belongs to solver "
                             f"'dcd' with the loss {' or '.join(newton.LOSSES)} (the losses "
                             f"of the primal Newton solver). Got solver {solver!r}, loss "
                             f"{loss!r}.")
    if pcd_mode not in pcd.MODES:
        raise ValueError(f"The 'pcd_mode' parameter of {owner} must be one of "
                         f"{list(pcd.MODES)}. Got {pcd_mode!r} instead.")
    dataset = as_dataset(data)
    meta = dataset.meta
    class_cost, warm_start = check_solver_options(
        owner, solver=solver, meta=meta, C=float(C), bias=bias, regularize_bias=regularize_bias,
        class_weight=class_weight, warm_start=warm_start)
    if solver == "pcd" and dataset.is_subset:
        raise ValueError(f"The 'solver' parameter of {owner} cannot be 'pcd' on a view of some "
                         "row blocks (a cross-validation fold): pcd reads the store's column "
                         "view, which covers every row")
    if len(meta.classes) < 2:
        raise ValueError(f"{dataset.url}: {len(meta.classes)} class; a classifier needs labels "
                         "of at least two values")
    # one-vs-rest for K > 2 classes; Crammer–Singer is multi-class by itself
    multiclass = len(meta.classes) > 2 and objective != "ordinal" and solver != "crammer_singer"
    if multiclass and warm_start is not None:
        raise ValueError(f"The 'warm_start' parameter of {owner} takes one weight vector: "
                         f"binary problems only (the store has {len(meta.classes)} classes)")
    if c_perf is not None:
        C = cutting_plane.c_from_c_perf(c_perf, meta.class_counts, objective)
    progress = progress or Progress(quiet=True)
    why = None
    if solver == "auto":
        solver, why = choose_solver(dataset, loss)
        progress.note(f"train: --solver auto picked {solver}: {why}")
    with client_for(scheduler, n_workers, client, progress) as c:
        plan = plan or cluster.plan(c, len(meta.blocks), n_workers, dataset)
        progress.note(f"train: {solver} ({loss}) C={C:g} eps={eps:g} on {meta.n_rows} rows x "
                      f"{meta.n_features} features, {len(meta.blocks)} blocks, "
                      f"{len(plan.workers)} workers"
                      + (f", {len(meta.classes)} classes one-vs-rest" if multiclass else ""))
        dual_rounds = max_rounds if primal_switch is None else primal_switch  # dcd's limit
        # sequential dual CD visits all rows in one permutation where one worker holds them
        dual_data, dual_plan = dataset, plan
        if join_blocks and solver in ("dcd", "crammer_singer"):
            dual_data, dual_plan = (resident.held_by_one if parallel is None
                                    else resident.held_by_each)(dataset, plan)

        def fit(positive, plan, progress, checkpoint=checkpoint):
            """The binary problem of class index ``positive`` (+1) against the rest (with
            its own ``checkpoint`` in one-vs-rest, :func:`distsvm.solvers.ovr.solve`)."""
            # one-vs-rest as LIBLINEAR: class k's rows cost its weighted C, the rest C
            cost = ovr.problem_cost(class_cost, C, positive) if multiclass else class_cost
            if solver == "alm":
                return alm.solve(c, dataset, plan, p=p, C=float(C), eps=float(eps),
                                 bias=bias >= 0, max_iter=max_rounds, progress=progress,
                                 positive=positive, checkpoint=checkpoint, **alm_options)
            if solver == "newton":
                return newton.solve(c, dataset, plan, loss=loss, C=float(C), eps=float(eps),
                                    bias=float(bias), max_rounds=max_rounds,
                                    regularize_bias=bool(regularize_bias),
                                    warm_start=warm_start, class_cost=cost,
                                    progress=progress, positive=positive,
                                    checkpoint=checkpoint)
            if solver == "pcd":
                return pcd.solve(c, dataset, plan, loss=loss, C=float(C), eps=float(eps),
                                 bias=float(bias), max_rounds=max_rounds, seed=seed,
                                 mode=pcd_mode, progress=progress, checkpoint=checkpoint,
                                 positive=positive, class_cost=cost)
            if solver == "cutting_plane":
                return cutting_plane.solve(c, dataset, plan, C=float(C), eps=float(eps),
                                           bias=float(bias), max_rounds=max_rounds,
                                           objective=objective, progress=progress,
                                           checkpoint=checkpoint, positive=positive)
            if solver == "crammer_singer":
                return crammer_singer.solve(c, dual_data, dual_plan, C=float(C), eps=float(eps),
                                            bias=float(bias), max_rounds=max_rounds, seed=seed,
                                            gap_tol=float(gap_tol), progress=progress,
                                            class_cost=class_cost, checkpoint=checkpoint)
            return dcd.solve(c, dual_data, dual_plan, loss=loss, C=float(C), eps=float(eps),
                             bias=float(bias), max_rounds=dual_rounds, seed=seed,
                             inner_passes=inner_passes, gap_tol=float(gap_tol),
                             parallel=parallel, progress=progress, checkpoint=checkpoint,
                             positive=positive, class_cost=cost)
        start = time.perf_counter()
        if multiclass and solver == "dcd" and parallel is None:  # K problems, one read a block
            results = dcd.solve_ovr(c, dual_data, dual_plan, loss=loss, C=float(C),
                                    eps=float(eps),
                                    bias=float(bias), max_rounds=dual_rounds, seed=seed,
                                    inner_passes=inner_passes, gap_tol=float(gap_tol),
                                    progress=progress, checkpoint=checkpoint,
                                    class_cost=class_cost)
        elif multiclass:
            results = ovr.solve(fit, meta.classes, plan, progress, checkpoint)
        else:
            results = [fit(1, plan, progress)]
        if primal_switch is not None:
            results = [r if r.converged else _switch_to_primal(
                c, dataset, plan, r, k if multiclass else 1,
                ovr.problem_cost(class_cost, C, k) if multiclass else class_cost, loss=loss,
                C=float(C), eps=float(eps), bias=float(bias), max_rounds=max_rounds,
                progress=ovr.Tagged(progress, f"{meta.classes[k]:g}") if multiclass
                else progress) for k, r in enumerate(results)]
        seconds = time.perf_counter() - start
        if solver == "alm":
            return _alm_model(results, seconds, dataset, loss, C, eps, p, max_rounds)
        result = results[0]
        if solver == "cutting_plane" and objective == "ordinal":
            thresholds, ranking = cutting_plane.fit_thresholds(c, dataset, plan, result.w,
                                                               float(bias), progress)
            progress.note(f"train: {len(meta.classes)} ranks, thresholds "
                          f"{' '.join(f'{t:.6g}' for t in thresholds)}; training rank "
                          f"accuracy {ranking['rank_accuracy']:.4f}, mean absolute rank "
                          f"error {ranking['mean_abs_rank_error']:.4f}, pairwise "
                          f"accuracy {ranking['pairwise_accuracy']:.4f}")
    params = {"C": float(C), "eps": float(eps), "bias": float(bias), "max_rounds": max_rounds,
              "seed": seed, "inner_passes": inner_passes, "gap_tol": float(gap_tol)}
    if solver == "cutting_plane":
        params.update(objective=objective,
                      c_perf=cutting_plane.n_loss_terms(meta.class_counts, objective) * C / 100)
    if solver == "pcd":
        params["pcd_mode"] = pcd_mode
    if not regularize_bias:
        params["regularize_bias"] = False
    if class_weight is not None:
        params["class_weight"] = {f"{c:g}": float(v) / C for c, v in zip(meta.classes, class_cost)}
    if meta.weighted:
        params["sample_weight"] = True
    if parallel is not None:
        params["parallel"] = parallel
    if primal_switch is not None:
        params["primal_switch"] = primal_switch
    if why:
        params["auto_choice"] = why
    w, summary = _combined(results, _summary, seconds)
    summary.update(n_rows=meta.n_rows, n_features=meta.n_features, dataset=dataset.url)
    ranked = solver == "cutting_plane" and objective == "ordinal"
    if ranked:
        summary.update({f"train_{k}": v for k, v in ranking.items()})
    return Model(w=w, bias=float(bias), classes=meta.classes, solver=solver, loss=loss,
                 params=params, summary=summary, n_features=meta.n_features,
                 thresholds=tuple(float(t) for t in thresholds) if ranked else None)


def _switch_to_primal(client, dataset, plan, dual, positive: int, class_cost, *, loss: str,
                      C: float, eps: float, bias: float, max_rounds: int, progress):
    """LIBLINEAR's switch (``train_one``, linear.cpp, since 2.40) for a dual CD result
    ``dual`` that stopped at its round limit: the primal Newton solver of the same loss from
    its w, stopping at 0.1·eps (LIBLINEAR: "primal_solver_tol obtained from eps for dual may
    be too loose").  The result is Newton's, its rounds and history after the dual's."""
    s = 2 if loss == "squared_hinge" else 0
    progress.note(f"dcd reached {dual.rounds} rounds without converging: switching to the "
                  f"primal Newton solver (LIBLINEAR's -s {s})")
    primal = newton.solve(client, dataset, plan, loss=loss, C=C, eps=0.1 * eps, bias=bias,
                          max_rounds=max_rounds, warm_start=dual.w, class_cost=class_cost,
                          progress=progress, positive=positive)
    history = dual.history + [{**row, "round": dual.rounds + row["round"]}
                              for row in primal.history[1:]]
    return dataclasses.replace(primal, rounds=dual.rounds + primal.rounds, history=history,
                               train_seconds=dual.train_seconds + primal.train_seconds)


def _summary(result) -> dict:
    """A binary run's summary (DCD, PCD, cutting plane)."""
    return {"rounds": result.rounds, "converged": result.converged,
            "primal_objective": result.primal_objective,
            "dual_objective": result.dual_objective, "duality_gap": result.duality_gap,
            "train_seconds": result.train_seconds, "history": result.history}


def _alm_summary(result) -> dict:
    return {"rounds": result.iterations, "converged": result.converged,
            "primal_objective": result.objective, "grad_norm": result.grad_norm,
            "passes": result.passes, "train_seconds": result.train_seconds,
            "history": result.history}


def _combined(results: list, summarize, seconds: float) -> tuple[np.ndarray, dict]:
    """w and summary of one binary run, or of K one-vs-rest runs: W (K × n [+1]) with
    problem k in row k, and a summary whose objectives are the sums of the K problems'
    (each is a separate problem), ``train_seconds`` the wall time of all of them, and
    ``per_class`` the K runs' own summaries."""
    if len(results) == 1:
        return results[0].w, summarize(results[0])
    per = [summarize(r) for r in results]
    summary = {"rounds": max(s["rounds"] for s in per),
               "converged": all(s["converged"] for s in per), "train_seconds": seconds,
               "per_class": per, "history": []}
    for key in ("primal_objective", "dual_objective", "duality_gap"):
        if key in per[0]:
            summary[key] = sum(s[key] for s in per)
    return np.stack([r.w for r in results]), summary


def _alm_model(results, seconds, dataset, loss, C, eps, p, max_rounds) -> Model:
    """The model of SVM-ALM runs: the intercept b is the weight of a bias feature of value 1."""
    meta = dataset.meta
    bias = 1.0 if results[0].w.shape[-1] > meta.n_features else -1.0
    params = {"C": float(C), "eps": float(eps), "bias": bias, "max_rounds": max_rounds,
              "p": p, **results[0].options}
    w, summary = _combined(results, _alm_summary, seconds)
    summary.update(n_rows=meta.n_rows, n_features=meta.n_features, dataset=dataset.url)
    return Model(w=w, bias=bias, classes=meta.classes, solver="alm", loss=loss,
                 params=params, summary=summary, n_features=meta.n_features)


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
    """
    if probability:
        model.check_probability()
    dataset = as_dataset(data)
    meta = dataset.meta
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
        with open(output, "w") if output else contextlib.nullcontext() as out:
            columns = liblinear_label_order(model)
            if out is not None and probability:
                out.write("labels" + "".join(f" {classes[k]:g}" for k in columns) + "\n")
            for f in futures:  # in block order; each block's result is released once used
                [(dv, y)] = cluster.gather(c, [f], plan.workers)
                f.release()
                if model.is_ranking:
                    pred = classes[model.ranks_of(dv)]
                    scores.append(dv)
                    ranks.append(true_rank[y])
                elif dv.ndim == 2:  # one-vs-rest: the class of the largest decision value
                    pred = classes[np.argmax(dv, axis=1)]
                else:
                    pred = classes[(dv > 0).astype(np.int64)]
                correct += int(np.sum(pred == truth_values[y]))
                if out is not None and probability:
                    out.writelines(f"{p:g}" + "".join(f" {v:g}" for v in row) + "\n"
                                   for p, row in zip(pred, probabilities(dv)[:, columns]))
                elif out is not None:
                    out.writelines(f"{p:g}\n" for p in pred)
    result = {"accuracy": correct / max(1, meta.n_rows), "n_rows": meta.n_rows}
    if model.is_ranking:
        metrics = cutting_plane.ranking_metrics(
            np.concatenate(scores) if scores else np.zeros(0),
            np.concatenate(ranks) if ranks else np.zeros(0, np.int64),
            np.asarray(model.thresholds), len(classes))
        result.update(ranks=list(model.classes), **metrics)
    return result


# Model selection (LIBLINEAR -v and -C): folds are rows, as LIBLINEAR's; see distsvm/selection.py.
from .selection import cross_validate, find_c  # noqa: E402, F401  (it calls train and predict)

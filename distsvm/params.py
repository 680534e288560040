"""Training parameters: their defaults, their checks, the class weights — once for every front end.

The CLI, the estimators, job specs, the pipeline and model selection all train through
:func:`distsvm.jobs.train`, whose parameters are :class:`Params`; they are checked here, in
scikit-learn's wording ("The 'C' parameter of LinearSVC must be a float in the range (0,
inf). Got -1 instead."), so a parameter means the same thing, and fails the same way,
everywhere.  Which solver takes which option is the registry's
(:mod:`distsvm.solvers.registry`).  One name per concept: the stopping tolerance is
``eps`` (LIBLINEAR's), the round limit ``max_rounds``, the seed ``seed``; only the
scikit-learn estimators say ``tol``, ``max_iter`` and ``random_state``, and pass ``names``
so that their messages do too.  Objective scaling is LIBLINEAR's everywhere,
``½‖w‖² + Σᵢ Cᵢ · loss``, row i's cost Cᵢ being C · its class weight · its instance weight
(the class weights here, :func:`class_weights`; the costs in :mod:`workers.losses`).
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from .solvers import registry

# The values of the options that take one of a few (the CLI's and the job schema's choices).
CHOICES = {"objective": ("classification", "ordinal"), "method": ("inexact", "exact"),
           "pcd_mode": ("exact", "parallel"), "parallel": (None, "average", "add", "line")}
# SVM-ALM (solver "alm"): the exponent p of each loss; "lp" takes any p >= 1.
ALM_P = {"hinge": 1.0, "squared_hinge": 2.0}
ALM_OPTIONS = ("p", "method", "mu0", "rho", "rtol")  # the registry's option "alm"
# Why an option (a key of Solver.options) given to a solver that does not take it is refused.
REFUSALS = {
    "gap_tol": "The 'gap_tol' parameter of {owner} applies to solvers {takers} only (their "
               "duality gaps are the certificates). Got solver {solver!r}.",
    "objective": "The 'objective' parameter of {owner} must be one of {choices} ('ordinal' "
                 "with the {bare} solver only). Got {value!r} with solver {solver!r} instead.",
    "c_perf": "The 'c_perf' parameter of {owner} (SVMperf's C) applies to the {bare} solver "
              "only; use C with solver {solver!r}",
    "parallel": "The 'parallel' parameter of {owner} belongs to solver {takers} with the "
                "{losses} loss.",
    "alm": "The parameters p, method, mu0, rho and rtol of {owner} belong to solver {takers}; "
           "solver {solver!r} does not take them.",
    "primal_switch": "The 'primal_switch' parameter of {owner} belongs to solver {takers} with "
                     "the loss {losses} (the losses of the primal Newton solver). Got solver "
                     "{solver!r}, loss {loss!r}.",
    "regularize_bias": "The 'regularize_bias' parameter of {owner} (False: LIBLINEAR's -R) "
                       "belongs to solver(s) {takers}, with a bias feature (bias >= 0). Got "
                       "solver {solver!r} and bias {bias!r}.",
    "warm_start": "The 'warm_start' parameter of {owner} belongs to solver(s) {listed}. Got "
                  "solver {solver!r}.",
    "epsilon": "The 'epsilon' parameter of {owner} (LIBLINEAR's -p) is the epsilon of the "
               "epsilon-insensitive losses of SVR ({losses}; solver {takers}). Got solver "
               "{solver!r}, loss {loss!r}.",
    "weights": "Class and instance weights of {owner} are not taken by solver {solver!r} "
               "(LIBLINEAR has no such solver; {takers} take them). Got class_weight={value!r} "
               "on a store {stored} instance weights.",
    "nu": "The 'nu' parameter of {owner} belongs to solver {takers} (LIBLINEAR's -n of "
          "-s 21). Got solver {solver!r}.",
    "inner_passes": "The 'inner_passes' parameter of {owner} belongs to solver(s) {takers}. "
                    "Got solver {solver!r}.",
    "join_blocks": "The 'join_blocks' parameter of {owner} belongs to solver(s) {takers}. Got "
                   "solver {solver!r}.",
    "pcd_mode": "The 'pcd_mode' parameter of {owner} belongs to solver(s) {takers}. Got "
                "solver {solver!r}.",
}
# The option of REFUSALS each Params field is (the others are the fields' own names);
# "seed" is no option: every solver's front end passes it, and it also draws the folds.
OPTION_OF = {"class_weight": "weights", **{f: "alm" for f in ALM_OPTIONS}}


@dataclasses.dataclass(frozen=True)
class Params:
    """The training parameters of :func:`distsvm.jobs.train` (a job spec's ``solver``).

    ``solver`` a name of :data:`distsvm.solvers.registry.SOLVERS` or "auto"; ``loss`` one
    it trains; ``eps`` the stopping tolerance (None: the solver's default); ``bias`` a bias
    feature of that value (< 0: none; SVM-ALM: an unregularized intercept if ≥ 0);
    ``gap_tol`` > 0 also stops once the duality gap certifies the primal to that relative
    accuracy.  The other options belong to some solvers (the registry's ``options``):

    * ``class_weight``: None, ``{label: weight}`` (missing labels weigh 1) or "balanced"
      (n_rows / (n_classes · rows of the class), as scikit-learn); row i costs
      Cᵢ = C · class_weight[yᵢ] · its instance weight if the store has them (LIBLINEAR's
      ``-wi`` and ``-W``); in one-vs-rest, problem k's rows of class k cost their weighted C
      and the others C (:func:`workers.losses.class_costs`).
    * ``parallel`` "average" or "add": DCD as CoCoA / CoCoA+ across the workers;
      ``inner_passes`` DCD's passes over a block per visit; ``join_blocks`` (sequential dual
      CD): one permutation of all rows per round where one worker's cache holds the store.
    * ``primal_switch`` (dcd, the losses of newton): LIBLINEAR's fallback for ``-s 1``,
      ``-s 7`` and ``-s 12`` (:data:`~distsvm.solvers.registry.LIBLINEAR_DUAL_ROUNDS`) — a
      problem whose dual CD has not converged after that many rounds continues with the
      primal Newton solver of the same loss from the dual's w, at 0.1·eps (SVR: 0.001·eps)
      and ``max_rounds`` iterations.
    * ``regularize_bias=False`` (newton, ``bias >= 0``): LIBLINEAR's ``-R``;
      ``warm_start`` (newton): the initial w, n_features (+1 with a bias) values.
    * ``objective`` ("ordinal": a ranking model) and ``c_perf`` (SVMperf's C, replacing C):
      the cutting plane's; ``pcd_mode``: primal CD's and l1's; ``p``, ``method``, ``mu0``, ``rho``,
      ``rtol``: SVM-ALM's (:mod:`distsvm.solvers.alm`).
    * ``epsilon`` (the SVR losses, :data:`~distsvm.solvers.registry.REGRESSION_LOSSES`): the
      half-width of the ε-insensitive tube, LIBLINEAR's ``-p`` (default 0.1).
    * ``nu`` (oneclass, LIBLINEAR's ``-n`` of ``-s 21``): the one-class SVM's ν in (0, 1]
      (:mod:`distsvm.solvers.oneclass`).
    """

    solver: str = "dcd"
    loss: str = "squared_hinge"
    C: float = 1.0
    eps: float | None = None
    bias: float = -1.0
    max_rounds: int | None = None  # None: the solver's (registry)
    seed: int = 0
    inner_passes: int = 1
    gap_tol: float = 0.0
    objective: str = "classification"
    c_perf: float | None = None
    p: float | None = None
    method: str = "inexact"
    mu0: float = 0.01
    rho: float = 1.02
    rtol: float = 1e-6
    pcd_mode: str = "exact"
    parallel: str | None = None
    join_blocks: bool = True
    regularize_bias: bool = True
    warm_start: object = None
    class_weight: object = None
    primal_switch: int | None = None
    epsilon: float = 0.1  # the ε of the SVR losses (LIBLINEAR's -p, scikit-learn's epsilon)
    nu: float = 0.5  # one-class SVM's ν (LIBLINEAR's -n): 0 < ν ≤ 1


DEFAULTS = Params()


def check_real(owner, name, value, low, high=np.inf, low_open=True):
    """A finite real in (low, high] (``low_open``) or [low, high]."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        hi = "inf" if high == np.inf else f"{high:g}"
        raise ValueError(f"The '{name}' parameter of {owner} must be a float in the range "
                         f"{bracket}{low:g}, {hi}{')' if high == np.inf else ']'}. "
                         f"Got {value!r} instead.")


def check_int(owner, name, value, low, high=None):
    """An int ≥ low (and ≤ high)."""
    if (not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low
            or (high is not None and value > high)):
        raise ValueError(f"The '{name}' parameter of {owner} must be an int in the range "
                         f"[{low}, {'inf)' if high is None else f'{high}]'}. Got {value!r} "
                         "instead.")


def check_choice(owner, name, value, choices):
    """One of ``choices``."""
    if value not in choices:
        raise ValueError(f"The '{name}' parameter of {owner} must be one of {list(choices)}. "
                         f"Got {value!r} instead.")


def check_params(owner: str, p: Params, names: dict | None = None) -> None:
    """The checks that need neither the solver's entry nor the data; ``names`` renames
    parameters in the messages (the estimators' ``tol`` for ``eps``)."""
    check_choice(owner, "solver", p.solver, registry.choices())
    check_choice(owner, "loss", p.loss, registry.LOSSES)
    check_real(owner, "C", p.C, 0.0)
    check_real(owner, "gap_tol", p.gap_tol, 0.0, low_open=False)
    if not isinstance(p.bias, numbers.Real) or isinstance(p.bias, bool) \
            or not np.isfinite(p.bias):
        raise ValueError(f"The 'bias' parameter of {owner} must be a finite float "
                         f"(< 0 for no bias feature). Got {p.bias!r} instead.")
    if p.max_rounds is not None:
        check_int(owner, _named(names, "max_rounds"), p.max_rounds, 1)
    check_int(owner, _named(names, "seed"), p.seed, 0)
    check_int(owner, "inner_passes", p.inner_passes, 1)
    for option, choices in CHOICES.items():
        check_choice(owner, option, getattr(p, option), choices)
    if p.primal_switch is not None:
        check_int(owner, "primal_switch", p.primal_switch, 1)
    if p.c_perf is not None:
        check_real(owner, "c_perf", p.c_perf, 0.0)
    check_real(owner, "epsilon", p.epsilon, 0.0, low_open=False)
    check_real(owner, "nu", p.nu, 0.0, 1.0)


def _named(names: dict | None, key: str) -> str:
    return (names or {}).get(key, key)


def _takers(option: str) -> list[registry.Solver]:
    return [s for s in registry.SOLVERS.values() if option in s.options]


def _phrase(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if not words:
        return "none"
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _refuse(owner: str, option: str, p: Params, weighted: bool = False):
    """Raise the refusal of ``option`` (:data:`REFUSALS`)."""
    takers = _takers(option)
    losses = dict.fromkeys(loss for s in takers for loss in (s.options[option] or s.losses))
    raise ValueError(REFUSALS[option].format(
        owner=owner, solver=p.solver, loss=p.loss, bias=p.bias,
        value=p.class_weight if option == "weights" else getattr(p, option, None),
        takers=_phrase([repr(s.name) for s in takers]), bare=_phrase([s.name for s in takers]),
        listed=[s.name for s in takers], losses=" or ".join(losses),
        choices=list(CHOICES["objective"]), stored="with" if weighted else "without"))


def _given(option: str, p: Params, weighted: bool, given=()) -> bool:
    """Whether ``option`` is given: named in ``given`` (the keyword arguments passed) with
    a value, even its default (``nu=0.5`` to a solver without ν is refused, not ignored),
    or set to other than its default; for "weights", also a store with instance weights."""
    if option == "weights" and weighted:
        return True
    fields = [f for f in vars(DEFAULTS) if OPTION_OF.get(f, f) == option]
    for f in fields:
        value, default = getattr(p, f), getattr(DEFAULTS, f)
        if (f in given and value is not None) or (
                (value is not None) if default is None else (value != default)):
            return True
    return False


def check_solver(owner: str, p: Params, weighted: bool = False,
                 names: dict | None = None, given=()) -> Params:
    """The checks of a registered solver (not "auto"): its loss, its options (those it does
    not take refused, :data:`REFUSALS`, whether set or only named in ``given``), SVM-ALM's
    parameters; ``weighted``: the store has instance weights.  Returns ``p`` with ``eps``
    and ``max_rounds`` (default: the solver's), SVM-ALM's ``p`` and intercept (``bias`` ±1)
    settled."""
    spec = registry.get(p.solver, owner)
    if p.loss not in spec.losses:
        raise ValueError(f"The 'loss' parameter of {owner} must be one of {list(spec.losses)} "
                         f"with solver={p.solver!r}. Got {p.loss!r} instead.")
    p = dataclasses.replace(p, eps=spec.default_eps(p.loss) if p.eps is None else p.eps,
                            max_rounds=p.max_rounds or spec.max_rounds)
    check_real(owner, _named(names, "eps"), p.eps, 0.0)
    for option in REFUSALS:
        if _given(option, p, weighted, given) and not spec.takes(option, p.loss):
            _refuse(owner, option, p, weighted)
    if not p.regularize_bias and p.bias < 0:
        _refuse(owner, "regularize_bias", p)
    if p.bias >= 0 and not spec.bias_feature:  # LIBLINEAR's check_parameter for -s 21
        raise ValueError(f"The 'bias' parameter of {owner} must be < 0 (no bias feature) "
                         f"with solver {p.solver!r}, as LIBLINEAR's -s 21. Got {p.bias!r} "
                         "instead.")
    if spec.takes("alm"):
        p = dataclasses.replace(p, p=check_alm(owner, p),
                                bias=1.0 if p.bias >= 0 else -1.0)  # an intercept, or none
    return p


def check_alm(owner: str, p: Params) -> float:
    """Check SVM-ALM's parameters; return the loss exponent p."""
    if p.loss == "lp":
        if p.p is None:
            raise ValueError(f"The 'p' parameter of {owner} is required with loss 'lp'.")
        check_real(owner, "p", p.p, 1.0, low_open=False)
    elif p.p is not None and float(p.p) != ALM_P[p.loss]:
        raise ValueError(f"The 'p' parameter of {owner} must be {ALM_P[p.loss]:g} (or None) "
                         f"with loss {p.loss!r}. Got {p.p!r} instead.")
    check_real(owner, "mu0", p.mu0, 0.0)
    check_real(owner, "rho", p.rho, 1.0, low_open=False)
    check_real(owner, "rtol", p.rtol, 0.0, low_open=False)
    return float(p.p) if p.loss == "lp" else ALM_P[p.loss]


def check_data(owner: str, p: Params, dataset) -> tuple[Params, np.ndarray, bool]:
    """The checks against the store: its classes, the warm start's length, a column-view
    solver on a fold or on a store without a column view.  Returns ``p`` with C settled
    (from ``c_perf``), the weight of each class index (:func:`class_weights`) and whether
    the classes train one-vs-rest."""
    spec = registry.SOLVERS[p.solver]
    meta = dataset.meta
    if spec.reads == "columns" and dataset.is_subset:
        raise ValueError(f"The 'solver' parameter of {owner} cannot be {p.solver!r} on a view "
                         "of some row blocks (a cross-validation fold): it reads the store's "
                         "column view, which covers every row")
    if spec.reads == "columns":  # before a cluster starts: the store has one (one line if not)
        from storage.columns import read_columns_meta

        read_columns_meta(dataset)
    if spec.labels:
        check_task(p, dataset)
    if meta.regression:
        if p.class_weight is not None:
            raise ValueError(f"The 'class_weight' parameter of {owner} needs classes; "
                             f"{dataset.url} is a regression store (instance weights apply)")
    elif len(meta.classes) < 2 and spec.labels:
        raise ValueError(f"{dataset.url}: one class (label {meta.classes[0]:g}); a classifier "
                         "needs labels of at least two values (the one-class SVM, -s 21, "
                         "trains on one)")
    multiclass = (len(meta.classes) > 2 and p.objective != "ordinal" and not spec.multiclass
                  and spec.labels)
    if p.warm_start is not None:
        warm = np.asarray(p.warm_start, dtype=np.float64)
        dim = meta.n_features + (p.bias >= 0)
        if warm.shape != (dim,) or not np.all(np.isfinite(warm)):
            raise ValueError(f"The 'warm_start' parameter of {owner} must be {dim} finite "
                             f"weights (n_features + 1 with a bias). Got shape {warm.shape}.")
        if multiclass:
            raise ValueError(f"The 'warm_start' parameter of {owner} takes one weight vector: "
                             f"binary problems only (the store has {len(meta.classes)} "
                             "classes)")
        p = dataclasses.replace(p, warm_start=warm)
    if p.c_perf is not None:
        from .solvers.cutting_plane import c_from_c_perf

        p = dataclasses.replace(p, C=c_from_c_perf(p.c_perf, meta.class_counts, p.objective))
    return p, class_weights(owner, p.class_weight, meta), multiclass


def check_task(p: Params, dataset) -> None:
    """A regression loss needs a regression store and any other loss a store of classes:
    one clear ``ValueError`` otherwise (a classifier must never threshold real targets)."""
    regression = p.loss in registry.REGRESSION_LOSSES
    if regression == dataset.meta.regression:
        return
    code = registry.liblinear_type(p.solver, p.loss)
    what = f"-s {code}" if code is not None else f"solver {p.solver!r} with loss {p.loss!r}"
    if regression:
        raise ValueError(f"{what} needs a regression store (ingest --regression); "
                         f"{dataset.url} has class labels {list(dataset.meta.classes)}")
    svr = [f"-s {c}" for c, (_, loss) in registry.LIBLINEAR_TYPES.items()
           if loss in registry.REGRESSION_LOSSES]
    raise ValueError(f"{what} needs a store of class labels; {dataset.url} is a regression "
                     f"store (real-valued targets): train an SVR loss "
                     f"({', '.join(registry.REGRESSION_LOSSES)}; {', '.join(svr)}) on it")


def class_weights(owner: str, class_weight, meta) -> np.ndarray:
    """Each class's weight (:class:`Params`' ``class_weight``), in the store's class order;
    a regression store's rows all have class index 0: ``[1.0]``.  C multiplies them in
    :func:`workers.losses.class_costs`."""
    if meta.regression:
        return np.ones(1)
    n = np.asarray(meta.class_counts, dtype=np.float64)
    if class_weight is None:
        return np.ones(len(n))
    if isinstance(class_weight, str) and class_weight == "balanced":
        return n.sum() / (len(n) * np.maximum(n, 1))
    if not isinstance(class_weight, dict):
        raise ValueError(f"The 'class_weight' parameter of {owner} must be None, a dict or "
                         f"'balanced'. Got {class_weight!r} instead.")
    unknown = [k for k in class_weight if float(k) not in meta.classes]
    if unknown:
        raise ValueError(f"The 'class_weight' parameter of {owner} names labels {unknown} "
                         f"that are not classes of the data {list(meta.classes)}.")
    weights = {float(k): v for k, v in class_weight.items()}
    for k, v in weights.items():
        check_real(owner, f"class_weight[{k:g}]", v, 0.0)
    return np.array([float(weights.get(c, 1.0)) for c in meta.classes])


def check_kwargs(owner: str, kwargs: dict, dataset=None, regression: bool | None = None,
                 names: dict | None = None) -> Params:
    """Every check of :func:`distsvm.jobs.train`'s keyword arguments ``kwargs`` that can be
    made before a cluster starts — the front ends' one pass (CLI, job and pipeline specs):
    the values, the solver's options (an option it does not take refused even at its
    default, since ``kwargs`` names it), and the data: against ``dataset`` where it exists,
    else against the task ``regression`` (a pipeline's first run).  Returns the checked
    Params (``solver`` "auto" resolved where ``dataset`` is given)."""
    from . import jobs

    p = Params(**kwargs)
    check_params(owner, p, names)
    if p.solver not in registry.SOLVERS and dataset is not None:  # "auto"
        p = dataclasses.replace(p, solver=jobs.choose_solver(dataset, p.loss)[0])
    if p.solver not in registry.SOLVERS:
        return p
    p = check_solver(owner, p, dataset.meta.weighted if dataset is not None else False, names,
                     given=kwargs)
    if dataset is not None:
        check_data(owner, p, dataset)
    elif regression is not None and registry.SOLVERS[p.solver].labels \
            and (p.loss in registry.REGRESSION_LOSSES) != regression:
        raise ValueError(f"The 'loss' parameter of {owner} must be "
                         + ("an SVR loss" if regression else "a loss of classes")
                         + f" ({'regression' if regression else 'classification'} store). "
                         f"Got {p.loss!r} instead.")
    return p


# ---------------------------------------------------------------- settings
# The values of commands and specs that are not training parameters — the cluster's size,
# block sizes, waits, an ingest's seed and feature count, folds — by one name each, checked
# by check_settings for the CLI's options and the job and pipeline specs' keys alike
# (``names`` spells them as the front end does: "--block-mb", "ingest.block_mb").
SETTINGS = {  # name: (int or float, lowest, lowest excluded)
    "workers": (int, 1, False), "block_rows": (int, 1, False), "block_mb": (float, 0.0, True),
    "lock_timeout": (float, 0.0, False), "memory_mb": (float, 0.0, True),
    "n_features": (int, 1, False), "seed": (int, 0, False), "n_folds": (int, 2, False),
    "concurrent_folds": (int, 1, False), "every": (int, 1, False), "keep": (int, 1, False),
}
LOCAL_WORKERS_PER_CORE = 4  # a cluster started on this machine: more processes only queue


def max_local_workers() -> int:
    """The most worker processes a cluster started on this machine may have: more than
    :data:`LOCAL_WORKERS_PER_CORE` a core only queue for the cores, each taking a worker's
    memory (and a million of them never start: the command hung)."""
    import os

    return LOCAL_WORKERS_PER_CORE * (os.cpu_count() or 1)


def check_settings(owner: str, values: dict, names: dict | None = None,
                   local: bool = True) -> None:
    """Each of ``values`` ({name of :data:`SETTINGS`: value}; None: not given) in its range,
    and the cross-field rules: a block size by rows or by megabytes, not both; with
    ``local`` (a cluster started here, not an existing scheduler's), at most
    :func:`max_local_workers` workers.  ValueError in scikit-learn's words otherwise."""
    for key, value in values.items():
        if value is None:
            continue
        kind, low, excluded = SETTINGS[key]
        name = _named(names, key)
        if kind is int:
            check_int(owner, name, value, low, max_local_workers()
                      if key == "workers" and local else None)
        else:
            check_real(owner, name, value, low, low_open=excluded)
    if values.get("block_rows") is not None and values.get("block_mb") is not None:
        raise ValueError(f"The '{_named(names, 'block_rows')}' and "
                         f"'{_named(names, 'block_mb')}' parameters of {owner} are "
                         "exclusive: give one block size, not both.")


def check_storage_options(owner: str, name: str, options, urls) -> None:
    """Storage options are for fsspec URLs (``s3://…``): given where every one of ``urls``
    (the stores, models and files of the command or spec) is a local path, they would
    reach the local file system, which takes none — refused, naming a path."""
    urls = [str(u) for u in urls if u]
    if options and urls and not any("://" in u and not u.startswith("file://") for u in urls):
        raise ValueError(f"The '{name}' parameter of {owner} applies to fsspec URLs "
                         f"(s3://…); {urls[0]} is a local path, which takes none.")


def check_output(owner: str, name: str, url, directory: bool = False) -> None:
    """The local path ``url`` that a command or spec will write (a file, or with
    ``directory`` a folder) can be: no file where a folder is meant, on its way or at it,
    and no folder where the file goes — refused before anything is trained or written."""
    import os

    url = str(url or "")
    if not url or ("://" in url and not url.startswith("file://")):
        return
    path = os.path.abspath(os.path.expanduser(url.removeprefix("file://")))
    what = "a directory" if directory else "a file"
    if os.path.exists(path):
        if directory != os.path.isdir(path):
            raise ValueError(f"The '{name}' parameter of {owner} must be {what} to write: "
                             f"{path} is {'a file' if directory else 'a directory'}.")
        return
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"The '{name}' parameter of {owner} must be {what} to write: "
                         f"{parent}, on the way to {path}, is a file, not a directory.")

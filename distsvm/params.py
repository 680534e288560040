"""Training parameters: the one declaration of every option, its checks, the class weights.

The CLI, the estimators, job specs, the pipeline and model selection all train through
:func:`distsvm.jobs.train`, whose parameters are :class:`Params`.  Each field of it carries,
in its :class:`Option`, everything a front end needs: its flags on the command line, help,
default, the values it takes (:class:`Real`, :class:`Int`, :class:`OneOf`, scikit-learn's
``Interval`` and ``StrOptions``), which solvers take it and how one that does not refuses
it.  From that one table come the ``train`` command's options and help
(:mod:`distsvm.arguments`), the job spec's ``solver`` section (:func:`spec_schema`),
:data:`REFUSALS`, the checks here and the estimators' ``_parameter_constraints``
(:mod:`distsvm.api`): a new training option is one field (and its use in the solver).
:class:`Folds` declares model selection's options (``-v``, ``-C``) the same way.

The checks speak scikit-learn's words ("The 'C' parameter of LinearSVC must be a float in
the range (0, inf). Got -1 instead."), so a parameter means the same thing, and fails the
same way, everywhere.  One name per concept: the stopping tolerance is ``eps``
(LIBLINEAR's), the round limit ``max_rounds``, the seed ``seed``; only the scikit-learn
estimators say ``tol``, ``max_iter`` and ``random_state``, and pass ``names`` so that their
messages do too.  Objective scaling is LIBLINEAR's everywhere, ``½‖w‖² + Σᵢ Cᵢ · loss``,
row i's cost Cᵢ being C · its class weight · its instance weight (the class weights here,
:func:`class_weights`; the costs in :mod:`distsvm.workers.losses`).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Hashable, Mapping

import numpy as np

from distsvm.storage.dataset import COMPRESSIONS
from distsvm.storage.errors import listed

from .solvers import registry

# ---------------------------------------------------------------- constraints
# The values a parameter takes, as scikit-learn's _param_validation declares them
# (Interval, StrOptions; None in a list of constraints: None is taken too), with this
# project's messages: validate() says "must be <text of each constraint, joined by 'or'>".

@dataclasses.dataclass(frozen=True)
class Real:
    """A finite real in (low, high] (``low_open``) or [low, high]."""

    low: float
    high: float = np.inf
    low_open: bool = True

    def accepts(self, value) -> bool:
        if not (isinstance(value, numbers.Real) and not isinstance(value, bool)
                and np.isfinite(value)):
            return False
        return (value > self.low if self.low_open else value >= self.low) and value <= self.high

    @property
    def text(self) -> str:
        hi = "inf)" if self.high == np.inf else f"{self.high:g}]"
        return f"a float in the range {'(' if self.low_open else '['}{self.low:g}, {hi}"


@dataclasses.dataclass(frozen=True)
class Int:
    """An int ≥ low (and ≤ high)."""

    low: int
    high: int | None = None

    def accepts(self, value) -> bool:
        return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
                and value >= self.low and (self.high is None or value <= self.high))

    @property
    def text(self) -> str:
        return f"an int in the range [{self.low}, {'inf)' if self.high is None else f'{self.high}]'}"


@dataclasses.dataclass(frozen=True)
class OneOf:
    """One of ``values`` (``words``: how a message says so, if not "one of [...]")."""

    values: tuple
    words: str | None = None

    def accepts(self, value) -> bool:
        return isinstance(value, Hashable) and value in self.values

    @property
    def text(self) -> str:
        if self.words:
            return self.words
        return repr(self.values[0]) if len(self.values) == 1 else f"one of {list(self.values)}"


@dataclasses.dataclass(frozen=True)
class Satisfies:
    """A value ``test`` accepts, said as ``text``."""

    test: Callable
    text: str

    def accepts(self, value) -> bool:
        return bool(self.test(value))


def validate(owner: str, name: str, value, constraints) -> None:
    """``value`` meets one of ``constraints`` (None among them: None is taken); a
    ValueError in scikit-learn's words otherwise."""
    if value is None and None in constraints:
        return
    rules = [c for c in constraints if c is not None]
    if not any(c.accepts(value) for c in rules):
        raise ValueError(f"The '{name}' parameter of {owner} must be "
                         f"{' or '.join(c.text for c in rules)}. Got {value!r} instead.")


def check_real(owner, name, value, low, high=np.inf, low_open=True):
    """A finite real in (low, high] (``low_open``) or [low, high]."""
    validate(owner, name, value, [Real(low, high, low_open)])


def check_int(owner, name, value, low, high=None):
    """An int ≥ low (and ≤ high)."""
    validate(owner, name, value, [Int(low, high)])


# ---------------------------------------------------------------- the declaration

@dataclasses.dataclass(frozen=True)
class Option:
    """What a front end needs of one parameter.  ``flags``: the ``train`` command's (none:
    not on the command line), ``store`` the value a flag without a value stores
    (``--no-join-blocks``: False); ``help`` (``{default}`` is the default), ``metavar``,
    ``hyphens`` (the command line spells the values' underscores as hyphens),
    ``exclusive`` (flags of one group of that name exclude each other) and ``section``
    (its group in the help; default: its first taker's); ``kind``: int, float, str or bool
    (the command line's type, the spec schema's); ``check``: the constraints its value
    meets; ``takers``: the solvers that take it ({name: the losses, None: every one}; None:
    every solver; :data:`BY_SOLVER`: those whose registry entry lists it in its ``options``)
    and ``refusal``, the message (:func:`check_solver`) for one that does not;
    ``record``: a model keeps it in its params "always", where its solver "taken" it, or
    where it is "set" away from its default (:func:`recorded`); ``spec``: a job spec's
    ``solver`` section takes it (:func:`spec_schema`)."""

    flags: tuple[str, ...] = ()
    help: str = ""
    kind: type = float
    check: tuple = ()
    takers: Mapping[str, tuple[str, ...] | None] | None = None
    refusal: str | None = None
    section: str | None = None
    metavar: str | None = None
    store: object = None
    exclusive: str | None = None
    hyphens: bool = False
    record: str | None = None
    spec: bool = True
    schema: dict | None = None  # the spec schema's, where ``kind`` does not say it


def option(default, *flags: str, **kw):
    """A :class:`Params` field: its default and its :class:`Option`."""
    return dataclasses.field(default=default, metadata={"option": Option(flags, **kw)})


def spelled(names) -> list[str]:
    """Solver and loss names as the command line spells them (hyphens)."""
    return [n.replace("_", "-") for n in names]


def _solver_help() -> str:
    return ("; ".join(f"{s.cli_name} = {s.help} ({', '.join(spelled(s.losses))})"
                      for s in registry.SOLVERS.values())
            + "; auto = primal when rows far outnumber features (default {default})")


def _loss_help() -> str:
    return (", ".join(f"{spelled([k])[0]} = {v} "
                      f"({', '.join(spelled(s.name for s in registry.SOLVERS.values() if k in s.losses))})"
                      for k, v in registry.LOSSES.items())
            + "; default: squared-hinge where the solver trains it, else its first loss")


def _eps_help() -> str:
    return "stopping tolerance: " + "; ".join(
        f"{s.cli_name}, {s.eps_help} (default {s.eps:g})" for s in registry.SOLVERS.values())


LIBLINEAR = "liblinear"  # the section of LIBLINEAR's own options in the help, listed first
TRAINING = "training"  # the section of the options every solver takes
# SVM-ALM (solver "alm"): the exponent p of each loss; "lp" takes any p >= 1.
ALM_P = {"hinge": 1.0, "squared_hinge": 2.0}
BY_SOLVER = "by solver"  # takers: the solvers whose registry entry lists the option
ALM_REFUSAL = ("The parameters p, method, mu0, rho and rtol of {owner} belong to solver "
               "{takers}; solver {solver!r} does not take them.")
BELONGS = "The '{name}' parameter of {owner} belongs to solver(s) {takers}. Got solver {solver!r}."
SVR = {s.name: tuple(loss for loss in s.losses if loss in registry.REGRESSION_LOSSES)
       for s in registry.SOLVERS.values()
       if set(s.losses) & set(registry.REGRESSION_LOSSES)}  # the SVR losses, by solver
_SWITCHING = [t for t in registry.TYPES.values() if t.switch]
SWITCH = {solver: tuple(t.loss for t in _SWITCHING if t.solver == solver)  # by dual solver
          for solver in dict.fromkeys(t.solver for t in _SWITCHING)}


@dataclasses.dataclass(frozen=True)
class Params:
    """The training parameters of :func:`distsvm.jobs.train` (a job spec's ``solver``),
    each declared with its :class:`Option`.

    ``solver`` a name of :data:`distsvm.solvers.registry.SOLVERS` or "auto"; ``loss`` one
    it trains; ``eps`` the stopping tolerance (None: the solver's default); ``bias`` a bias
    feature of that value (< 0: none; SVM-ALM: an unregularized intercept if ≥ 0);
    ``gap_tol`` > 0 also stops once the duality gap certifies the primal to that relative
    accuracy.  The other options belong to some solvers (their ``takers``):

    * ``class_weight``: None, ``{label: weight}`` (missing labels weigh 1) or "balanced"
      (n_rows / (n_classes · rows of the class), as scikit-learn); row i costs
      Cᵢ = C · class_weight[yᵢ] · its instance weight if the store has them (LIBLINEAR's
      ``-wi`` and ``-W``); in one-vs-rest, problem k's rows of class k cost their weighted C
      and the others C (:func:`distsvm.workers.losses.class_costs`).
    * ``parallel`` "average", "add" or "line": DCD across the workers (CoCoA, CoCoA+, an
      exact line search); ``inner_passes`` DCD's passes over a block per visit;
      ``join_blocks`` (sequential dual CD): one permutation of all rows per round where
      one worker's cache holds the store.
    * ``primal_switch`` (dcd, the losses of newton): LIBLINEAR's fallback for ``-s 1``,
      ``-s 7`` and ``-s 12`` (:func:`~distsvm.solvers.registry.type_params`) — a problem
      whose dual CD has not converged after that many rounds continues with the primal
      Newton solver of the same loss from the dual's w (:mod:`distsvm.jobs`).
    * ``regularize_bias=False`` (newton, l1, ``bias >= 0``): LIBLINEAR's ``-R``;
      ``warm_start`` (newton): the initial w, n_features (+1 with a bias) values.
    * ``objective`` ("ordinal": a ranking model) and ``c_perf`` (SVMperf's C, replacing C):
      the cutting plane's; ``pcd_mode``: primal CD's and l1's; ``p``, ``method``, ``mu0``,
      ``rho``, ``rtol``: SVM-ALM's (:mod:`distsvm.solvers.alm`).
    * ``epsilon`` (the SVR losses, :data:`~distsvm.solvers.registry.REGRESSION_LOSSES`): the
      half-width of the ε-insensitive tube, LIBLINEAR's ``-p`` (default 0.1).
    * ``nu`` (oneclass, LIBLINEAR's ``-n`` of ``-s 21``): the one-class SVM's ν in (0, 1]
      (:mod:`distsvm.solvers.oneclass`).
    """

    solver: str = option(
        "dcd", "--solver", kind=str, check=(OneOf(tuple(registry.choices())),),
        hyphens=True, help=_solver_help(), section=TRAINING)
    loss: str = option(
        "squared_hinge", "--loss", kind=str, check=(OneOf(tuple(registry.LOSSES)),),
        hyphens=True, help=_loss_help(), section=TRAINING)
    C: float = option(
        1.0, "-c", check=(Real(0.0),), exclusive="cost", section=LIBLINEAR, record="always",
        help="cost C on the sum of losses, LIBLINEAR's (default {default:g})")
    epsilon: float = option(  # the ε of the SVR losses (LIBLINEAR's -p, scikit-learn's epsilon)
        0.1, "-p", check=(Real(0.0, low_open=False),), takers=SVR, section=LIBLINEAR,
        help="epsilon of the epsilon-insensitive loss of SVR (-s 11, 12, 13; default "
             "{default:g}), LIBLINEAR's -p",
        refusal="The 'epsilon' parameter of {owner} (LIBLINEAR's -p) is the epsilon of the "
                "epsilon-insensitive losses of SVR ({losses}; solver {takers}). Got solver "
                "{solver!r}, loss {loss!r}.")
    nu: float = option(  # one-class SVM's ν (LIBLINEAR's -n): 0 < ν ≤ 1
        0.5, "-n", check=(Real(0.0, 1.0),), takers=BY_SOLVER, section=LIBLINEAR,
        record="taken",
        help="one-class SVM (-s 21): nu, 0 < nu <= 1 (default {default:g}), LIBLINEAR's",
        refusal="The 'nu' parameter of {owner} belongs to solver {takers} (LIBLINEAR's -n of "
                "-s 21). Got solver {solver!r}.")
    eps: float | None = option(
        None, "-e", check=(None, Real(0.0)), section=LIBLINEAR, record="always",
        help=_eps_help())
    bias: float = option(
        -1.0, "-B", section=LIBLINEAR, record="always",
        check=(Satisfies(lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)
                         and np.isfinite(v), "a finite float (< 0 for no bias feature)"),),
        help="bias feature value; < 0 means none (default {default:g})")
    regularize_bias: bool = option(
        True, "-R", kind=bool, store=False, takers=BY_SOLVER,
        section=LIBLINEAR, record="set",
        help="newton: leave the bias feature's weight out of the regularization (LIBLINEAR's "
             "-R; needs -B >= 0)",
        refusal="The 'regularize_bias' parameter of {owner} (False: LIBLINEAR's -R) belongs "
                "to solver(s) {takers}, with a bias feature (bias >= 0). Got solver "
                "{solver!r} and bias {bias!r}.")
    class_weight: object = option(  # the command line's -wi: distsvm.arguments.class_weights
        None, "-wi", kind=dict, metavar="W", takers=BY_SOLVER, section=LIBLINEAR,
        check=(None, Satisfies(lambda v: isinstance(v, dict) or (isinstance(v, str)
                                                                 and v == "balanced"),
                               "None, a dict or 'balanced'")),
        schema={"anyOf": [{"type": "object", "additionalProperties": {"type": "number"}},
                          {"const": "balanced"}]},
        help="weight W on the cost C of class label i (LIBLINEAR's -wi, repeatable: "
             "-w1 2 -w-1 0.5); default 1",
        refusal="Class and instance weights of {owner} are not taken by solver {solver!r} "
                "(LIBLINEAR has no such solver; {takers} take them). Got class_weight="
                "{value!r} on a store {stored} instance weights.")
    max_rounds: int | None = option(  # None: the solver's (registry)
        None, "--max-rounds", kind=int, check=(None, Int(1)), section=TRAINING,
        record="always",
        help="round limit; reaching it warns (default 1000; crammer-singer, -s 4: 100000, "
             "LIBLINEAR's)")
    seed: int = option(
        0, "--seed", kind=int, check=(Int(0),), section=TRAINING, record="always",
        help="solver seed, and the draw of the blocks into folds (default {default})")
    # anytime training (issue 31; the mechanism: distsvm.solvers.driver, distsvm.anytime)
    validation: str | None = option(
        None, "--validation", kind=str, metavar="STORE", section=TRAINING, record="set",
        exclusive="validation",
        help="score the model on this store after each round (on the workers that hold it): "
             "accuracy, regression MSE (--validation-metric); the round line and log show it")
    validation_fraction: float | None = option(
        None, "--validation-fraction", metavar="F", section=TRAINING, record="set",
        exclusive="validation",
        check=(None, Satisfies(lambda v: Real(0.0, 1.0).accepts(v) and v < 1,
                               "a float in the range (0, 1)")),
        help="hold out this fraction of the rows (drawn by --seed) as the validation set")
    validation_metric: str = option(
        "auto", "--validation-metric", kind=str,
        check=(OneOf(("auto", "accuracy", "mse", "auc", "pairwise_accuracy")),),
        section=TRAINING, record="set",
        help="the validation score: auto = accuracy (classification; one-class: its +1/-1 "
             "predictions against the labels, +1 an inlier), mse (regression), "
             "pairwise_accuracy (ranking: the pairs of different rank in order); auc (binary "
             "problems; one-class: of the rows labelled +1) (default {default})")
    n_iter_no_change: int | None = option(
        None, "--n-iter-no-change", kind=int, check=(None, Int(1)), metavar="N",
        section=TRAINING, record="set",
        help="early stopping: stop when the validation score has not improved by "
             "--validation-tol for N rounds, and keep the best round's model (default: off)")
    validation_tol: float = option(
        1e-3, "--validation-tol", check=(Real(0.0, low_open=False),), metavar="TOL",
        section=TRAINING, record="set",
        help="early stopping: the least improvement of the validation score that counts "
             "(default {default:g}, scikit-learn's tol)")
    time_budget: float | None = option(
        None, "--time-budget", check=(None, Real(0.0)), metavar="SECONDS", section=TRAINING,
        record="set",
        help="end training once SECONDS have passed (dual CD: between block visits, others: "
             "between rounds) and keep the best model so far (by validation score, else the "
             "last)")
    inner_passes: int = option(
        1, "--inner-passes", kind=int, check=(Int(1),), takers=BY_SOLVER,
        record="always", refusal=BELONGS,
        help="DCD passes over a block per visit (default {default}); with --parallel, local "
             "passes per round")
    gap_tol: float = option(
        0.0, "--gap-tol", check=(Real(0.0, low_open=False),), metavar="TOL",
        takers=BY_SOLVER, record="always",
        help="also stop when the duality gap is <= TOL x the primal objective (a certified "
             "relative accuracy; default 0: off)",
        refusal="The 'gap_tol' parameter of {owner} applies to solvers {takers} only (their "
                "duality gaps are the certificates). Got solver {solver!r}.")
    parallel: str | None = option(
        None, "--parallel", kind=str, check=(OneOf((None, "average", "add", "line")),),
        takers=BY_SOLVER, record="set",
        help="dcd across workers as CoCoA (average, gamma=1/K), CoCoA+ (add, gamma=1, "
             "sigma'=K) or with an exact line search on the combined step (line, sigma'=1): "
             "w broadcast once per round, only dw returned",
        refusal="The 'parallel' parameter of {owner} belongs to solver {takers} with the "
                "{losses} loss.")
    join_blocks: bool = option(
        True, "--no-join-blocks", kind=bool, store=False,
        takers=BY_SOLVER, refusal=BELONGS,
        help="sequential dcd: visit the rows block by block even where one worker's memory "
             "holds the whole store (default: one permutation of all rows per round there, as "
             "LIBLINEAR)")
    primal_switch: int | None = option(
        None, kind=int, check=(None, Int(1)), takers=SWITCH, record="set",
        help="LIBLINEAR's -s 1, 7 and 12: dual CD not converged after this many rounds "
             "continues with the primal Newton solver",
        refusal="The 'primal_switch' parameter of {owner} belongs to solver {takers} with the "
                "loss {losses} (the losses of the primal Newton solver). Got solver "
                "{solver!r}, loss {loss!r}.")
    pcd_mode: str = option(
        "exact", "--pcd-mode", kind=str, check=(OneOf(("exact", "parallel")),),
        takers=BY_SOLVER, record="taken", refusal=BELONGS,
        help="pcd and l1: one worker per round (exact), or all workers on their column "
             "blocks with a global line search (parallel)")
    objective: str = option(
        "classification", "--objective", kind=str,
        check=(OneOf(("classification", "ordinal")),), takers=BY_SOLVER,
        record="taken",
        help="cutting-plane only: ordinal = a ranking model of the labels' order (R >= 2 "
             "ordered ranks; ROC area for two labels)",
        refusal="The 'objective' parameter of {owner} must be one of {choices} ('ordinal' "
                "with the {bare} solver only). Got {value!r} with solver {solver!r} instead.")
    c_perf: float | None = option(
        None, "--c-perf", check=(None, Real(0.0)), metavar="C_PERF", exclusive="cost",
        takers=BY_SOLVER,
        help="cutting-plane only: SVMperf's C instead, C = 100*C_PERF/l (l = rows, or ranked "
             "pairs for --objective ordinal)",
        refusal="The 'c_perf' parameter of {owner} (SVMperf's C) applies to the {bare} solver "
                "only; use C with solver {solver!r}")
    p: float | None = option(  # checked with the loss: check_alm
        None, "--p", takers=BY_SOLVER, refusal=ALM_REFUSAL, help="loss exponent p >= 1 of --loss lp")
    method: str = option(
        "inexact", "--method", kind=str, check=(OneOf(("inexact", "exact")),), takers=BY_SOLVER,
        refusal=ALM_REFUSAL,
        help="inexact = Algorithm 2, one gradient step per iteration (default); exact = "
             "Algorithm 1, LSQR per iteration")
    mu0: float = option(0.01, "--mu0", check=(Real(0.0),), takers=BY_SOLVER, refusal=ALM_REFUSAL,
                        help="first penalty mu = mu0*C ({default:g})")
    rho: float = option(1.02, "--rho", check=(Real(1.0, low_open=False),), takers=BY_SOLVER,
                        refusal=ALM_REFUSAL,
                        help="penalty growth per iteration, capped at 1e5 ({default:g})")
    rtol: float = option(1e-6, "--rtol", check=(Real(0.0, low_open=False),), takers=BY_SOLVER,
                         refusal=ALM_REFUSAL,
                         help="stop when the objective changed by <= rtol (relative) over 10 "
                              "iterations (1e-6)")
    warm_start: object = option(  # checked against the data: check_data
        None, kind=list, takers=BY_SOLVER, spec=False,
        help="the initial w: n_features (+1 with a bias) weights",
        refusal="The 'warm_start' parameter of {owner} belongs to solver(s) {listed}. Got "
                "solver {solver!r}.")


@dataclasses.dataclass(frozen=True)
class Folds:
    """Model selection's parameters (:mod:`distsvm.selection`; the ``train`` command's
    ``-v`` and ``-C``), declared as :class:`Params`' are."""

    n_folds: int | None = option(
        None, "-v", kind=int, check=(None, Int(2)), metavar="N", section=LIBLINEAR,
        help="N-fold cross-validation (folds are rows, as LIBLINEAR's; no model is written): "
             "prints LIBLINEAR's 'Cross Validation Accuracy'")
    find_c: bool = option(
        False, "-C", kind=bool, store=True, section=LIBLINEAR,
        help="search C by warm-started cross-validation (-s 0 or -s 2; 5 folds unless -v; -c "
             "sets the start C): prints 'Best C = ...'")
    concurrent_folds: int = option(
        1, "--concurrent-folds", kind=int, check=(Int(1),), metavar="K", section=TRAINING,
        help="-v/-C: train K folds at a time (default {default})")


def options(table=Params) -> dict[str, Option]:
    """{field name: its :class:`Option`} of ``table`` (:class:`Params`, :class:`Folds`), in
    the declaration's order; :data:`BY_SOLVER` takers read from the registry's entries."""
    found = {f.name: f.metadata["option"] for f in dataclasses.fields(table)}
    return {name: dataclasses.replace(o, takers={s.name: s.options[name]
                                                 for s in registry.SOLVERS.values()
                                                 if name in s.options})
            if o.takers == BY_SOLVER else o for name, o in found.items()}


OPTIONS = options(Params)
DEFAULTS = Params()
REFUSALS = {name: o.refusal for name, o in OPTIONS.items() if o.refusal}


def takes(solver: str, name: str, loss: str | None = None) -> bool:
    """Whether ``solver`` takes the parameter ``name`` (with ``loss``, if given)."""
    takers = OPTIONS[name].takers
    if takers is None:
        return True
    if solver not in takers:
        return False
    return takers[solver] is None or loss is None or loss in takers[solver]


def transferable(p: Params, solver: str) -> bool:
    """Whether every solver option of ``p`` set away from its default is one ``solver``
    takes too (with ``p.loss``): training ``p`` by ``solver`` instead drops none."""
    return all(takes(solver, name, p.loss) for name in REFUSALS
               if _differs(name, getattr(p, name)))


def _differs(name: str, value) -> bool:
    default = getattr(DEFAULTS, name)
    return (value is not None) if default is None else bool(np.any(value != default))


def recorded(p: Params) -> dict:
    """The parameters a model of ``p`` keeps in its params (each field's ``record``)."""
    out = {}
    for name, o in OPTIONS.items():
        value = getattr(p, name)
        if (o.record == "always" or (o.record == "taken" and takes(p.solver, name, p.loss))
                or (o.record == "set" and _differs(name, value))):
            out[name] = o.kind(value) if o.kind in (int, float, bool) else value
    return out


def spec_schema() -> dict:
    """The JSON schema of a job spec's ``solver`` section (``$defs/solver`` of
    ``schemas/job.schema.json``; :func:`distsvm.spec.schema`): every :class:`Params` field a
    spec takes, its type, its choices and its help; ``type`` LIBLINEAR's ``-s``."""
    kinds = {float: "number", int: "integer", str: "string", bool: "boolean"}
    keys = {"type": {"enum": list(registry.TYPES),
                     "description": "LIBLINEAR's -s: its solver, loss (and switch to the "
                                    "primal solver), as the command line's -s"}}
    for name, o in OPTIONS.items():
        if not o.spec:
            continue
        key = dict(o.schema or {"type": kinds[o.kind]})
        choices = [v for c in o.check if isinstance(c, OneOf) for v in c.values if v is not None]
        if choices:  # the command line's spellings too (cutting-plane, squared-hinge)
            key = {"enum": choices + [v for v in spelled(choices) if v not in choices]
                   if o.hyphens else choices}
        keys[name] = {**key, "description": o.help.format(default=getattr(DEFAULTS, name))}
    return {"type": "object", "additionalProperties": False,
            "description": "the parameters of distsvm.jobs.train (distsvm.params.Params)",
            "properties": keys}


def from_spec(section: dict, owner: str) -> dict:
    """A spec's ``solver`` section (validated by :func:`spec_schema`) as :class:`Params`
    spells it: the command line's spellings of values (``cutting-plane``) as the
    declaration's (``cutting_plane``), and the class weights' labels as the strings JSON
    keeps them in (``{1: 2}`` of YAML and ``{"1": 2}`` of JSON are one setting, in a run's
    ``job.json``, a checkpoint and a registry version's lineage).  ValueError for a label
    that is not a number."""
    out = dict(section)
    for name, value in section.items():
        o = OPTIONS.get(name)
        if o is not None and o.hyphens and isinstance(value, str):
            out[name] = value.replace("-", "_")
    weights = section.get("class_weight")
    if isinstance(weights, dict):
        labels = {}
        for k in weights:
            try:
                labels[k] = f"{float(k):g}"
            except (TypeError, ValueError):
                raise ValueError(f"The 'class_weight' parameter of {owner} takes class labels "
                                 f"(numbers) as keys. Got {k!r}.") from None
        out["class_weight"] = {labels[k]: v for k, v in weights.items()}
    return out


def with_type(kwargs: dict, code: int | None, names: dict | None = None, spell=str) -> dict:
    """``kwargs`` with LIBLINEAR's ``-s code`` (None: none) turned into its training
    parameters (:func:`~distsvm.solvers.registry.type_params`); a solver or loss that
    ``kwargs`` also gives must be the type's (ValueError otherwise, naming each as
    ``names`` spell them, and their values by ``spell``)."""
    if code is None:
        return dict(kwargs)
    typed = registry.type_params(code)
    for key in ("solver", "loss"):
        if kwargs.get(key, typed[key]) != typed[key]:
            raise ValueError(f"{_named(names, 'type')} {code} means {_named(names, key)} "
                             f"{spell(typed[key])}, which contradicts {_named(names, key)} "
                             f"{spell(kwargs[key])}")
    return {**kwargs, **typed}


def check_params(owner: str, p: Params, names: dict | None = None) -> None:
    """The checks of every value (each field's ``check``) that need neither the solver's
    entry nor the data; ``names`` renames parameters in the messages (the estimators'
    ``tol`` for ``eps``)."""
    for name, o in OPTIONS.items():
        if o.check:
            validate(owner, _named(names, name), getattr(p, name), o.check)


def _named(names: dict | None, key: str) -> str:
    return (names or {}).get(key, key)


def _phrase(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if not words:
        return "none"
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _refuse(owner: str, name: str, p: Params, weighted: bool = False):
    """Raise the refusal of parameter ``name`` (:data:`REFUSALS`)."""
    takers_of = OPTIONS[name].takers
    takers = [s for s in registry.SOLVERS.values() if s.name in takers_of]
    losses = dict.fromkeys(loss for s in takers for loss in (takers_of[s.name] or s.losses))
    choices = [v for c in OPTIONS["objective"].check for v in c.values]
    raise ValueError(REFUSALS[name].format(
        owner=owner, name=name, solver=p.solver, loss=p.loss, bias=p.bias,
        value=getattr(p, name), takers=_phrase([repr(s.name) for s in takers]),
        bare=_phrase([s.name for s in takers]), listed=[s.name for s in takers],
        losses=" or ".join(losses), choices=choices,
        stored="with" if weighted else "without"))


def _given(name: str, p: Params, weighted: bool, given=()) -> bool:
    """Whether parameter ``name`` is given: named in ``given`` (the keyword arguments
    passed) with a value, even its default (``nu=0.5`` to a solver without ν is refused,
    not ignored), or set to other than its default; class weights also where the store has
    instance weights (``weighted``)."""
    value = getattr(p, name)
    return ((name == "class_weight" and weighted) or (name in given and value is not None)
            or _differs(name, value))


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
    for name in REFUSALS:
        if _given(name, p, weighted, given) and not takes(p.solver, name, p.loss):
            _refuse(owner, name, p, weighted)
    if not p.regularize_bias and p.bias < 0:
        _refuse(owner, "regularize_bias", p)
    if p.bias >= 0 and not spec.bias_feature:  # LIBLINEAR's check_parameter for -s 21
        raise ValueError(f"The 'bias' parameter of {owner} must be < 0 (no bias feature) "
                         f"with solver {p.solver!r}, as LIBLINEAR's -s 21. Got {p.bias!r} "
                         "instead.")
    if spec.intercept:  # SVM-ALM: its exponent p, and an intercept or none
        p = dataclasses.replace(p, p=check_alm(owner, p), bias=1.0 if p.bias >= 0 else -1.0)
    return p


def check_alm(owner: str, p: Params) -> float:
    """SVM-ALM's loss exponent p, checked against the loss: returned."""
    if p.loss == "lp":
        if p.p is None:
            raise ValueError(f"The 'p' parameter of {owner} is required with loss 'lp'.")
        check_real(owner, "p", p.p, 1.0, low_open=False)
    elif p.p is not None and float(p.p) != ALM_P[p.loss]:
        raise ValueError(f"The 'p' parameter of {owner} must be {ALM_P[p.loss]:g} (or None) "
                         f"with loss {p.loss!r}. Got {p.p!r} instead.")
    return float(p.p) if p.loss == "lp" else ALM_P[p.loss]


# --solver auto takes the primal when rows outnumber features by this factor (l ≫ n).
AUTO_PRIMAL_RATIO = 50


def choose_solver(dataset, loss: str) -> tuple[str, str]:
    """``--solver auto``: the solver for this store and loss, and why.

    Primal CD when the store has far more rows than features (l ≫ n: the primal
    has fewer variables, and the dual method "may not be stable for some
    non-document data with a small number of features" — Chang, Hsieh & Lin
    2008, §1), dual CD otherwise (document-like data, where Hsieh et al. 2008
    find it faster); a loss only one solver trains decides by itself.
    """
    from distsvm.storage.columns import read_columns_meta
    from distsvm.storage.errors import IncompleteStoreError

    m = dataset.meta
    ratio = m.n_rows / max(1, m.n_features)
    dual, primal = registry.SOLVERS["dcd"], registry.SOLVERS["pcd"]
    if dataset.is_subset and loss in dual.losses:
        return "dcd", "a view of some row blocks (a fold) has no column view for pcd"
    takers = [s.name for s in registry.SOLVERS.values() if loss in s.losses]
    if len(takers) == 1:
        return takers[0], f"only {takers[0]} trains the {loss} loss"
    if loss not in primal.losses:
        return "dcd", f"only dcd trains the {loss} loss"
    if loss not in dual.losses:
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


def check_data(owner: str, p: Params, dataset) -> tuple[Params, np.ndarray, bool]:
    """The checks against the store: its classes, the warm start's length, a column-view
    solver on a fold or on a store without a column view.  Returns ``p`` with C settled
    (from ``c_perf``), the weight of each class index (:func:`class_weights`) and whether
    the classes train one-vs-rest."""
    spec = registry.SOLVERS[p.solver]
    dataset = for_task(p.loss, dataset)  # as the job will train on it
    meta = dataset.meta
    if spec.reads == "columns" and dataset.is_subset:
        raise ValueError(f"The 'solver' parameter of {owner} cannot be {p.solver!r} on a view "
                         "of some row blocks (a cross-validation fold): it reads the store's "
                         "column view, which covers every row")
    # a store without a column view gets one when the job starts (distsvm.columns.ensure)
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


def for_task(loss: str, dataset):
    """The dataset a job of ``loss`` trains on: a regression loss reads a classification
    store's labels (the numbers of its file) as targets
    (:meth:`distsvm.storage.Dataset.as_regression`): LIBLINEAR trains every -s from one
    file, so the task is decided at train time, by -s.  Anything else as it is."""
    if (loss in registry.REGRESSION_LOSSES and not dataset.meta.regression
            and not dataset.is_subset and dataset.meta.classes):
        return dataset.as_regression()
    return dataset


def check_task(p: Params, dataset) -> None:
    """A regression loss reads any store's labels as numbers (:func:`for_task`); any other
    loss needs a store of classes: one clear ``ValueError`` otherwise (a classifier must
    never threshold real targets)."""
    regression = p.loss in registry.REGRESSION_LOSSES
    if regression == dataset.meta.regression or (regression and not dataset.is_subset):
        return
    code = registry.liblinear_type(p.solver, p.loss)
    what = f"-s {code}" if code is not None else f"solver {p.solver!r} with loss {p.loss!r}"
    if regression:  # a view of some rows of a classification store (for_task takes stores)
        raise ValueError(f"{what} needs a regression store or a whole store of numeric "
                         f"labels; {dataset.url} (a view of some of its rows) has class labels "
                         f"{listed(dataset.meta.classes)}")
    svr = [f"-s {c}" for c, (_, loss) in registry.LIBLINEAR_TYPES.items()
           if loss in registry.REGRESSION_LOSSES]
    raise ValueError(f"{what} needs a store of class labels; {dataset.url} is a regression "
                     f"store (real-valued targets), ingested with --regression: train an SVR loss "
                     f"({', '.join(registry.REGRESSION_LOSSES)}; {', '.join(svr)}) on it, or "
                     "ingest the file without --regression (its labels are then classes, and "
                     "every -s trains on it)")


def class_weights(owner: str, class_weight, meta) -> np.ndarray:
    """Each class's weight (:class:`Params`' ``class_weight``), in the store's class order;
    a regression store's rows all have class index 0: ``[1.0]``.  C multiplies them in
    :func:`distsvm.workers.losses.class_costs`."""
    if meta.regression:
        return np.ones(1)
    n = np.asarray(meta.class_counts, dtype=np.float64)
    if class_weight is None:
        return np.ones(len(n))
    if isinstance(class_weight, str) and class_weight == "balanced":
        return n.sum() / (len(n) * np.maximum(n, 1))
    unknown = [k for k in class_weight if float(k) not in meta.classes]
    if unknown:
        raise ValueError(f"The 'class_weight' parameter of {owner} names labels {listed(unknown)} "
                         f"that are not classes of the data {listed(meta.classes)}.")
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
    p = Params(**kwargs)
    check_params(owner, p, names)
    if p.solver not in registry.SOLVERS and dataset is not None:  # "auto"
        p = dataclasses.replace(p, solver=choose_solver(dataset, p.loss)[0])
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
# block sizes, waits, an ingest's seed and feature count, folds (:class:`Folds`), a
# checkpoint's policy — by one name each, checked by check_settings for the CLI's options
# and the job and pipeline specs' keys alike (``names`` spells them as the front end does:
# "--block-mb", "ingest.block_mb").
SETTINGS = {
    "workers": Int(1), "block_rows": Int(1), "block_mb": Real(0.0),
    "lock_timeout": Real(0.0, low_open=False), "memory_mb": Real(0.0), "n_features": Int(1),
    "seed": Int(0), "every": Int(1), "keep": Int(1), "compression": OneOf(tuple(COMPRESSIONS)),
    **{name: c for name, o in options(Folds).items() for c in o.check if c is not None},
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
        rule = SETTINGS[key]
        if key == "workers" and local:
            rule = Int(rule.low, max_local_workers())
        validate(owner, _named(names, key), value, [rule])
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
        _check_writable(owner, name, what, path, path if directory else os.path.dirname(path))
        return
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"The '{name}' parameter of {owner} must be {what} to write: "
                         f"{parent}, on the way to {path}, is a file, not a directory.")
    _check_writable(owner, name, what, path, parent)


def _check_writable(owner: str, name: str, what: str, path: str, folder: str) -> None:
    """A file can be made in ``folder`` (where ``path`` or the folders on its way go): a
    probe file created and removed, so that a read-only, immutable or foreign folder is
    refused before a training, not found after it."""
    import os
    import tempfile

    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".distsvm-probe-")
    except OSError as exc:
        raise ValueError(f"The '{name}' parameter of {owner} must be {what} to write: "
                         f"{path} cannot be written ({folder}: {exc.strerror}).") from None
    os.close(fd)
    os.unlink(probe)

"""The solver registry is consistent, and the front ends read it: -s codes, CLI choices,
default eps, the options each solver takes, the solver modules' signature, the parameter
messages."""

from __future__ import annotations

import ast
import inspect
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from distsvm import params
from distsvm.cli import build_parser
from distsvm.params import Params
from distsvm.solvers import registry
from workers import losses

REPO = pathlib.Path(__file__).resolve().parents[1]
# options a solver that does not take them ignores: the seed (every front end passes it,
# and it also draws cross-validation's folds); every other one is refused (issue 30)
IGNORED = {"seed"}


def test_every_liblinear_type_is_a_registered_solver_and_loss():
    assert sorted(registry.LIBLINEAR_TYPES) == [0, 1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 21]
    for code, (solver, loss) in registry.LIBLINEAR_TYPES.items():
        assert solver in registry.SOLVERS and loss in registry.SOLVERS[solver].losses, code
        assert registry.liblinear_type(solver, loss) == code
    assert registry.liblinear_type("pcd", "logistic") is None
    for s in registry.SOLVERS.values():
        assert set(s.losses) <= set(registry.LOSSES), s.name
        assert s.reads in ("rows", "columns") and s.default_loss in s.losses


def _train_actions() -> dict:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return {a.dest: a for a in sub.choices["train"]._actions}


def test_cli_choices_are_the_registry_s():
    actions = _train_actions()
    assert list(actions["solver"].choices) == [*(n.replace("_", "-") for n in registry.SOLVERS),
                                               "auto"]
    assert list(actions["loss"].choices) == [n.replace("_", "-") for n in registry.LOSSES]
    assert list(actions["liblinear_type"].choices) == list(registry.LIBLINEAR_TYPES)
    for dest in ("objective", "method", "pcd_mode", "parallel"):
        assert [c for c in params.CHOICES[dest] if c is not None] == \
            list(actions[dest].choices), dest
    for s in registry.SOLVERS.values():
        assert f"{s.cli_name} = {s.help}" in actions["solver"].help
        assert f"{s.cli_name}, {s.eps_help} (default {s.eps:g})" in actions["eps"].help
    for dest in ("max_rounds", "seed", "inner_passes", "gap_tol", "bias", "mu0", "rho", "rtol"):
        assert actions[dest].default == getattr(params.DEFAULTS, dest), dest


def test_job_schema_choices_are_filled_from_the_registry():
    from distsvm import spec

    schema = spec._with_choices({"$defs": {"solver": {"properties": {
        k: {} for k in ("solver", "loss", *params.CHOICES)}}}})
    keys = schema["$defs"]["solver"]["properties"]
    assert keys["solver"]["enum"] == registry.choices()
    assert keys["loss"]["enum"] == list(registry.LOSSES)
    assert keys["parallel"]["enum"] == ["average", "add", "line"]


@pytest.mark.parametrize("solver,eps", [("dcd", 0.1), ("pcd", 0.1), ("cutting_plane", 1e-3),
                                        ("alm", 0.01), ("newton", 0.01),
                                        ("crammer_singer", 0.1), ("l1", 0.01),
                                        ("oneclass", 0.01)])
def test_default_eps(solver, eps):
    assert registry.SOLVERS[solver].eps == eps
    p = Params(solver=solver, loss=registry.SOLVERS[solver].default_loss)
    assert params.check_solver("train", p).eps == eps
    assert params.check_solver("train", Params(**{**vars(p), "eps": 0.5})).eps == 0.5


def test_unknown_names_get_scikit_learn_messages():
    names = ", ".join(repr(n) for n in registry.choices())
    with pytest.raises(ValueError, match=rf"The 'solver' parameter of train must be one of "
                                         rf"\[{names}\]. Got 'sgd' instead."):
        params.check_params("train", Params(solver="sgd"))
    with pytest.raises(ValueError, match=r"The 'loss' parameter of LinearSVC must be one of "
                                         r"\['hinge', .*\]. Got 'l3' instead."):
        params.check_params("LinearSVC", Params(loss="l3"))
    with pytest.raises(ValueError, match="The 'solver' parameter of x must be one of"):
        registry.get("sgd", "x")
    with pytest.raises(TypeError, match="nonsense"):
        Params(nonsense=1)


def test_names_differ_only_at_the_scikit_learn_boundary():
    from distsvm.api import SKLEARN_NAMES

    with pytest.raises(ValueError, match="The 'eps' parameter of train"):
        params.check_solver("train", Params(eps=0.0))
    with pytest.raises(ValueError, match="The 'tol' parameter of LinearSVC"):
        params.check_solver("LinearSVC", Params(eps=0.0), names=SKLEARN_NAMES)
    with pytest.raises(ValueError, match="The 'max_iter' parameter of LinearSVC"):
        params.check_params("LinearSVC", Params(max_rounds=0), SKLEARN_NAMES)
    with pytest.raises(ValueError, match="The 'max_rounds' parameter of train"):
        params.check_params("train", Params(max_rounds=0))


def test_every_option_belongs_to_a_solver_and_is_refused_by_the_others():
    taken = {o for s in registry.SOLVERS.values() for o in s.options}
    assert taken == set(params.REFUSALS) | IGNORED
    given = {"gap_tol": {"gap_tol": 1e-3}, "objective": {"objective": "ordinal"},
             "c_perf": {"c_perf": 1.0}, "parallel": {"parallel": "add"},
             "alm": {"rho": 1.5}, "primal_switch": {"primal_switch": 5},
             "regularize_bias": {"regularize_bias": False, "bias": 1.0},
             "warm_start": {"warm_start": np.zeros(3)}, "weights": {"class_weight": "balanced"},
             "epsilon": {"epsilon": 0.5},
             "nu": {"nu": 0.3}, "inner_passes": {"inner_passes": 2},
             "join_blocks": {"join_blocks": False}, "pcd_mode": {"pcd_mode": "parallel"}}
    assert set(given) == set(params.REFUSALS)
    for s in registry.SOLVERS.values():
        for option, kwargs in given.items():
            for loss in s.losses:
                p = Params(solver=s.name, loss=loss, **kwargs)
                if s.takes(option, loss):
                    if option != "alm" or loss != "lp":
                        params.check_solver("train", p)
                else:
                    with pytest.raises(ValueError, match="train"):
                        params.check_solver("train", p)
                    # given at its default value: refused all the same
                    at_default = {k: getattr(params.DEFAULTS, k) for k in kwargs}
                    if option not in ("weights", "warm_start", "c_perf", "parallel",
                                      "primal_switch") and option != "regularize_bias":
                        with pytest.raises(ValueError, match="train"):
                            params.check_solver("train", Params(solver=s.name, loss=loss,
                                                                **at_default),
                                                given=at_default)


@pytest.mark.parametrize("name", sorted(registry.SOLVERS))
def test_every_solver_module_takes_the_checked_params(name):
    """Each entry's module (:meth:`Solver.module`) runs a problem from the checked Params,
    the problem's class index and C per class index: one signature for every solver, so
    jobs calls it with no adapter in between."""
    spec = registry.SOLVERS[name]
    module = spec.module()
    assert module.__name__ == f"distsvm.solvers.{name}"
    assert list(inspect.signature(module.solve).parameters) == [
        "client", "dataset", "plan", "p", "positive", "cost", "progress", "checkpoint"]
    assert hasattr(module, "solve_ovr") == spec.batches_ovr
    if spec.batches_ovr:
        assert list(inspect.signature(module.solve_ovr).parameters) == [
            "client", "dataset", "plan", "p", "costs", "positives", "progress", "checkpoint"]


def test_class_costs_are_liblinear_s_weighted_c():
    """C per class index: C times each class's weight in a binary problem; in one-vs-rest
    problem k, class k's weighted C and plain C for the rest (LIBLINEAR's ``train``); row
    costs multiply in the instance weights."""
    weight = np.array([2.0, 0.5, 1.0])
    assert np.array_equal(losses.class_costs(3.0, weight), [6.0, 1.5, 3.0])
    assert np.array_equal(losses.class_costs(3.0, weight, 1), [3.0, 1.5, 3.0])
    assert np.array_equal(losses.class_costs(3.0, weight, 0), [6.0, 3.0, 3.0])
    y = np.array([2, 0, 0, 1], dtype=np.int32)
    assert np.array_equal(losses.costs([6.0, 1.5, 3.0], y, None), [3.0, 6.0, 6.0, 1.5])
    assert np.array_equal(losses.costs([6.0, 1.5, 3.0], y, np.array([1.0, 0.5, 2.0, 4.0])),
                          [3.0, 3.0, 12.0, 6.0])


def test_no_twins_in_the_solver_modules():
    """What the registry and params hold is not held again by a solver module."""
    from distsvm.solvers import cutting_plane, newton, ovr, pcd

    for module, name in ((newton, "LOSSES"), (pcd, "LOSSES"), (pcd, "MODES"),
                         (cutting_plane, "OBJECTIVES"), (ovr, "problem_cost")):
        assert not hasattr(module, name), (module.__name__, name)



def _compares_solver(tree) -> list[int]:
    """Lines of ``solver == …`` / ``solver in …`` tests (on a name or attribute ``solver``)."""
    def is_solver(node):
        return (isinstance(node, ast.Name) and node.id == "solver") or \
            (isinstance(node, ast.Attribute) and node.attr == "solver")
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Compare)
            and (is_solver(n.left) or any(is_solver(c) for c in n.comparators))
            and not all(isinstance(c, ast.Attribute) and c.attr == "SOLVERS"
                        for c in n.comparators)]


def test_jobs_tests_no_solver_by_name():
    """jobs.train looks its solver up in the registry: no ``solver == …`` left in jobs.py,
    and jobs does not import selection (the import cycle is gone)."""
    tree = ast.parse((REPO / "distsvm" / "jobs.py").read_text())
    assert _compares_solver(tree) == []
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                for a in n.names} | {n.module for n in ast.walk(tree)
                                     if isinstance(n, ast.ImportFrom) and n.module}
    assert "selection" not in imported


def test_train_is_short():
    from distsvm import jobs

    lines, _ = inspect.getsourcelines(jobs.train)
    assert len(lines) <= 60


def test_registry_and_params_import_no_solver_module():
    """The CLI's --help reads the registry: it must not import the solvers (Numba)."""
    code = ("import sys, distsvm.cli, distsvm.params, distsvm.solvers.registry\n"
            "print(sorted(m for m in sys.modules if m.startswith(('distsvm.solvers.', "
            "'workers', 'numba'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert out.strip() == "['distsvm.solvers.registry']"

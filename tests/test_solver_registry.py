"""The solver registry is consistent, and the front ends read it and the one declaration of
the training options (distsvm.params): -s codes, CLI choices, default eps, the options each
solver takes, the solver modules' signature, the parameter messages."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from distsvm import arguments, params
from distsvm.arguments import build_parser
from distsvm.params import Params
from distsvm.solvers import registry
from distsvm.workers import losses

REPO = pathlib.Path(__file__).resolve().parents[1]
# parameters every solver takes: the common ones, and the seed (every front end passes it,
# and it also draws cross-validation's folds); every other one is refused by a solver that
# does not take it (issue 30)
COMMON = {"solver", "loss", "C", "eps", "bias", "max_rounds", "seed",
          # anytime training (issue 31): the round driver's, every solver's
          "validation", "validation_fraction", "validation_metric", "n_iter_no_change",
          "validation_tol", "time_budget"}


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
        assert [c for c in params.OPTIONS[dest].check[0].values if c is not None] == \
            list(actions[dest].choices), dest
    for s in registry.SOLVERS.values():
        assert f"{s.cli_name} = {s.help}" in actions["solver"].help
        assert f"{s.cli_name}, {s.eps_help} (default {s.eps:g})" in actions["eps"].help


def test_the_command_line_options_are_the_table_s():
    """Every field of Params and Folds with flags is a train option of that name, with no
    default of its own (absent unless given: the table's default applies), its help the
    field's; the train command given nothing gives nothing."""
    import argparse

    actions = _train_actions()
    defaults = {**vars(params.DEFAULTS), **vars(params.Folds())}
    for name, o in {**params.OPTIONS, **params.options(params.Folds)}.items():
        if not o.flags or name == "class_weight":  # -wi: arguments.class_weights
            assert name not in actions or name == "class_weight", name
            continue
        assert actions[name].option_strings == list(o.flags), name
        assert actions[name].default is argparse.SUPPRESS, name
        assert actions[name].help == o.help.format(default=defaults[name]), name
    a = arguments.parse(["train", "s.zarr", "m"])
    assert arguments.given(a) == {} and arguments.given(a, params.Folds) == {}
    a = arguments.parse(["train", "s.zarr", "m", "--no-join-blocks", "-R", "--inner-passes",
                         "1", "--solver", "cutting-plane", "-w1", "2"])
    assert arguments.given(a) == {"solver": "cutting_plane", "regularize_bias": False,
                                  "class_weight": {1.0: 2.0}, "inner_passes": 1,
                                  "join_blocks": False}


def test_job_schema_solver_section_is_generated_from_the_table():
    """The job schema file has no solver section: it is :func:`distsvm.params.spec_schema`,
    every field a spec takes, with the registry's choices and LIBLINEAR's -s as ``type``."""
    import json

    from distsvm import spec

    assert "solver" not in json.loads((REPO / "distsvm" / "schemas" / "job.schema.json")
                                      .read_text())["$defs"]
    keys = spec.schema("job")["$defs"]["solver"]["properties"]
    assert keys == params.spec_schema()["properties"]
    assert list(keys) == ["type", *(n for n, o in params.OPTIONS.items() if o.spec)]
    assert keys["type"]["enum"] == list(registry.TYPES)
    def with_cli_spellings(names):  # a spec takes the command line's too (issue 29.8)
        return [*names, *(n for n in params.spelled(names) if n not in names)]

    assert keys["solver"]["enum"] == with_cli_spellings(registry.choices())
    assert keys["loss"]["enum"] == with_cli_spellings(list(registry.LOSSES))
    assert keys["parallel"]["enum"] == ["average", "add", "line"]


def test_the_s_table():
    """LIBLINEAR's -s codes: each a registered solver and loss; -s 1, 7, 12 switch to the
    primal Newton solver of their loss; (penalty, loss, dual) to a code as scikit-learn's
    _get_liblinear_solver_type, with its messages."""
    assert registry.type_params(2) == {"solver": "newton", "loss": "squared_hinge"}
    switching = {c for c in registry.TYPES if "primal_switch" in registry.type_params(c)}
    assert switching == {1, 7, 12}
    for code in switching:
        assert registry.type_params(code)["primal_switch"] == registry.LIBLINEAR_DUAL_ROUNDS
        assert registry.TYPES[code].loss in registry.SOLVERS["newton"].losses
    for code, t in registry.TYPES.items():
        assert registry.type_of(t.loss, t.penalty, t.dual) == code
    assert registry.type_of("squared_hinge", "l1", False) == 5
    with pytest.raises(ValueError, match="penalty='l1' and loss='hinge' is not supported"):
        registry.type_of("hinge", "l1", False)
    with pytest.raises(ValueError, match="loss='x' are not supported when dual=True"):
        registry.type_of("logistic", "l1", True, loss_name="x")
    with pytest.raises(ValueError, match="-s 2 means --solver newton, which contradicts "
                                         "--solver dcd"):
        params.with_type({"solver": "dcd"}, 2, {"type": "-s", "solver": "--solver"})
    assert params.with_type({"C": 2.0}, 7) == {"C": 2.0, "solver": "dcd", "loss": "logistic",
                                               "primal_switch": 300}


FIVE = ("inner_passes", "gap_tol", "pcd_mode", "join_blocks", "concurrent_folds")


def _outside_options(source: str) -> str:
    """The registry's text without its entries' ``options={...}`` arguments: where a solver
    names the options it takes (the relation, which is the solver's to say; the option
    itself — flag, help, values, refusal — is declared in distsvm.params only)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()))
    data = source.encode()
    cuts = sorted((offsets[k.value.lineno - 1] + k.value.col_offset,
                   offsets[k.value.end_lineno - 1] + k.value.end_col_offset)
                  for node in ast.walk(tree) if isinstance(node, ast.Call)
                  for k in node.keywords if k.arg == "options")
    assert cuts, "the registry's entries name no options: the check below sees nothing"
    kept, at = [], 0
    for a, b in cuts:
        kept.append(data[at:a])
        at = b
    return b"".join(kept + [data[at:]]).decode()


def test_no_front_end_spells_an_option_of_a_solver():
    """The options declared once (distsvm.params) are spelled by no front end: not the
    command line's, not jobs, the specs, the job schema file, nor the registry beyond its
    entries' lists of the options each solver takes."""
    fronts = ["cli.py", "arguments.py", "jobs.py", "spec.py", "pipeline.py",
              "solvers/registry.py", "schemas/job.schema.json"]
    for name in fronts:
        text = (REPO / "distsvm" / name).read_text()
        if name == "solvers/registry.py":
            assert "inner_passes" in text  # listed by dcd's entry: the cut below must take it
            text = _outside_options(text)
        for option in FIVE:
            for spelling in (option, option.replace("_", "-")):
                assert spelling not in text, (name, spelling)


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
    """Each field has takers (the solvers that take it) and a refusal, or every solver
    takes it; each solver takes its options and refuses the others, even given at their
    default value."""
    assert {n for n, o in params.OPTIONS.items() if o.takers is None} == COMMON
    assert set(params.REFUSALS) == set(params.OPTIONS) - COMMON
    given = {"gap_tol": 1e-3, "objective": "ordinal", "c_perf": 1.0, "parallel": "add",
             "p": 2.0, "method": "exact", "mu0": 0.5, "rho": 1.5, "rtol": 1e-3,
             "primal_switch": 5, "regularize_bias": False, "warm_start": np.zeros(3),
             "class_weight": "balanced", "epsilon": 0.5, "nu": 0.3, "inner_passes": 2,
             "join_blocks": False, "pcd_mode": "parallel"}
    assert set(given) == set(params.REFUSALS)
    for s in registry.SOLVERS.values():
        for option, value in given.items():
            for loss in s.losses:
                kwargs = {option: value, **({"bias": 1.0} if option == "regularize_bias"
                                            else {})}
                if s.name == "alm":  # its exponent p as the loss has it
                    kwargs["p"] = params.ALM_P.get(loss, 2.0)
                p = Params(solver=s.name, loss=loss, **kwargs)
                if params.takes(s.name, option, loss):
                    params.check_solver("train", p)
                    continue
                with pytest.raises(ValueError, match="train"):
                    params.check_solver("train", p)
                # given at its default value: refused all the same
                at_default = {option: getattr(params.DEFAULTS, option)}
                if at_default[option] is not None:
                    with pytest.raises(ValueError, match="train"):
                        params.check_solver("train", Params(solver=s.name, loss=loss,
                                                            **at_default), given=at_default)


def test_a_solver_s_entry_lists_the_options_it_takes():
    """Which solvers take an option of some solvers is said by their registry entries
    (``Solver.options``), not by the option (issue 28: a new solver is its modules and one
    entry): each listed name is such an option, each such option has a taker, and the
    resolved takers are the entries' own."""
    by_solver = {f.name for f in dataclasses.fields(Params)
                 if f.metadata["option"].takers == params.BY_SOLVER}
    listed = {name for s in registry.SOLVERS.values() for name in s.options}
    assert listed == by_solver, listed ^ by_solver
    for name in by_solver:
        assert params.OPTIONS[name].takers == {
            s.name: s.options[name] for s in registry.SOLVERS.values() if name in s.options}
        for s in registry.SOLVERS.values():
            for loss in s.losses:
                wanted = name in s.options and (s.options[name] is None or loss in s.options[name])
                assert params.takes(s.name, name, loss) == wanted, (name, s.name, loss)
    for s in registry.SOLVERS.values():  # the losses named are the solver's
        assert all(set(v) <= set(s.losses) for v in s.options.values() if v), s.name


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


@pytest.mark.parametrize("argv, later, first", [
    (["-c", "1", "--c-perf=2"], "--c-perf", "-c"),
    (["--c-pe", "2", "-c", "1"], "-c", "--c-perf"),  # abbreviated, as argparse takes it
])
def test_exclusive_options_are_refused_as_argparse_refuses_them(capsys, argv, later, first):
    """-c and --c-perf (the table's exclusive group "cost") are in two sections of the help:
    refused after parsing, in argparse's words for a mutually exclusive group."""
    with pytest.raises(SystemExit) as e:
        arguments.parse(["train", "s.zarr", "m", *argv])
    assert e.value.code == 2
    assert capsys.readouterr().err == (f"ERROR: distsvm train: argument {later}: not allowed "
                                       f"with argument {first}\n")

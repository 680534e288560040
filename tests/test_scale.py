"""Scale out (issue 27): a store spread over several workers is computed by every worker that
holds a share, its blocks stay decoded in the owners' memory across passes and rounds, and a
pass is one call per worker, whatever the number of blocks."""

from __future__ import annotations

import ctypes
import dataclasses
import io

import numpy as np
import pytest

import distsvm.workers.blocks
from distsvm import cluster
from distsvm.generate import generate
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.progress import Progress

from .conftest import local_client

MB = 10**6


def test_a_worker_that_holds_its_blocks_reserves_one_read_not_four():
    """The cache rule (:func:`distsvm.cluster.cache_budget`): a worker whose blocks all fit
    beside one read in flight keeps them all; one whose blocks do not fit streams, with the
    in-flight reserve of streaming.  The figures are a 780 MB worker's on pypi-summaries
    (2 blocks of 45.5 MB, 214 MB free once the libraries are loaded), where the old rule
    (four blocks in flight whatever the worker reads) left 32 MB: no block cached, each pass
    re-read and decoded its block."""
    free, block = 214 * MB, int(45.5 * MB)
    assert cluster.cache_budget(free, [block], block) >= block  # its own block stays
    assert cluster.cache_budget(free, [block, block], block) >= 2 * block  # both, joined too
    streamed = cluster.cache_budget(free, [block] * 10, block)  # far more than it holds
    assert streamed == free - cluster.IN_FLIGHT * block
    assert cluster.cache_budget(free, [block] * 10, block, threads=2) == 0  # two streams


def test_plans_size_each_cache_for_what_the_worker_reads():
    """:func:`distsvm.cluster.assign`: a worker's cache follows the blocks it owns — its own
    share round-robin, every block where problems side by side read them all, and a plan
    given whole keeps its caches."""
    a, b = "tcp://a", "tcp://b"
    block = 40 * MB
    base = cluster.WorkerPlan((a, b) * 2, {a: 0, b: 0}, {a: 1, b: 1}, {},
                              {a: 200 * MB, b: 200 * MB}, (block,) * 4, block)
    assert cluster.assign(base, (a, b) * 2).cache_bytes == {a: 160 * MB, b: 160 * MB}
    assert cluster.assign(base, (a,) * 4).cache_bytes[a] == 160 * MB  # 4 x 40 = 200 - 40
    more = dataclasses.replace(base, owners=(a,) * 5, sizes=(block,) * 5)
    one = cluster.assign(more, (a,) * 5)  # 200 MB > 200 - 40: a streams them
    assert one.cache_bytes == {a: 200 * MB - cluster.IN_FLIGHT * block, b: 160 * MB}
    assert cluster.assign(base, (a, b) * 2, every=True).cache_bytes[b] == 160 * MB  # all 4
    assert base.holds(a, 100 * MB) and not base.holds(a, 101 * MB)  # joined beside its parts
    given = cluster.WorkerPlan((a, b), {a: 5, b: 7})
    assert cluster.assign(given, (b, a)).cache_bytes == {a: 5, b: 7}


@pytest.mark.parametrize("loss", ["squared_hinge", "logistic"])
def test_newton_passes_are_one_call_per_worker_whatever_the_blocks(client, a9a, tmp_path, loss):
    """Newton on 8 blocks over 2 workers: the first evaluation is one call on each worker,
    and each iteration another, counted on the workers — K calls an iteration, not one a
    block or a pass: its passes (Hessian-vector products, the step) add up their sums among
    the workers — and none goes through the scheduler (its task stream has no pass: only
    each worker's Runner); each block is read from the store once in the run."""
    from distributed import get_task_stream

    X, y = a9a
    store = ingest((X, y), str(tmp_path / "s.zarr"), block_rows=X.shape[0] // 8 + 1)
    assert len(store.meta.blocks) == 8
    client.run(distsvm.workers.blocks.clear_cache)
    before = client.run(distsvm.workers.blocks.read_counts)
    calls = client.run(cluster.runner_calls)
    with get_task_stream(client) as ts:
        model = train(store, solver="newton", loss=loss, client=client)
    names = [t["key"].split("-")[0] if isinstance(t["key"], str) else str(t["key"])
             for t in ts.data]
    assert sorted(names) == ["Runner", "Runner"]
    done = client.run(cluster.runner_calls)
    history = model.summary["history"]
    for a in done:  # each worker: one call to evaluate, one an iteration
        new = {k: n - calls[a].get(k, 0) for k, n in done[a].items() if n > calls[a].get(k, 0)}
        assert new == {"evaluate": 1, "iteration": model.summary["rounds"]}
    # the passes inside: each CG step's product, and the step (α = 1 throughout here)
    assert [r["step"] for r in history[1:]] == [1.0] * model.summary["rounds"]
    assert history[-1]["passes"] == 1 + sum(r["cg_iterations"] + 1 for r in history[1:])
    after = client.run(distsvm.workers.blocks.read_counts)
    reads = {k: n - before[a].get(k, 0) for a in after for k, n in after[a].items()
             if k[0] == store.url}
    assert sorted(reads.values()) == [1] * 8


@pytest.mark.slow
def test_a_store_spread_over_workers_stays_decoded_in_their_memory(tmp_path):
    """Two 640 MB workers and a store of 2 blocks of 1/4.5 of what each worker has
    for blocks: each worker caches its own block (the old four-block reserve cached none),
    so a Newton run reads each block once, and sequential dual CD, whose one worker holds
    both, joins them and reads each once."""
    with local_client(2, memory_limit="640MB") as c:
        warm = generate(str(tmp_path / "warm.zarr"), rows=100, features=100, nnz_per_row=5)
        free = cluster.plan(c, 1, None, warm).free  # once the workers have read a block
        block = int(min(free.values()) / 4.5)  # old rule: free - 4 x block < block
        nnz_per_row = 40
        rows = block // (8 * nnz_per_row + 20)
        store = generate(str(tmp_path / "g.zarr"), rows=2 * rows, features=50_000,
                         nnz_per_row=nnz_per_row, block_rows=rows, seed=1)
        assert len(store.meta.blocks) == 2
        for solver, loss in (("newton", "squared_hinge"), ("dcd", "squared_hinge")):
            c.run(distsvm.workers.blocks.clear_cache)
            before = c.run(distsvm.workers.blocks.read_counts)
            model = train(store, solver=solver, loss=loss, client=c, max_rounds=50)
            after = c.run(distsvm.workers.blocks.read_counts)
            reads = sum(n - before[a].get(k, 0) for a in after for k, n in after[a].items()
                        if k[0] == store.url)
            assert reads == 2, (solver, reads)
            assert model.summary["rounds"] > 2
        plan = cluster.plan(c, 2, None, store)
        assert all(plan.cache_bytes[a] >= max(cluster.block_sizes(store.meta))
                   for a in plan.workers)


def _liblinear_objective(X, y, options: str, loss: str) -> float:
    from liblinear.liblinearutil import parameter, problem
    from liblinear.liblinearutil import train as ll_train

    from .conftest import primal_objective

    m = ll_train(problem(y, X.astype(np.float64)), parameter(options + " -q"))
    w = np.array([m.w[i] for i in range(X.shape[1])])
    return primal_objective(w if m.get_labels()[0] == np.max(y) else -w, X, y, loss)


def test_a_store_spread_over_workers_trains_dual_twins_by_newton_on_all_of_them(
        three, client, a9a, tmp_path):
    """-s 1 (dual CD of the squared hinge, LIBLINEAR's primal switch set, as the CLI sets it)
    on a store each of 3 workers holds a share of but none all of it: the primal Newton
    solver on all (its iterations called on each, counted on the workers), said in the log, at
    0.001 x -s 1's tolerance, as near f* as LIBLINEAR's -s 1; where one worker
    holds the store, dual CD as before; spread over 2 workers (jobs.PRIMAL_OWNERS), dual CD
    streamed through one of them, which is faster there."""
    X, y = a9a
    store = ingest((X, y), str(tmp_path / "s.zarr"), block_rows=X.shape[0] // 6 + 1)
    size = max(cluster.block_sizes(store.meta))

    def planned(c, free):  # 2 x size each beside a read fits 5 x size, the 6 joined do not
        plan = cluster.plan(c, 6, None, store)
        return plan, cluster.assign(dataclasses.replace(plan, free={a: free for a in
                                                                    plan.workers}), plan.owners)

    plan, spread = planned(three, 5 * size)
    log = io.StringIO()
    calls = three.run(cluster.runner_calls)
    model = train(store, client=three, plan=spread, loss="squared_hinge",
                  primal_switch=300, progress=Progress(stream=log))
    assert model.solver == "newton" and model.params["eps"] == pytest.approx(1e-4)
    assert "the store spans 3 workers' memory and no one worker holds it" in log.getvalue()
    done = three.run(cluster.runner_calls)
    assert all(done[a]["iteration"] > calls[a].get("iteration", 0) for a in plan.workers)
    f_star = _liblinear_objective(X, y, "-s 2 -e 0.000001", "squared_hinge")
    libc, dual = ctypes.CDLL(None), np.inf
    for k in range(3):  # its permutations come from C's rand(): seeded, as below
        libc.srand(k)
        dual = min(dual, _liblinear_objective(X, y, "-s 1", "squared_hinge"))
    # as near f* as LIBLINEAR's -s 1 (a9a: 0.27 above it, LIBLINEAR's -s 1 0.7-2.8 above)
    assert model.summary["primal_objective"] - f_star <= dual - f_star
    _, held = planned(three, 20 * size)
    assert train(store, client=three, plan=held, loss="squared_hinge").solver == "dcd"
    assert train(store, client=three, plan=spread, loss="squared_hinge", parallel="line",
                 gap_tol=1e-3, C=0.03).solver == "dcd"  # a dual option asked for: dual CD
    _, two = planned(client, 5 * size)  # 3 blocks each: 3 x size beside a read, 4 x size
    log = io.StringIO()
    assert train(store, client=client, plan=two, loss="squared_hinge", primal_switch=300,
                 max_rounds=2, progress=Progress(stream=log)).solver == "dcd"
    assert "streams the store's 6 blocks through one worker" in log.getvalue()


def test_the_log_says_where_sequential_dual_cd_runs_on_a_store_several_workers_own(
        client, a9a, tmp_path):
    """Sequential dual CD of blocks two workers own runs on one of them, and the log says
    which and why: the store joined where that worker's memory holds it, else streamed
    through it (the hinge loss: no primal solver to run on both instead)."""
    X, y = a9a
    store = ingest((X, y), str(tmp_path / "s.zarr"), block_rows=X.shape[0] // 4 + 1)
    plan = cluster.plan(client, 4, None, store)
    assert len(set(plan.owners)) == 2
    size = max(cluster.block_sizes(store.meta))
    for free, said in ((5 * size, "streams the store's 4 blocks through one worker"),
                       (20 * size, "on one worker")):
        log = io.StringIO()
        held = cluster.assign(dataclasses.replace(plan, free={a: free for a in plan.workers}),
                              plan.owners)
        train(store, client=client, plan=held, loss="hinge", max_rounds=2,
              progress=Progress(stream=log))
        (line,) = [t for t in log.getvalue().splitlines() if "one worker" in t]
        assert said in line and any(f"({a})" in line for a in plan.workers), line
        assert ("joined" in line) == (free == 20 * size), line


@pytest.fixture(scope="module")
def three():
    with local_client(3) as c:
        yield c


def _spread(c, store):
    """A plan of ``c``'s workers for ``store`` in which each worker holds its share of the
    blocks (2 of 6) beside a read, and none the joined store beside its parts."""
    plan = cluster.plan(c, len(store.meta.blocks), None, store)
    size = max(cluster.block_sizes(store.meta))
    return cluster.assign(dataclasses.replace(plan, free={a: 5 * size for a in plan.workers}),
                          plan.owners)


# -s, data, loss of the objective; -s 13: LIBLINEAR's own -s 13 ends between 3e-3 and 2.4e-2
# above f* on abalone depending on its permutation (its RNG state): no one "own distance" to
# compare with; -s 4, 5, 6, 21 do not train on the row blocks' plan (Crammer-Singer and the
# one-class SVM on one worker, L1 on the column view)
SPREAD_TYPES = [(0, "a9a", "logistic"), (1, "a9a", "squared_hinge"),
                (2, "a9a", "squared_hinge"),
                pytest.param(3, "a9a", "hinge", marks=pytest.mark.xfail(strict=True, reason=(
                    "issue 27, measured: dual CD streamed through one worker (a store no "
                    "worker holds) ends at 11435.30 with seed 3 (11434.55-11435.73 over "
                    "seeds 0-4), LIBLINEAR's -s 3 at 11434.76-11435.07 over srand 0-4 "
                    "(11434.76-11435.35 over 0-9), "
                    "where it stops at its 300-iteration cap; LIBLINEAR's algorithm run "
                    "by us to its rule (17) on one block ends at 11434.54-11435.87 over "
                    "seeds 0-9: the hinge primal moves by ~1 at these stops"))),
                (7, "a9a", "logistic"),
                (11, "abalone", "squared_epsilon_insensitive"),
                (12, "abalone", "squared_epsilon_insensitive")]


@pytest.mark.parametrize("s, data, loss", SPREAD_TYPES)
def test_every_s_on_three_workers_that_each_hold_a_share(three, client, a9a, tmp_path, s, data,
                                                         loss):
    """Each -s on a 3-worker cluster whose workers each hold a share of the store, none all
    of it: the objective is within LIBLINEAR's own distance to the optimum (no more than
    LIBLINEAR's with its defaults, the worst of its permutations from srand(0..4)) on 3
    workers and on 2, and the same solver with the same seed gives the same w on 2 workers
    (the same objective to rounding where the workers' sums are added in another order).
    On 2, -s 1 stays dual CD (jobs.PRIMAL_OWNERS): Newton's w is compared there by asking for
    it."""
    from distsvm.solvers import registry

    from .conftest import DATA, load_xy, primal_objective, svr_objective

    X, y = a9a if data == "a9a" else load_xy(DATA / "abalone_scale.xz")
    regression = data == "abalone"
    store = ingest((X, y), str(tmp_path / "s.zarr"), block_rows=X.shape[0] // 6 + 1,
                   regression=regression)
    kw = dict(registry.type_params(s), seed=3)  # as the CLI's -s (1, 7, 12: the switch)
    ours = [train(store, client=c, plan=_spread(c, store), **kw) for c in (three, client)]

    def objective(w):
        return svr_objective(w, X, y, loss) if regression else primal_objective(w, X, y, loss)

    from liblinear.liblinearutil import parameter, problem
    from liblinear.liblinearutil import train as ll_train

    prob, own, libc = problem(y, X.astype(np.float64)), [], ctypes.CDLL(None)
    for k in range(5):  # its permutations come from C's rand(): seeded, not the process's
        libc.srand(k)
        m = ll_train(prob, parameter(f"-s {s} -q"))
        w = np.array([m.w[i] for i in range(X.shape[1])])
        own.append(objective(w if regression or m.get_labels()[0] == np.max(y) else -w))
    for model in ours:
        assert objective(model.w) <= max(own) * (1 + 1e-7), (s, model.solver, own)
    if ours[1].solver != ours[0].solver:  # chosen by the cluster's shape (jobs.PRIMAL_OWNERS)
        assert (s, ours[0].solver, ours[1].solver) == (1, "newton", "dcd")
        ours[1] = train(store, client=client, plan=_spread(client, store),
                        **dict(kw, solver="newton", eps=ours[0].params["eps"], primal_switch=None))
    if ours[0].solver == "dcd":  # one worker computes, whatever the cluster: to the bit
        np.testing.assert_array_equal(ours[0].w, ours[1].w)
    else:  # the same iterates to rounding (a CG or line-search test may then go either way)
        assert objective(ours[1].w) == pytest.approx(objective(ours[0].w), rel=1e-6)


def test_newton_on_six_workers_adds_their_replies_up_a_tree(client, a9a, tmp_path):
    """On more than TREE_MIN workers a Newton pass's replies are added up a binary tree on
    the workers (K − 1 additions a pass, counted in the task stream), and the coordinator
    gathers one reply: the same iterations and objective as on 2 workers, to rounding."""
    from distributed import get_task_stream

    from distsvm.solvers import driver

    X, y = a9a
    store = ingest((X, y), str(tmp_path / "s.zarr"), block_rows=X.shape[0] // 6 + 1)
    assert len(store.meta.blocks) == 6 > driver.TREE_MIN
    with local_client(6) as six, get_task_stream(six) as ts:
        model = train(store, client=six, solver="newton", loss="logistic")
    keys = [str(t["key"]) for t in ts.data]
    passes = sum(k.startswith("hess_vec") for k in keys) // 6
    assert passes == sum(row["cg_iterations"] for row in model.summary["history"])
    assert sum(k.startswith("add_replies") for k in keys) == 5 * model.summary["history"][-1]["passes"]
    two = train(store, client=client, solver="newton", loss="logistic")
    assert model.summary["rounds"] == two.summary["rounds"]
    assert model.summary["primal_objective"] == pytest.approx(two.summary["primal_objective"],
                                                              rel=1e-12)


def test_the_simulated_workers_run_newton_groups_as_the_cluster_does(client, a9a, tmp_path):
    """benchmarks/scale.py --simulate: Newton's groups on K simulated workers (members one
    at a time in threads) end at the real 2-worker cluster's objective, a reduction a wave:
    for K = 2, one per pass and one for each call (the first evaluation, an iteration)."""
    import argparse
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "scale.py"
    spec = importlib.util.spec_from_file_location("scale_bench", path)
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    X, y = a9a
    store = ingest((X, y), str(tmp_path / "s.zarr"), block_rows=X.shape[0] // 4 + 1)
    real = train(store, solver="newton", loss="squared_hinge", client=client)
    a = argparse.Namespace(latency=1e-3, bandwidth=1e9, inner_passes=1)
    two = scale.simulate(store.url, 2, 2, a)
    assert two["algorithm"].startswith("newton")
    assert two["primal_objective"] == pytest.approx(real.summary["primal_objective"], rel=1e-12)
    passes = real.summary["history"][-1]["passes"]
    assert two["waves"] == passes + real.summary["rounds"]
    assert two["comm_seconds"] > two["waves"] * 1e-3  # a hop each, and the bytes

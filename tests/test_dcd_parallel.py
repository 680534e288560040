"""Parallel DCD (CoCoA averaging, CoCoA+ adding, the exact line search on the combined step)
on 2- and 3-worker clusters: LIBLINEAR's
optimum on a9a (and ../shared datasets) through the duality-gap certificate, w = Σ αᵢyᵢxᵢ
after combining, and determinism.  (Lost workers: tests/test_dcd_faults.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import distsvm.workers.blocks
import distsvm.workers.dcd
from distsvm.cli import main
from distsvm.ingest import ingest
from distsvm.jobs import train
from distsvm.model import load_model
from distsvm.workers import losses

from .conftest import liblinear_optimum, load_xy, local_client, primal_objective, shared_dataset

C = 0.03  # a9a's dual converges slowly at C = 1; this keeps each run to a few seconds
GAP = 1e-3


@pytest.fixture(scope="module")
def a9a_blocks(tmp_path_factory, a9a):
    """a9a in 8 blocks, so each of 2 workers owns 4 (of 3 workers: 3, 3 and 2)."""
    return ingest(a9a, str(tmp_path_factory.mktemp("par") / "a9a.zarr"), block_rows=4096)


@pytest.fixture(scope="module")
def three():
    """A 3-worker cluster (the session's ``client`` has 2)."""
    with local_client(3) as c:
        yield c


def _cluster(request, n_workers):
    return request.getfixturevalue({2: "client", 3: "three"}[n_workers])


@pytest.mark.parametrize("n_workers", [2, 3])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("parallel", ["average", "add", "line"])
def test_reaches_liblinear_optimum(request, a9a, a9a_blocks, parallel, loss, n_workers):
    X, y = a9a
    _, p_ref = liblinear_optimum(X, y, loss, C=C)
    model = train(a9a_blocks, loss=loss, C=C, eps=1e-9, gap_tol=GAP, max_rounds=1000,
                  parallel=parallel, client=_cluster(request, n_workers))
    s = model.summary
    assert s["converged"] and 0 <= s["duality_gap"] <= GAP * s["primal_objective"]
    p = primal_objective(model.w, X, y, loss, C=C)
    assert p == pytest.approx(s["primal_objective"], rel=1e-9)  # the reported w is the measured one
    assert p_ref * (1 - 1e-9) <= p <= p_ref * (1 + GAP), (p, p_ref)
    # the dual objective is a true lower bound only if w = Σ αᵢyᵢxᵢ holds (weak duality)
    assert s["dual_objective"] <= p_ref * (1 + 1e-9)
    gaps = [h["gap"] for h in s["history"]]
    assert gaps[-1] < 0.01 * gaps[0]


@pytest.mark.parametrize("parallel, K", [("average", 2), ("add", 2), ("add", 3), ("line", 2),
                                         ("line", 3)])
def test_alpha_consistent_with_combined_w(a9a, a9a_blocks, parallel, K):
    """Run the workers' round function for K owners in this process, combine as the
    coordinator does, and check w = Σ αᵢyᵢxᵢ from the α each owner keeps."""
    d = a9a_blocks
    gamma, sigma = {"average": (1.0 / K, 1.0), "add": (1.0, float(K)),
                    "line": (None, 1.0)}[parallel]
    owned = [list(d.meta.blocks[k::K]) for k in range(K)]
    run = f"test-{parallel}-{K}"
    w = np.zeros(d.meta.n_features)
    try:
        for r in range(3):
            results = [distsvm.workers.dcd.local_round(
                w, d.url, infos, [r * 100 + i for i in range(len(infos))], run, gamma=gamma,
                sigma=sigma, bias=-1.0, n_features=d.meta.n_features, loss=losses.HINGE,
                positive=1, class_cost=np.ones(2), eps=1e-9, n_passes=2, cache_bytes=0) for infos in owned]
            dw = np.sum([dw for dw, _ in results], axis=0)
            if gamma is None:  # the line mode: the coordinator's t, then the owners' α
                t = distsvm.workers.dcd.line_step(w, dw, [rep for _, rep in results])
                assert 0 < t <= min(rep["t_max"] for _, rep in results)
                for infos in owned:
                    distsvm.workers.dcd.apply_step(infos, run, t)
                w = w + t * dw
            else:
                w = w + gamma * dw
        expected = np.zeros_like(w)
        for infos in owned:
            for info in infos:
                b = d.read_block(d.meta.blocks.index(info))
                alpha = distsvm.workers.blocks.run_state(run, info.name, dict)["alpha"]
                assert np.all((alpha >= 0) & (alpha <= 1.0))  # the box of the L1-loss dual
                Xb = sp.csr_matrix((b.data, b.indices, b.indptr),
                                   shape=(b.n_rows, d.meta.n_features)).astype(np.float64)
                expected += Xb.T @ (alpha * np.where(b.y == 1, 1.0, -1.0))
        assert np.abs(expected).max() > 0.1  # the rounds moved w
        np.testing.assert_allclose(w, expected, rtol=1e-9, atol=1e-9)
    finally:
        distsvm.workers.blocks.drop_run(run)


def test_same_seed_same_w_and_cli(client, a9a_blocks, tmp_path):
    kw = dict(loss="hinge", C=C, eps=1e-9, gap_tol=GAP, parallel="add", inner_passes=2,
              seed=3, client=client)
    a, b = train(a9a_blocks, **kw), train(a9a_blocks, **kw)
    np.testing.assert_array_equal(a.w, b.w)
    assert a.params["parallel"] == "add"
    assert main(["train", a9a_blocks.url, str(tmp_path / "m"), "--parallel", "add",
                 "--scheduler", client.scheduler.address, "-s", "3", "-c", str(C), "-e", "1e-9",
                 "--gap-tol", str(GAP), "--inner-passes", "2", "--seed", "3", "-q"]) == 0
    np.testing.assert_array_equal(load_model(str(tmp_path / "m")).w, a.w)


@pytest.mark.parametrize("parallel", ["average", "add", "line"])
def test_three_workers_same_seed_same_w(three, a9a_blocks, parallel):
    kw = dict(loss="hinge", C=C, eps=1e-9, max_rounds=15, seed=5, parallel=parallel,
              client=three)
    with pytest.warns(Warning, match="round limit"):
        a, b = train(a9a_blocks, **kw), train(a9a_blocks, **kw)
    np.testing.assert_array_equal(a.w, b.w)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["w8a", "phishing", "a9a"])
def test_shared_datasets_two_and_three_workers(request, tmp_path, name):
    """Each dataset in 6 blocks; each combination of mode, loss and worker count once over
    the three datasets (two per dataset), to keep the time down."""
    X, y = load_xy(shared_dataset(name))
    store = ingest((X, y), str(tmp_path / f"{name}.zarr"), block_rows=-(-X.shape[0] // 6))
    for n_workers, parallel, loss in [(2, "average", "squared_hinge"), (3, "add", "hinge"),
                                      (2, "add", "squared_hinge"), (3, "average", "hinge")]:
        _, p_ref = liblinear_optimum(X, y, loss, C=C)
        model = train(store, loss=loss, C=C, eps=1e-9, gap_tol=GAP, max_rounds=2000,
                      parallel=parallel, client=_cluster(request, n_workers))
        p = primal_objective(model.w, X, y, loss, C=C)
        assert model.summary["converged"], (name, parallel, loss)
        assert p_ref * (1 - 1e-9) <= p <= p_ref * (1 + GAP), (name, parallel, loss, p, p_ref)


def test_line_step_minimizes_the_dual_along_the_combined_change():
    """:func:`distsvm.workers.dcd.line_step` against the dual objective ½‖Σαᵢyᵢxᵢ‖² + ½ΣDᵢᵢαᵢ² − Σαᵢ
    computed in NumPy along α + tΔα on a grid: the same minimizer over [0, t_max], for both
    losses, with t_max binding or not."""
    rng = np.random.default_rng(4)
    X = sp.random(60, 15, density=0.3, random_state=5, format="csr")
    y = np.where(rng.random(60) < 0.5, 1.0, -1.0)
    cost = np.full(60, 0.7)
    for loss in (losses.HINGE, losses.SQUARED_HINGE):
        D = 0.0 if loss == losses.HINGE else 0.5 / cost
        upper = cost if loss == losses.HINGE else np.full(60, np.inf)
        for scale in (0.05, 3.0):  # a step inside the box, and one the box cuts
            alpha = rng.uniform(0, 0.6, 60)
            delta = np.clip(alpha + scale * rng.standard_normal(60), 0, upper) - alpha
            w, dw = X.T @ (alpha * y), X.T @ (delta * y)
            lin, quad, t_max = distsvm.workers.kernels.dcd.step_terms(alpha, delta, loss, cost)
            t = distsvm.workers.dcd.line_step(w, dw, [{"lin": lin, "quad": quad, "t_max": t_max}])

            def dual(tt):
                a = alpha + tt * delta
                v = X.T @ (a * y)
                return 0.5 * v @ v + 0.5 * np.sum(D * a * a) - a.sum()

            grid = np.linspace(0.0, min(t_max, 50.0), 20001)
            best = grid[np.argmin([dual(tt) for tt in grid])]
            assert abs(t - best) <= 2 * grid[1] + 1e-12, (loss, scale, t, best)
            assert np.all(alpha + t * delta >= -1e-12) and np.all(alpha + t * delta <= upper + 1e-12)


def test_bad_parallel_is_refused(a9a_blocks):
    with pytest.raises(ValueError, match="'parallel' parameter of train must be one of"):
        train(a9a_blocks, parallel="sum")
    with pytest.raises(ValueError, match="'parallel' parameter of train belongs to solver 'dcd'"):
        train(a9a_blocks, solver="alm", loss="hinge", parallel="add")

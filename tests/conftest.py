"""Shared fixtures: one real 2-worker LocalCluster for the session, datasets, LIBLINEAR references."""

from __future__ import annotations

import lzma
import pathlib
import subprocess

import numpy as np
import pytest

from distsvm.testing import Killer, local_client  # noqa: F401 - the fault tests take them here

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA = REPO / "data"
SHARED = REPO.parent / "shared" / "datasets"


def shared_dataset(name: str) -> pathlib.Path:
    """Path of a ../shared dataset, or skip the test when it is absent (a user's fresh clone)."""
    path = SHARED / f"{name}.xz"
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


def load_xy(path, n_features=None):
    from sklearn.datasets import load_svmlight_file

    with lzma.open(path) as f:
        X, y = load_svmlight_file(f, n_features=n_features)
    return X.astype(np.float32).tocsr(), y


def data_lines(name: str, n: int | None = None) -> list[str]:
    """The first ``n`` lines (every line without ``n``) of the shipped ``data/NAME.xz``."""
    with lzma.open(DATA / f"{name}.xz", "rt") as f:
        return f.readlines() if n is None else [next(f) for _ in range(n)]


def dna_rows(n: int):
    """The first ``n`` rows of the shipped Statlog DNA (3 classes, 180 binary features): the
    multi-class data of the fault and thread tests."""
    X, y = load_xy(DATA / "dna.scale.xz", 180)
    return X[:n], y[:n]


@pytest.fixture(scope="module")
def two():
    """A 2-worker cluster of the test module's own, for the fault tests: the session's
    would lose a worker to them."""
    with local_client(2) as c:
        yield c


@pytest.fixture(scope="session")
def client():
    with local_client(2) as c:
        yield c


@pytest.fixture(scope="session")
def a9a():
    return load_xy(DATA / "a9a.xz", n_features=123)


def primal_objective(w, X, y, loss, C=1.0, bias=-1.0):
    """LIBLINEAR's ½‖w‖² + C Σ loss, computed independently in NumPy (float64)."""
    positive = np.max(y)
    s = np.where(y == positive, 1.0, -1.0)
    dv = X.astype(np.float64) @ w[: X.shape[1]]
    if bias >= 0:
        dv = dv + w[X.shape[1]] * bias
    if loss == "logistic":
        return 0.5 * float(w @ w) + C * float(np.sum(np.logaddexp(0.0, -s * dv)))
    xi = np.maximum(0.0, 1.0 - s * dv)
    return 0.5 * float(w @ w) + C * float(np.sum(xi if loss == "hinge" else xi * xi))


def liblinear_optimum(X, y, loss, C=1.0, bias=-1.0, eps=1e-5):
    """LIBLINEAR's weights (positive class = the larger label, as distsvm) and primal objective."""
    from liblinear.liblinearutil import parameter, problem, train

    s = {"hinge": 3, "squared_hinge": 1, "logistic": 0}[loss]
    m = train(problem(y, X.astype(np.float64)), parameter(f"-s {s} -c {C} -e {eps} -B {bias} -q"))
    w = np.array([m.w[i] for i in range(X.shape[1] + (1 if bias >= 0 else 0))])
    if m.get_labels()[0] != np.max(y):
        w = -w
    return w, primal_objective(w, X, y, loss, C, bias)


def svr_objective(w, X, y, loss="squared_epsilon_insensitive", C=1.0, p=0.1, bias=-1.0):
    """LIBLINEAR's SVR primal ½‖w‖² + C Σ ξ(wᵀxᵢ − yᵢ), ξ(r) = max(0, |r| − p) (L1 loss) or
    its square (L2 loss; Fan et al. 2008, A.6 (9)), computed independently in NumPy."""
    dv = X.astype(np.float64) @ w[: X.shape[1]]
    if bias >= 0:
        dv = dv + w[X.shape[1]] * bias
    xi = np.maximum(0.0, np.abs(dv - y) - p)
    return 0.5 * float(w @ w) + C * float(np.sum(xi if loss == "epsilon_insensitive" else xi * xi))


def liblinear_svr_optimum(X, y, options: str, loss="squared_epsilon_insensitive", C=1.0,
                          p=0.1, bias=-1.0):
    """LIBLINEAR's SVR weights for ``options`` (e.g. "-s 11 -e 1e-10") and their objective."""
    from liblinear.liblinearutil import parameter, problem, train

    m = train(problem(y, X.astype(np.float64)),
              parameter(f"{options} -c {C} -p {p} -B {bias} -q"))
    w = np.array([m.w[i] for i in range(X.shape[1] + (1 if bias >= 0 else 0))])
    return w, svr_objective(w, X, y, loss, C, p, bias)


def weighted_stores(tmp, X, y, seed: int, block_rows: int, dup_block_rows: int):
    """Integer instance weights 1–3 (seeded) for rows (X, y): the weights, a weighted store
    and a store with each row repeated weight times (weighted = duplicated rows)."""
    from distsvm.ingest import ingest

    sw = np.random.default_rng(seed).integers(1, 4, X.shape[0]).astype(np.float64)
    rows = np.repeat(np.arange(X.shape[0]), sw.astype(int))
    store = ingest((X, y), str(tmp / "w.zarr"), block_rows=block_rows, sample_weight=sw)
    dup = ingest((X[rows], y[rows]), str(tmp / "dup.zarr"), block_rows=dup_block_rows)
    return sw, store, dup


@pytest.fixture(scope="module")
def small(a9a):
    """The fault tests' data: 3,000 rows of a9a in 6 blocks (each of 3 workers owns 2)."""
    X, y = a9a
    return X[:3000], y[:3000]


@pytest.fixture(scope="module")
def small_store(tmp_path_factory, small):
    from distsvm.ingest import ingest

    return ingest(small, str(tmp_path_factory.mktemp("faults") / "s.zarr"), block_rows=500)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    """``(cert, key)``: a self-signed certificate for 127.0.0.1 (its own CA) and its key."""
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True)
    return str(d / "cert.pem"), str(d / "key.pem")

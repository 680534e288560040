"""The README's quick start and every example of the docs, run as written (issue 29).

Every fenced code block of ``README.md`` and ``docs/**/*.md`` (and every indented block that
is a ``distsvm`` or ``python`` command) is either in :data:`EXAMPLES`, run here, or in
:data:`SKIPPED` with the reason; a block in neither, or an entry whose block is gone, fails
:func:`test_every_block_is_run_or_skipped_with_a_reason`.  A block runs in a directory of its
own: shell blocks with ``bash -e``, Python blocks with ``python``, job and pipeline specs with
``distsvm run`` / ``distsvm pipeline run``.  What changes is named in the block's entry: the
placeholders (``STORE``, ``MODEL``, ``/data/…``, the arrays ``X``, ``y`` a snippet assumes)
made real, and nothing else; the block fails the test if its command fails or its output lacks
what the docs say it prints.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from .conftest import DATA, REPO, data_lines

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
BIN = pathlib.Path(sys.executable).parent  # distsvm, python, python3 of this environment


@dataclasses.dataclass(frozen=True)
class Block:
    file: str  # relative to the repository
    line: int  # of its first line of code
    lang: str  # the fence's info string ("" for none or an indented block)
    code: str

    nth: int = 1  # of the blocks of its file with this first line

    @property
    def key(self) -> tuple[str, str]:
        """(file, first line, "#n" after it for the n-th block of the file with that first
        line): the block's name here, stable when lines above it move."""
        first = self.code.strip().splitlines()[0].strip()
        return self.file, first + (f"#{self.nth}" if self.nth > 1 else "")


def blocks() -> list[Block]:
    out = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        rel = str(path.relative_to(REPO))
        i = 0
        while i < len(lines):
            fence = re.match(r"^```(\S*)\s*$", lines[i])
            if fence:
                j = i + 1
                while not lines[j].startswith("```"):
                    j += 1
                out.append(Block(rel, i + 2, fence[1], "\n".join(lines[i + 1:j]) + "\n"))
                i = j + 1
                continue
            if (re.match(r"^    (distsvm|python) ", lines[i]) and (i == 0 or not lines[i - 1].strip())):
                j = i
                while j < len(lines) and lines[j].startswith("    "):
                    j += 1
                out.append(Block(rel, i + 1, "", "\n".join(x[4:] for x in lines[i:j]) + "\n"))
                i = j
                continue
            i += 1
    seen: dict = {}
    for k, b in enumerate(out):
        seen[b.key] = seen.get(b.key, 0) + 1
        out[k] = dataclasses.replace(b, nth=seen[b.key])
    return out


# ---------------------------------------------------------------- what the blocks need
def _cli(*args, cwd=None):
    p = subprocess.run([str(BIN / "distsvm"), *args, "-q"], capture_output=True, text=True,
                       cwd=cwd, timeout=600)
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Stores the blocks' placeholders stand for: a9a and a9a.t (as the quick start makes
    them), dna.scale and dna.scale.t (3 classes), a logistic model of dna."""
    d = tmp_path_factory.mktemp("docs-data")
    for src, store, extra in (("a9a.xz", "a9a.zarr", []), ("a9a.t.xz", "a9a.t.zarr", []),
                              ("dna.scale.xz", "dna.zarr", ["--n-features", "180"]),
                              ("dna.scale.t.xz", "dna.t.zarr", ["--n-features", "180"])):
        _cli("ingest", str(DATA / src), str(d / store), *extra)
    _cli("train", str(d / "dna.zarr"), str(d / "dna-lr.model"), "-s", "0")
    return d


def _link(shared: pathlib.Path, d: pathlib.Path, names: dict) -> None:
    """``d/PATH`` a symlink to ``shared/TARGET`` for each {PATH: TARGET} (folders made)."""
    for name, target in names.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(shared / target, d / name)


def _tables(d: pathlib.Path, csv: bool = False) -> None:
    """Tabular files of dna's first rows: data.parquet, data/ of Parquet (or CSV) pieces
    with label column y, sparse.parquet (label, list columns idx, val)."""
    import pandas as pd
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(_dna_text(d)), n_features=180)
    X, y = X[:600], y[:600]
    frame = pd.DataFrame(X.toarray(), columns=[f"f{j}" for j in range(180)]).assign(y=y)
    frame.to_parquet(d / "data.parquet")
    (d / "data").mkdir(exist_ok=True)
    for k, part in enumerate((frame[:300], frame[300:])):
        if csv:
            part.to_csv(d / "data" / f"part-{k}.csv", index=False)
        else:
            part.to_parquet(d / "data" / f"part-{k}.parquet")
    pd.DataFrame({"y": y, "idx": [r.indices for r in X], "val": [r.data for r in X]}
                 ).to_parquet(d / "sparse.parquet")


def _dna_text(d: pathlib.Path) -> pathlib.Path:
    path = d / "dna.svm"
    if not path.exists():
        path.write_text("".join(data_lines("dna.scale")))
    return path


# Python snippets that use arrays they do not make: these lines make them (dna's rows)
NUMPY_XY = """
import numpy as np
from sklearn.datasets import load_svmlight_file
X, y = load_svmlight_file("dna.svm", n_features=180)
X, y = X[:1500], y[:1500]
X_test = X[1000:]
"""
A9A_XY = f"""
import lzma
from sklearn.datasets import load_svmlight_file
X, y = load_svmlight_file(lzma.open({str(DATA / "a9a.xz")!r}), n_features=123)
X, y = X[:3000], y[:3000]
X_test, _ = load_svmlight_file(lzma.open({str(DATA / "a9a.t.xz")!r}), n_features=123)
"""
DASK_XY = NUMPY_XY + """
import dask.array as da, dask.dataframe as dd
import pandas as pd
X = da.from_array(X.toarray(), chunks=(500, 180))
y = da.from_array(y, chunks=500)
X_test = X[1000:]
t = X[:, :3].sum(axis=1)                       # a regression target
cols = [f"f{j}" for j in range(180)]
df = dd.from_pandas(pd.read_parquet("data.parquet"), npartitions=2)
"""


@dataclasses.dataclass(frozen=True)
class Example:
    """How a block runs: ``setup(d, shared)`` makes its placeholders' files in its
    directory ``d``; ``subs`` (text, replacement with {d} for the directory) makes its
    placeholders real; ``drop``: lines not run, for the reason given; ``lines``: the
    block's lines are alternatives, each run on its own (with ``STORE`` a new store each);
    ``optional``: "keep" or "drop" the block's ``[...]`` arguments; ``preamble``: Python
    run before a snippet that uses names it does not define; ``command``: how a YAML spec
    runs; ``expect``: text the output must contain."""

    setup: object = None
    subs: tuple = ()
    drop: tuple = ()  # (line prefix, reason)
    lines: bool = False
    optional: str | None = None
    preamble: str = ""
    command: str | None = None
    expect: tuple = ()
    slow: bool = False


SKIPPED = {  # (file, first line): why it is not run here
    ("README.md", "distsvm ingest SOURCE STORE   LIBSVM/svmlight text (plain, .gz, .bz2, .xz) "
                  "into a dataset store"):
        "the synopsis of every command (forms and descriptions, not commands); the other "
        "blocks run them",
    **{("docs/benchmarks.md", first): "a benchmark measurement: ../shared datasets (pypi-"
                                      "summaries, news20, w8a, …), hours of machine time; its "
                                      "results are the tables beside it"
       for first in ("cd /work/tmp-race   # the --json-out files below are written here",
                     'R="nice -n 5 python benchmarks/race.py --work /work/tmp-race '
                     '--multicore-python /work/venv-mc/bin/python"',
                     'R="nice -n 5 python benchmarks/race.py --work /work/tmp-race '
                     '--multicore-python /work/venv-mc/bin/python"#2',
                     'R="nice -n 5 python benchmarks/race.py --tools liblinear distsvm '
                     'distsvm-1w --repeats 3 --work /work/tmp-race18"',
                     "python benchmarks/bench_l1_parallel.py --data news20 --classes 1 "
                     "--block-mb 1 --work /work/tmp-h18g",
                     "python benchmarks/bench_dcd.py --datasets a9a pypi-summaries --repeats 3",
                     "python benchmarks/scale.py --simulate 1 2 4 8 16 32 --data pypi32.zarr "
                     "--s 2 1 3 --json scale-pypi.json",
                     "python benchmarks/scale.py --real --data pypi-summaries --s 0 1 2 3 "
                     "--cluster-memory 780MB \\",
                     "python benchmarks/race.py --beyond-memory --bm-rows 5200000 "
                     "--bm-workers 1 \\",
                     "python benchmarks/race.py --anytime pypi-summaries --bm-workers 1 "
                     "--bm-memory-limit 4GB \\",
                     "distsvm generate s5200k-lz4.zarr --rows 5200000 --features 100000 "
                     "--nnz-per-row 100 --seed 7 --block-rows 20000 -q",
                     "python benchmarks/bench_early_stopping.py pypi.zarr pypi.t.zarr "
                     "--repeat 7",
                     "python benchmarks/bench_smoothed_hinge.py ../shared/datasets/a9a.xz")},
    ("docs/benchmarks.md", "distsvm ingest ../shared/datasets/pypi-summaries.xz pypi.zarr"):
        "a benchmark measurement on the ../shared dataset pypi-summaries",
    ("docs/solvers/alm.md", "python benchmarks/bench_alm.py --datasets a9a w8a pendigits-lt5 "
                            "pendigits-0 pypi-summaries \\"):
        "a benchmark measurement on ../shared datasets",
    ("docs/solvers/alm.md", "python benchmarks/bench_alm.py --datasets --scaling "
                            "pypi-summaries --alm-iters 130"):
        "a benchmark measurement on ../shared datasets and 10M generated rows",
    ("docs/solvers/cutting_plane.md", "python benchmarks/bench_cutting_plane.py --scaling "
                                      "pypi-summaries --generated 100000 1000000 3000000 \\"):
        "a benchmark measurement on ../shared datasets and 10M generated rows",
    ("docs/solvers/pcd.md", "python benchmarks/bench_pcd.py --datasets a9a w8a --repeats 5"):
        "a benchmark measurement on ../shared datasets (w8a, pypi-summaries)",
    ("docs/deploy.md", "docker build -f deploy/Dockerfile -t distsvm:latest ."):
        "needs Docker (tests/test_deploy.py checks the Dockerfile's commands)",
    ("docs/deploy.md", "docker compose -f deploy/docker-compose.yml up --build "
                       "--abort-on-container-exit train"):
        "needs Docker and a compose cluster (tests/test_deploy.py checks the compose file)",
    ("docs/deploy.md", "distsvm ingest data/a9a.xz s3://bucket/a9a.zarr --storage-option "
                       "endpoint_url=http://minio:9000 \\"):
        "needs the S3 endpoint http://minio:9000 of the compose cluster (tests/test_s3.py runs "
        "ingest/train on s3:// against a moto server)",
    ("docs/storage-format.md", 'STORE/zarr.json                 group; attributes["distsvm"] '
                               "= the header below (written last)"):
        "a file layout, not a command",
    ("docs/storage-format.md", "STORE/cols/y                    int32   (n_rows,)        one "
                               "chunk   class index of every row, global row order"):
        "a file layout, not a command",
    ("docs/jobs.md", "import mlflow"):
        "needs an MLflow server holding the model: tests/test_mlflow.py loads "
        "models:/NAME@champion from a real one and predicts with it",
}


def _quick_start(d, shared):
    os.symlink(DATA, d / "data")  # the repository's data/: the README runs from its root


def _a9a_store(d, shared):
    _link(shared, d, {"a9a.zarr": "a9a.zarr"})


def _dna_setup(d, shared):
    _dna_text(d)


def _readme_python(d, shared):
    _link(shared, d, {"data/a9a.zarr": "a9a.zarr", "data/a9a.t.zarr": "a9a.t.zarr"})
    shutil.copy(DATA / "dna.scale.xz", d / "big.svm.xz")  # the file the snippet names


def _dask_readme(d, shared):
    _dna_text(d)
    _tables(d)


def _tabular_cli(d, shared):
    _dna_text(d)
    _tables(d)
    shutil.copy(shared / "dna-lr.model", d / "m.model")  # a logistic model: -b 1


def _tabular_commands(d, shared):
    _dna_text(d)
    _tables(d, csv=True)
    shutil.copyfile(d / "data.parquet", d / "data-dense.parquet")


def _tabular_dask(d, shared):
    _dna_text(d)
    _tables(d)


def _job(d, shared):
    (d / "data").mkdir()  # a copy: the runs are written inside the training store
    shutil.copytree(shared / "a9a.zarr", d / "data" / "a9a.zarr", symlinks=True)
    _link(shared, d, {"data/a9a-test.zarr": "a9a.t.zarr"})


def _pipeline(d, shared):
    (d / "incoming" / "a9a" / "2026-11-27").mkdir(parents=True)
    (d / "incoming" / "a9a" / "2026-11-27" / "part-0.svm").write_text("".join(data_lines("a9a", 6000)))
    _link(shared, d, {"data/a9a-holdout.zarr": "a9a.t.zarr"})


def _stores(d, shared):
    _link(shared, d, {"store.zarr": "dna.zarr", "test.zarr": "dna.t.zarr"})


def _anytime(d, shared):
    _dna_text(d)
    _link(shared, d, {"store.zarr": "dna.zarr", "valid.zarr": "dna.t.zarr"})


def _predict_out(d, shared):
    _link(shared, d, {"store.zarr": "dna.t.zarr"})
    shutil.copy(shared / "dna-lr.model", d / "lr.model")


def _finished_job(d, shared):
    """docs/jobs.md's example job, run once for the module (run id RUN-ID) in
    ``shared/job``; ``d/data`` and ``d/models`` lead there."""
    job = shared / "job"
    if not (job / "models").exists():
        job.mkdir(exist_ok=True)
        _job(job, shared)
        (job / "job.yaml").write_text(_job_spec(job))
        p = subprocess.run([str(BIN / "distsvm"), "run", "job.yaml", "--run-id", "RUN-ID",
                            "-q"], cwd=job, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
    for name in ("data", "models"):
        os.symlink(job / name, d / name)


def _job_spec(d) -> str:
    (block,) = [b for b in blocks() if b.key == ("docs/jobs.md", "name: a9a                 "
                                                 "       # the model's name in the registry")]
    return _rewrite(block.code, EXAMPLES[block.key].subs, d)


DIRS = (("/data/", "{d}/data/"), ("/models/", "{d}/models/"), ("/scratch/", "{d}/scratch/"))
EXAMPLES = {
    ("README.md", "python3 -m pip install . && distsvm ingest data/a9a.xz /tmp/a9a.zarr "
                  "--overwrite && distsvm ingest data/a9a.t.xz /tmp/a9a.t.zarr --overwrite && "
                  "distsvm train /tmp/a9a.zarr /tmp/a9a.model && distsvm predict /tmp/a9a.t.zarr "
                  "/tmp/a9a.model"):
        Example(_quick_start,
                subs=(("python3 -m pip install . && ", ""),  # this environment has it
                      ("/tmp/", "{d}/")),
                drop=(('python3 -m pip install ".[test]"',
                       "the test suite itself: .ci/run runs this line"),),
                expect=("Accuracy = 84.9", "123 features", "122")),
    ("README.md", "import distsvm"):  # the first Python block
        Example(_readme_python, subs=(("/data/", "{d}/data/"),), preamble=A9A_XY),
    ("README.md", "import distsvm#2"):  # the plain script
        Example(_quick_start, subs=(("/tmp/", "{d}/"),), expect=("Accuracy = 84.9",)),
    ("README.md", "clf = distsvm.LogisticRegression().fit(X, y)        # X, y dask arrays: "
                  "the in-memory model"):
        Example(_dask_readme, preamble="import distsvm\n" + DASK_XY),
    ("README.md", "distsvm ingest data/ train.zarr --label y                       # "
                  "Parquet/CSV file, directory or glob; s3:// too"):
        Example(_tabular_cli),
    ("docs/benchmarks.md", "for i in 1 2 3 4 5 6 7; do uptime; /usr/bin/time -f \"%e s wall, "
                           "%U+%S s cpu\" \\"):
        Example(_a9a_store, subs=(("/tmp/", "{d}/"),), slow=True),
    ("docs/benchmarks.md", "import time"): Example(slow=True),
    ("docs/benchmarks.md", "import sys, time"): Example(),
    ("docs/jobs.md", "name: a9a                        # the model's name in the registry"):
        Example(_job, subs=DIRS, command="distsvm run {file}",
                expect=("run: test accuracy", "registered"), slow=True),
    ("docs/jobs.md", "distsvm resume /data/a9a.zarr/runs/20261123T010000Z-1a2b3c4d"):
        Example(_finished_job, subs=(("20261123T010000Z-1a2b3c4d", "RUN-ID"), *DIRS),
                expect=("has finished",), slow=True),
    ("docs/jobs.md", "distsvm registry list REGISTRY [NAME]"):
        Example(_finished_job, lines=True, optional="keep", slow=True,
                subs=(("REGISTRY", "models/registry"), ("NAME", "a9a"), ("VERSION", "1"))),
    ("docs/jobs.md", "mlflow:"):
        Example(command="spec fragment"),  # checked against the job schema (no server here)
    ("docs/model-selection.md", "distsvm train STORE -v 5 [-s 1|3|...] [-c C]     # Cross "
                                "Validation Accuracy = 84.86%"):
        Example(_stores, lines=True, optional="drop", subs=(("STORE", "store.zarr"),),
                expect=("Cross Validation Accuracy", "Best C"), slow=True),
    ("docs/pipeline.md", "name: a9a                                  # model name in the "
                         "registry"):
        Example(_pipeline, subs=(("{{ ds }}", "2026-11-27"),  # Airflow's template
                                 ("/incoming/", "{d}/incoming/"), *DIRS),
                command="distsvm pipeline run {file}", expect=("promoted",), slow=True),
    ("docs/solvers/cutting_plane.md", "distsvm train STORE MODEL --solver cutting-plane -c "
                                      "0.05            # C on the sum of losses"):
        Example(_stores, lines=True, subs=(("STORE", "store.zarr"), ("MODEL", "model"))),
    ("docs/solvers/cutting_plane.md", "distsvm train STORE MODEL --solver cutting-plane "
                                      "--objective ordinal --c-perf 1"):
        Example(_stores, subs=(("TEST_STORE", "test.zarr"), ("STORE", "store.zarr"),
                               ("MODEL", "ranks.model")), expect=("rank accuracy",)),
    ("docs/tabular.md", 'pd.DataFrame({"label": y, "idx": [row.indices for row in X], "val": '
                        '[row.data for row in X]}'):
        Example(_dna_setup, preamble=NUMPY_XY + "import pandas as pd\n"),
    ("docs/tabular.md", "distsvm ingest data.parquet STORE --label y                 # one "
                        "file"):
        Example(_tabular_commands, lines=True,
                drop=(("distsvm ingest s3://", "needs an S3 endpoint (tests/test_s3.py runs "
                                               "ingest on s3:// against a moto server)"),)),
    ("docs/tabular.md", "import dask.array as da, dask.dataframe as dd, distsvm"):
        Example(_tabular_dask, preamble=DASK_XY),
    ("docs/anytime.md", "distsvm train STORE MODEL --validation VALID_STORE "
                        "[--validation-metric accuracy|mse|auc|pairwise_accuracy]"):
        Example(_stores, lines=True, optional="drop",
                subs=(("VALID_STORE", "test.zarr"), ("STORE", "store.zarr"), ("MODEL", "model"))),
    ("docs/anytime.md", "clf = distsvm.LinearSVC(early_stopping=True, validation_fraction=0.1, "
                        "n_iter_no_change=5,"):
        Example(_anytime, preamble=NUMPY_XY + "import distsvm\nfrom distsvm.storage import "
                                              "open_dataset\nds = open_dataset('store.zarr')\n"),
    ("docs/tabular.md", "distsvm predict STORE MODEL --output preds.parquet [-b 1]"):
        Example(_predict_out, lines=True, optional="keep",
                subs=(("STORE", "store.zarr"), ("MODEL", "lr.model"))),
}


def _rewrite(code: str, subs, d) -> str:
    for old, new in subs:
        code = code.replace(old, new.format(d=d))
    return code


def _cases():
    out = []
    for b in blocks():
        if b.key in EXAMPLES:
            ex = EXAMPLES[b.key]
            marks = [pytest.mark.slow] if ex.slow else []
            out.append(pytest.param(b, ex, id=f"{b.file}:{b.line}", marks=marks))
    return out


def test_every_block_is_run_or_skipped_with_a_reason():
    found = [b.key for b in blocks()]
    assert len(found) > 20
    unknown = [k for k in found if k not in EXAMPLES and k not in SKIPPED]
    assert not unknown, f"blocks neither run nor skipped with a reason: {unknown}"
    assert not set(EXAMPLES) & set(SKIPPED)
    gone = [k for k in [*EXAMPLES, *SKIPPED] if k not in found]
    assert not gone, f"entries whose block is not in the docs any more: {gone}"


def _env() -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1"}


def _run(args, d, timeout=600) -> str:
    p = subprocess.run(args, cwd=d, capture_output=True, text=True, env=_env(),
                       timeout=timeout)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{' '.join(map(str, args))} failed ({p.returncode}):\n{out[-3000:]}"
    return out


@pytest.mark.parametrize("block, example", _cases())
def test_example_runs_as_written(block, example, shared, tmp_path):
    d = tmp_path
    if example.setup is not None:
        example.setup(d, shared)
    code = _rewrite(block.code, example.subs, d)
    lines = [line for line in code.splitlines()
             if not any(line.startswith(prefix) for prefix, _ in example.drop)]
    if example.optional:  # [ARGS]: given (keep) or left out (drop)
        lines = [re.sub(r"\s*\[([^\]]*)\]", r" \1" if example.optional == "keep" else "", x)
                 for x in lines]
    code = "\n".join(lines) + "\n"
    if example.command == "spec fragment":
        pytest.importorskip("mlflow", reason="mlflow is not installed (the mlflow extra)")
        import yaml

        from distsvm import mlflow_registry, spec

        doc = {"data": {"train": "a.zarr"}, **yaml.safe_load(code)}
        spec.validate(doc, "job", block.file)
        mlflow_registry.check(doc["mlflow"], block.file, None, spec.SpecError)
        return
    if block.lang == "python":
        (d / "example.py").write_text(example.preamble + code)
        out = _run([sys.executable, "example.py"], d)
    elif block.lang == "yaml":
        (d / "spec.yaml").write_text(code)
        out = _run(["bash", "-c", example.command.format(file="spec.yaml")], d)
    elif example.lines:
        out = ""
        for k, line in enumerate(x for x in lines if x.strip()):
            line = re.sub(r"\bSTORE\b", f"store-{k}.zarr", line)
            out += _run(["bash", "-e", "-o", "pipefail", "-c", line], d)
    else:
        (d / "example.sh").write_text(code)
        out = _run(["bash", "-e", "-o", "pipefail", "example.sh"], d)
    for text in example.expect:
        assert text in out, f"{block.file}:{block.line}: {text!r} not in the output:\n{out[-3000:]}"

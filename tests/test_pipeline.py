"""The scheduled batch pipeline: idempotent appends, promotion only if not worse, exit codes;
and the store-level append it rests on."""

from __future__ import annotations

import json
import lzma
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from distsvm import pipeline, registry
from distsvm.ingest import ingest
from distsvm.progress import Progress
from distsvm.storage import open_dataset
from distsvm.storage.dataset import append
from distsvm.storage.errors import InputDataError

from .conftest import DATA

SOLVER = {"solver": "newton", "loss": "squared_hinge"}  # converges: more data, not worse


def _lines(start, stop):
    with lzma.open(DATA / "a9a.xz", "rt") as f:
        return [line for i, line in enumerate(f) if start <= i < stop] if stop else []


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("pipeline")
    rows = _lines(0, 4000)
    (d / "p1.svm").write_text("".join(rows[:1500]))
    (d / "p2.svm").write_text("".join(rows[1500:3000]))
    # a bad interval: the first 3000 rows again with every label flipped
    flipped = [("-1" if r.startswith("+1") else "+1") + r[2:] for r in rows[:3000]]
    (d / "p3-flipped.svm").write_text("".join(flipped))
    (d / "hold.svm").write_text("".join(rows[3000:]))
    ingest(str(d / "hold.svm"), str(d / "hold.zarr"), n_features=123)
    return d


def _spec(tmp_path, files, partitions) -> dict:
    (tmp_path / "in").mkdir(exist_ok=True)
    for p in partitions:
        (tmp_path / "in" / p).write_bytes((files / p).read_bytes())
    return {"name": "a9a", "dataset": str(tmp_path / "data.zarr"),
            "partitions": str(tmp_path / "in" / "*.svm"), "holdout": str(files / "hold.zarr"),
            "registry": str(tmp_path / "registry"), "ingest": {"block_rows": 500,
                                                               "n_features": 123},
            "solver": SOLVER, "source": str(tmp_path / "pipeline.yaml")}


def _tree(root: pathlib.Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_rerun_is_a_no_op_and_a_worse_candidate_is_not_promoted(tmp_path, files, client):
    progress = Progress(quiet=True)
    spec = _spec(tmp_path, files, ["p1.svm"])
    code, out = pipeline.run(spec, progress, client=client)
    assert (code, out["version"], out["promoted"]) == (0, 1, True)
    before = _tree(tmp_path)
    code, out = pipeline.run(spec, progress, client=client)  # the same interval again
    assert (code, out["version"]) == (0, 1)
    assert _tree(tmp_path) == before  # nothing changed: no block, no version, no pointer

    spec = _spec(tmp_path, files, ["p1.svm", "p2.svm"])
    code, out = pipeline.run(spec, progress, client=client)
    assert (code, out["version"], out["promoted"]) == (0, 2, True)
    d = open_dataset(spec["dataset"])
    assert d.meta.n_rows == 3000 and [r["partition"] for r in d.meta.source["appended"]] == \
        ["p1.svm", "p2.svm"]
    d.verify()

    spec = _spec(tmp_path, files, ["p1.svm", "p2.svm", "p3-flipped.svm"])
    code, out = pipeline.run(spec, progress, client=client)
    assert (code, out["version"], out["promoted"]) == (pipeline.EXIT_NOT_PROMOTED, 3, False)
    assert "<" in out["reason"] and "current v2" in out["reason"]
    assert registry.current_version(spec["registry"], "a9a") == 2
    rec = registry.show(spec["registry"], "a9a", 3)
    assert rec["metrics"]["holdout_accuracy"] < rec["metrics"]["current_holdout_accuracy"]
    assert rec["lineage"]["dataset_fingerprint"] == registry.fingerprint(
        open_dataset(spec["dataset"]))
    before = _tree(tmp_path)
    assert pipeline.run(spec, progress, client=client)[0] == pipeline.EXIT_NOT_PROMOTED
    assert _tree(tmp_path) == before

    # the same partition name with other content is refused
    (tmp_path / "in" / "p2.svm").write_bytes((files / "p1.svm").read_bytes())
    with pytest.raises(InputDataError, match="p2.svm was ingested .* partitions are immutable"):
        pipeline.run(spec, progress, client=client)


def test_append_maps_labels_and_keeps_the_store_checked(tmp_path):
    rng = np.random.default_rng(0)

    def write(name, labels):
        rows = [f"{y} {j % 4 + 1}:{rng.random():.3f} 6:1\n" for j, y in enumerate(labels)]
        (tmp_path / name).write_text("".join(rows))
        return ingest(str(tmp_path / name), str(tmp_path / f"{name}.zarr"), block_rows=4,
                      n_features=8 if name == "base" else None)

    base = write("base", [1, 2, 3, 1, 2, 3, 1])
    part = write("part", [3, 2, 3, 3, 2])  # classes (2, 3): indices 0, 1 become 1, 2
    d = append(base.url, part, {"partition": "part", "sha256": "x"})
    assert d.meta.n_rows == 12 and d.meta.class_counts == (3, 4, 5)
    ys = [d.meta.classes[k] for b in range(d.n_blocks) for k in d.read_block(b).y]
    assert sorted(ys[7:]) == [2, 2, 3, 3, 3] and d.meta.n_features == 8
    assert d.meta.source["appended"] == [{"partition": "part", "sha256": "x"}]
    d.verify()
    other = write("other", [4, 1])
    with pytest.raises(InputDataError, match=r"labels \[4.0\] are not classes"):
        append(base.url, other, {})
    assert open_dataset(base.url).meta == d.meta


def test_append_keeps_instance_weights(tmp_path):
    """A weighted part appends with its weights (they were dropped, and the store then
    failed its check); a part without them is refused with one line, the store unchanged."""
    rng = np.random.default_rng(1)
    X = sp.random(20, 5, density=0.5, format="csr", random_state=2, dtype=np.float32)
    y = np.where(rng.random(20) > 0.5, 1.0, -1.0)
    sw = rng.integers(1, 4, 20).astype(np.float64)
    base = ingest((X[:12], y[:12]), str(tmp_path / "base.zarr"), block_rows=4,
                  sample_weight=sw[:12], shuffle=False)
    part = ingest((X[12:], y[12:]), str(tmp_path / "part.zarr"), block_rows=4,
                  sample_weight=sw[12:], shuffle=False)
    d = append(base.url, part, {"partition": "part"})
    d.verify()
    got = np.concatenate([d.read_block(b).weight for b in range(d.n_blocks)])
    np.testing.assert_array_equal(got, sw)
    plain = ingest((X[12:], y[12:]), str(tmp_path / "plain.zarr"), block_rows=4)
    with pytest.raises(InputDataError, match="has no instance weights and .* has them"):
        append(base.url, plain, {})
    assert open_dataset(base.url).meta == d.meta


def test_exit_codes_of_bad_input(tmp_path):
    bad = tmp_path / "pipeline.yaml"
    bad.write_text("name: x\ndataset: d\npartitions: p\nholdout: h\nregistry: r\n"
                   "solver: {C: 1, tolerance: 0.1}\n")
    r = subprocess.run([sys.executable, "-m", "distsvm.cli", "pipeline", "run", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == pipeline.EXIT_BAD_INPUT
    assert f"{bad}: unknown key 'solver.tolerance'" in r.stderr
    bad.write_text(json.dumps({"name": "x", "dataset": str(tmp_path / "d"),
                               "partitions": str(tmp_path / "none-*.svm"), "holdout": "h",
                               "registry": "r"}))
    code, _ = pipeline.main(str(bad), Progress(quiet=True))
    assert code == pipeline.EXIT_BAD_INPUT


def test_deploy_examples_parse():
    import ast
    import configparser

    root = pathlib.Path(__file__).resolve().parents[1] / "deploy" / "pipeline"
    ast.parse((root / "airflow_dag.py").read_text())
    for unit, section in (("distsvm-pipeline.service", "Service"),
                          ("distsvm-pipeline.timer", "Timer")):
        c = configparser.ConfigParser(strict=False, interpolation=None)
        c.read_string((root / unit).read_text())
        assert {"Unit", section} <= set(c.sections())
    assert c.get("Timer", "Unit") == "distsvm-pipeline.service"
    line = [x for x in (root / "crontab").read_text().splitlines()
            if x and not x.startswith("#") and "=" not in x.split()[0]][0]
    assert len(line.split()) > 5 and "distsvm pipeline run" in line
    docs = (root.parents[1] / "docs" / "pipeline.md").read_text()
    example = docs.split("```yaml\n")[1].split("```")[0]
    import yaml

    from distsvm.spec import validate

    validate(yaml.safe_load(example), "pipeline", "docs/pipeline.md")

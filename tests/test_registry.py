"""The model registry: immutable versions, a `current` pointer that a promotion killed at any
step leaves at a complete model, and the `distsvm registry` command."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from distsvm import cli, registry
from distsvm.model import Model
from distsvm.storage import checkpoint as files


def _model(k: float) -> Model:
    return Model(w=np.full(3, k), bias=-1.0, classes=(-1.0, 1.0), solver="dcd",
                 loss="hinge", params={"C": k}, summary={}, n_features=3)


def _publish(reg, k, promote=True):
    v = registry.publish(str(reg), "m", _model(k), metrics={"acc": k},
                         lineage={"dataset": "d", "params": {"C": k}})
    if promote:
        registry.promote(str(reg), "m", v)
    return v


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no cleanup (not an Exception)."""


@pytest.mark.parametrize("survives", [0, 1, 2])
def test_a_promotion_killed_at_any_step_leaves_current_complete(tmp_path, monkeypatch,
                                                                survives):
    """Publishing and promoting v2 writes the model file, version.json, current.json; the
    process dies in the middle of write number ``survives`` (a torn temp file is left)."""
    reg = tmp_path / "reg"
    assert _publish(reg, 1.0) == 1
    real, calls = files.write_bytes, []

    def dying(url, data, storage_options=None):
        if len(calls) == survives:
            os.makedirs(os.path.dirname(url), exist_ok=True)  # as write_bytes does first
            with open(f"{os.path.dirname(url)}/.{os.path.basename(url)}.torn.tmp", "wb") as f:
                f.write(data[: len(data) // 2])
            raise Killed
        calls.append(url)
        real(url, data, storage_options)

    monkeypatch.setattr(files, "write_bytes", dying)
    with pytest.raises(Killed):
        _publish(reg, 2.0)
    monkeypatch.setattr(files, "write_bytes", real)
    cur = registry.current_version(str(reg), "m")
    assert cur == 1  # the pointer moves only with the last write, which did not happen
    assert registry.load(str(reg), "m").w[0] == 1.0  # complete and checksum-verified
    complete = [1] if survives < 2 else [1, 2]  # v2 is a version once version.json is
    assert registry.versions(str(reg), "m") == complete
    assert _publish(reg, 3.0) == 3  # a torn version's number is not reused
    assert registry.load(str(reg), "m").w[0] == 3.0
    assert registry.versions(str(reg), "m") == complete + [3]


def test_versions_are_immutable_and_checked(tmp_path):
    reg = tmp_path / "reg"
    assert [_publish(reg, k, promote=False) for k in (1.0, 2.0)] == [1, 2]
    assert registry.current_version(str(reg), "m") is None
    v1 = (reg / "m" / "v1" / "model.dsvm").read_bytes()
    registry.promote(str(reg), "m", 2)
    assert (reg / "m" / "v1" / "model.dsvm").read_bytes() == v1
    rec = registry.show(str(reg), "m")
    assert rec["version"] == 2 and rec["current"] and rec["metrics"] == {"acc": 2.0}
    assert rec["lineage"] == {"dataset": "d", "params": {"C": 2.0}}
    # a damaged model file is refused: neither loaded nor promoted
    path = reg / "m" / "v1" / "model.dsvm"
    path.write_bytes(v1[:-3] + b"xyz")
    with pytest.raises(registry.RegistryError, match="fails its SHA-256 check"):
        registry.promote(str(reg), "m", 1)
    assert registry.current_version(str(reg), "m") == 2
    with pytest.raises(registry.RegistryError, match="no complete version v7"):
        registry.promote(str(reg), "m", 7)
    with pytest.raises(registry.RegistryError, match="invalid model name"):
        registry.versions(str(reg), "../etc")


def test_registry_command(tmp_path, capsys):
    reg = tmp_path / "reg"
    _publish(reg, 1.0)
    _publish(reg, 2.0, promote=False)
    assert cli.main(["registry", "list", str(reg), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"m": {"versions": [1, 2], "current": 1}}
    assert cli.main(["registry", "promote", str(reg), "m", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["current"] is True
    assert cli.main(["registry", "show", str(reg), "m", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["current"] is False
    assert cli.main(["registry", "promote", str(reg), "m", "9"]) == 1
    assert "no complete version v9" in capsys.readouterr().err


def test_a_version_published_by_resume_records_the_run_directory_absolute(tmp_path,
                                                                          monkeypatch):
    """``distsvm resume runs/r1`` (the relative path typed) publishes a version whose
    lineage names the run directory absolute, as ``distsvm run`` does."""
    (tmp_path / "a.svm").write_text("+1 1:1 2:0.5\n-1 1:-1 3:1\n+1 2:1\n-1 3:-1\n")
    assert cli.main(["ingest", str(tmp_path / "a.svm"), str(tmp_path / "a.zarr"), "--serial",
                     "-q"]) == 0
    (tmp_path / "job.json").write_text(json.dumps({
        "name": "m", "data": {"train": str(tmp_path / "a.zarr")},
        "output": {"registry": str(tmp_path / "reg")},
        "checkpoint": {"runs": str(tmp_path / "runs")}}))
    assert cli.main(["run", str(tmp_path / "job.json"), "--run-id", "r1", "-q"]) == 0
    (tmp_path / "runs" / "r1" / "result.json").unlink()  # killed before it was written
    monkeypatch.chdir(tmp_path)
    try:
        assert cli.main(["resume", "runs/r1", "-q"]) == 0
    finally:
        from distsvm import cluster

        cluster.close_embedded()  # started in pytest's process by the two commands
    runs = [registry.show(str(tmp_path / "reg"), "m", v)["lineage"]["run"] for v in (1, 2)]
    assert runs == [str(tmp_path / "runs" / "r1")] * 2

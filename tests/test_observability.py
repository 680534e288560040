"""Observability: JSON-lines logs (--log-format json), progress bars, the cluster
announcement, train --run-dir and `distsvm report` on a real short run."""

from __future__ import annotations

import io
import json
import lzma

import pytest

from distsvm.cli import main
from distsvm.progress import Progress

from .conftest import DATA


def lines(text: str) -> list[dict]:
    """Every non-empty line of ``text`` parsed as JSON (fails on any other line)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_progress_json_lines_carry_time_event_and_fields():
    out = io.StringIO()
    p = Progress(stream=out, log_format="json")
    p.note("ingest: parsed 3 rows")
    p.round({"round": 1, "primal": 2.5, "dual": 2.0, "gap": 0.5, "pg_violation": 0.1,
             "active": 1.0, "seconds": 0.25, "nan_field": float("nan")})
    p.round({"round": 7, "primal": 3.0, "grad_norm": 1e-3, "seconds": 1.5}, "iter 7 …")
    with p.bar("blocks", 2) as bar:
        bar.update()
        bar.update()
    note, dcd, alm, *bars = lines(out.getvalue())
    for d in (note, dcd, alm, *bars):
        assert d["time"].endswith("+00:00") and "T" in d["time"]
    assert note["event"] == "note" and note["message"] == "ingest: parsed 3 rows"
    assert dcd["event"] == "round" and (dcd["round"], dcd["primal"], dcd["gap"]) == (1, 2.5, 0.5)
    assert dcd["nan_field"] is None  # strict JSON: no NaN
    assert alm["event"] == "round" and alm["grad_norm"] == 1e-3 and "message" not in alm
    assert [(b["event"], b["done"], b["total"]) for b in bars] == [("progress", 1, 2),
                                                                  ("progress", 2, 2)]
    quiet = io.StringIO()
    q = Progress(quiet=True, stream=quiet, log_format="json")
    q.note("x")
    q.round({"round": 1, "primal": 1.0, "dual": 1.0, "gap": 0.0, "pg_violation": 0.0,
             "active": 1.0, "seconds": 0.0})
    assert quiet.getvalue() == ""
    with pytest.raises(ValueError, match="'log_format' parameter must be one of"):
        Progress(log_format="xml")


def test_text_bar_prints_one_finished_line_when_not_a_terminal():
    out = io.StringIO()
    with Progress(stream=out).bar("ingest: blocks", 3) as bar:
        for _ in range(3):
            bar.update()
    assert out.getvalue().count("\n") == 1
    assert out.getvalue().strip().startswith("ingest: blocks [" + "#" * 30 + "] 3/3")
    silent = io.StringIO()
    with Progress(quiet=True, stream=silent).bar("x", 3) as bar:
        bar.update(3)
    assert silent.getvalue() == ""


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("obs")
    src = tmp / "small.svm"
    with lzma.open(DATA / "a9a.xz", "rt") as f, open(src, "w") as out:
        out.writelines(line for _, line in zip(range(3000), f))
    return tmp, src


def test_cli_json_logs_run_dir_and_report(client, small_store, capsys):
    tmp, src = small_store
    store, model, run = tmp / "s.zarr", tmp / "s.model", tmp / "run"
    assert main(["ingest", str(src), str(store), "--block-rows", "1000",
                 "--log-format", "json"]) == 0
    events = lines(capsys.readouterr().err)
    kinds = [e["event"] for e in events]
    assert "note" in kinds and "progress" in kinds
    bar = [e for e in events if e["event"] == "progress" and e["what"] == "ingest: blocks"]
    assert bar[-1]["done"] == bar[-1]["total"] == 3

    assert main(["train", str(store), str(model), "--max-rounds", "12", "--log-format", "json",
                 "--run-dir", str(run), "--json"]) == 0
    cap = capsys.readouterr()
    result = json.loads(cap.out)
    events = lines(cap.err)  # every stderr line is JSON, the round-limit warning included
    rounds = [e for e in events if e["event"] == "round"]
    assert [r["round"] for r in rounds] == list(range(1, 13))
    assert result["rounds"] == 12
    for r in rounds:  # the primal objective (a pass over the rows) where it was measured
        assert {"time", "dual", "pg_violation", "seconds"} <= set(r)
    assert {"primal", "gap"} <= set(rounds[-1])  # at least at the end of the run
    assert rounds[-1]["primal"] == pytest.approx(result["primal_objective"])
    assert any(e["event"] == "warning" and "round limit" in e["message"] for e in events)

    logged = lines((run / "rounds.jsonl").read_text())
    assert [r["round"] for r in logged] == list(range(1, 13))
    assert [(r["dual"], r.get("primal")) for r in logged] == \
        [(r["dual"], r.get("primal")) for r in rounds]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["solver"] == "dcd" and summary["model"] == str(model)
    assert summary["summary"]["rounds"] == 12 and "history" not in summary["summary"]

    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "12 rounds" in out and "dcd" in out and "convergence.png" in out
    png = (run / "convergence.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    import matplotlib.image

    img = matplotlib.image.imread(run / "convergence.png")
    assert img.shape[0] > 200 and img.shape[1] > 400 and img.std() > 0.01  # drawn, not blank

    assert main(["report", str(tmp / "nowhere")]) == 1
    assert "not a distsvm run directory" in capsys.readouterr().err


def test_cluster_connection_prints_the_dashboard_address(client, small_store, capsys):
    """A cluster a command connects to is announced with its scheduler and dashboard (or
    why there is none)."""
    tmp, src = small_store
    assert main(["ingest", str(src), str(tmp / "d.zarr"), "--scheduler",
                 client.scheduler.address, "--log-format", "json"]) == 0
    [event] = [e for e in lines(capsys.readouterr().err) if e["event"] == "cluster"]
    assert event["scheduler"].startswith("tcp://127.0.0.1:")
    assert "dashboard" in event and "dashboard" in event["message"]


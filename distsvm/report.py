"""Run logs and ``distsvm report RUN_DIR``: a convergence plot and a summary of a training run.

A run directory (``distsvm train … --run-dir DIR``) holds

* ``rounds.jsonl`` — one JSON object per solver round, written as the round ends
  (:class:`distsvm.progress.Progress`): the solver's history row (``round``/``iteration``,
  ``seconds`` since the start, objectives, certificates) and ``time`` (UTC, ISO 8601);
* ``summary.json`` — written when training ends: solver, loss, parameters, the model's
  summary without its history (rounds, convergence, objectives, seconds, dataset) and the
  model's path.

:func:`plot` draws, against the training time, the objectives (primal, dual, or SVM-ALM's
objective) and the certificates (duality gap, projected-gradient violation, gradient
norms), each on a log scale; it needs matplotlib (``pip install "distsvm[report]"``).
"""

from __future__ import annotations

import json
import os

from distsvm.storage import bounded
from distsvm.storage.checkpoint import atomic_file, read_json
from distsvm.storage.errors import MalformedDocumentError

from .errors import MissingDependencyError
from .progress import ROUNDS_FILE, plain

SUMMARY_FILE = "summary.json"
PLOT_FILE = "convergence.png"
# history fields drawn, by panel: objectives, then certificates of (non-)optimality
OBJECTIVES = ("primal", "dual", "objective")
CERTIFICATES = ("gap", "pg_violation", "grad_norm", "max_grad", "violation")


def write_summary(run_dir: str, model, model_path: str) -> str:
    """Write ``summary.json`` for a finished training run; return its path."""
    summary = {k: v for k, v in model.summary.items() if k != "history"}
    doc = {"solver": model.solver, "loss": model.loss, "params": model.params,
           "model": str(model_path), "summary": summary}
    path = os.path.join(run_dir, SUMMARY_FILE)
    with atomic_file(path, "w") as f:  # whole or not at all, the umask's mode
        json.dump(plain(doc), f, indent=1)
    return path


def load_run(run_dir: str) -> tuple[list[dict], dict | None]:
    """The rounds of a run directory and its summary (None if the run did not finish)."""
    path = os.path.join(run_dir, ROUNDS_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{run_dir}: no {ROUNDS_FILE}: not a distsvm run directory "
                                "(train with --run-dir)")
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    rows = []
    for lineno, line in enumerate(lines, 1):
        try:
            rows.append(bounded.loads(line.encode(), f"{path}:{lineno}"))
        except MalformedDocumentError:
            if lineno < len(lines):  # only the last line may be torn (a killed run)
                raise
    summary = None
    if os.path.exists(os.path.join(run_dir, SUMMARY_FILE)):
        summary = read_json(os.path.join(run_dir, SUMMARY_FILE))
    return rows, summary


def summarize(rows: list[dict], summary: dict | None) -> str:
    """A few lines describing the run."""
    lines = []
    if summary is not None:
        s = summary["summary"]
        lines.append(f"solver {summary['solver']} ({summary['loss']}), "
                     f"C={summary['params'].get('C')}"
                     f", {s.get('n_rows')} rows x {s.get('n_features')} features")
        lines.append(f"{s.get('rounds')} rounds, converged: {s.get('converged')}, "
                     f"{s.get('train_seconds', float('nan')):.2f}s; model {summary['model']}")
        found = [f"{k} {s[k]:.8g}" for k in ("primal_objective", "dual_objective",
                                              "duality_gap", "grad_norm")
                 if isinstance(s.get(k), (int, float))]
        if found:
            lines.append(", ".join(found))
    else:
        lines.append("no summary.json: the run did not finish")
    if rows:
        last = rows[-1]
        fields = [f"{k} {last[k]:.4g}" for k in OBJECTIVES + CERTIFICATES
                  if isinstance(last.get(k), (int, float))]
        lines.append(f"{len(rows)} rounds logged; last: " + ", ".join(fields)
                     + f" at {last.get('seconds', float('nan')):.2f}s")
    return "\n".join(lines)


def plot(rows: list[dict], out: str, title: str = "") -> str:
    """Write the convergence plot of ``rows`` (PNG) to ``out``; return ``out``."""
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError(
            'distsvm report needs matplotlib, which is not installed: pip install "distsvm[report]"'
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("the run has no rounds to plot")
    t = [r.get("seconds", i) for i, r in enumerate(rows)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, keys, label in ((left, OBJECTIVES, "objective"),
                            (right, CERTIFICATES, "gap / gradient (log)")):
        for k in keys:
            pts = [(x, r[k]) for x, r in zip(t, rows)
                   if isinstance(r.get(k), (int, float)) and r[k] > 0]
            name = k
            if not pts and keys is OBJECTIVES:  # negative objectives (one-class SVM): −value
                pts = [(x, -r[k]) for x, r in zip(t, rows)
                       if isinstance(r.get(k), (int, float)) and r[k] < 0]
                name = f"-{k}"
            if pts:
                ax.plot(*zip(*pts), marker=".", label=name)
        ax.set_yscale("log")
        ax.set_xlabel("training time (s)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.suptitle(title or "distsvm convergence")
    fig.tight_layout()
    with atomic_file(out) as f:
        fig.savefig(f, dpi=100, format="png")
    plt.close(fig)
    return out


def report(run_dir: str, out: str | None = None) -> tuple[str, str]:
    """Plot a run directory's convergence (``convergence.png`` in it unless ``out``) and
    return ``(png path, summary text)``."""
    rows, summary = load_run(run_dir)
    name = os.path.basename(os.path.normpath(run_dir))
    title = f"{summary['solver']} ({summary['loss']}) — {name}" if summary else name
    png = plot(rows, out or os.path.join(run_dir, PLOT_FILE), title)
    return png, summarize(rows, summary)

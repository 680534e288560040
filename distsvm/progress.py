"""Per-round log lines on stderr; ``quiet`` silences them.

``log_format="json"`` prints JSON lines instead: one object per event with ``time`` (UTC,
ISO 8601), ``event`` ("round", "note", …) and the event's fields (a round's are the
solver's history row).  ``run_dir`` keeps a run log there whatever the format or ``quiet``:
every round row, with its time, appended to ``rounds.jsonl`` as it happens (the solver's
``history``, see :mod:`distsvm.report`).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
import threading
import time

LOG_FORMATS = ("text", "json")
ROUNDS_FILE = "rounds.jsonl"


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def plain(value):
    """A JSON-able copy of a row value (NumPy scalars and arrays; NaN/inf become null)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def dual_line(row: dict) -> str:
    """The dual solvers' round line (a round whose primal objective was not measured has no
    gap)."""
    measured = "primal" in row
    rel = row["gap"] / abs(row["primal"]) if measured and row["primal"] else math.nan
    return (f"round {row['round']:4d}  "
            + (f"primal {row['primal']:.8e}  " if measured else "")
            + f"dual {row['dual']:.8e}  "
            + (f"gap {row['gap']:.2e} ({rel:.1e} rel)  " if measured else "")
            + f"pg {row['pg_violation']:.2e}  active {100 * row['active']:5.1f}%  "
            + (f"read {row['bytes_read'] / 2**20:.0f} MiB  " if "bytes_read" in row else "")
            + f"{row['seconds']:.2f}s")


class Progress:
    """Prints one line per solver round and notes of other long work (ingest phases)."""

    def __init__(self, quiet: bool = False, stream=None, log_format: str = "text",
                 run_dir: str | None = None, verbose: bool = False):
        if log_format not in LOG_FORMATS:
            raise ValueError(f"The 'log_format' parameter must be one of {list(LOG_FORMATS)}. "
                             f"Got {log_format!r} instead.")
        self.quiet = quiet
        self.verbose = verbose  # multi-class text: every class's round lines (ClassRounds)
        self.stream = stream or sys.stderr
        self.json = log_format == "json"
        self.run_dir = run_dir
        if run_dir is not None:
            os.makedirs(run_dir, exist_ok=True)
            open(os.path.join(run_dir, ROUNDS_FILE), "w").close()  # this run's rounds only

    def event(self, event: str, **fields) -> None:
        """One JSON line ``{"time", "event", **fields}`` (json format only)."""
        if self.json and not self.quiet:
            self._line(json.dumps({"time": now_iso(), "event": event, **plain(fields)}))

    def note(self, text: str, event: str = "note", **fields) -> None:
        """A line of text; in JSON, an ``event`` object with ``message`` and ``fields``."""
        if self.json:
            self.event(event, message=text, **fields)
        elif not self.quiet:
            self._line(text)

    def always(self, text: str) -> None:
        """A text line that ``-q`` does not silence: what the user asked for by name
        (``--dashboard``'s link)."""
        self._line(text)

    def _line(self, text: str) -> None:
        """``text`` and its newline in one write: a Ctrl-C between the two would leave the
        command's ``ERROR: interrupted`` at the end of a progress line."""
        self.stream.write(text + "\n")
        self.stream.flush()

    def round(self, row: dict, text: str | None = None, show: bool = True) -> None:
        """A solver round: ``row`` (its history entry) goes to the JSON log and the run log;
        the text line (unless not ``show``) is ``text``, or the dual solvers' standard line."""
        if self.run_dir is not None:
            with open(os.path.join(self.run_dir, ROUNDS_FILE), "a") as f:
                f.write(json.dumps({"time": now_iso(), **plain(row)}) + "\n")
        if self.json:
            self.event("round", **row)
            return
        if show:
            self.note(text or dual_line(row))

    def bar(self, what: str, total: int) -> Bar:
        """A progress bar on stderr for ``total`` steps of ``what`` (text format only; JSON
        logs get one "progress" event per step instead)."""
        return Bar(self, what, total)


class Bar:
    """``with progress.bar("ingest: blocks", n) as bar: … bar.update()``: a one-line
    ``what [#####.....] k/n  12.3s`` redrawn in place on stderr, at most 10 times a second."""

    WIDTH = 30

    def __init__(self, progress: Progress, what: str, total: int):
        self.progress, self.what, self.total = progress, what, max(0, int(total))
        self.done, self.start, self._drawn = 0, time.perf_counter(), 0.0
        self._shown = None  # the step count last drawn

    def __enter__(self) -> Bar:
        self._draw()
        return self

    def update(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        if self.progress.json:
            self.progress.event("progress", what=self.what, done=self.done, total=self.total)
        else:
            self._draw(force=self.done == self.total)

    def _draw(self, force: bool = False) -> None:
        p = self.progress
        now = time.perf_counter()
        if p.quiet or p.json or (not force and now - self._drawn < 0.1):
            return
        if not p.stream.isatty() and self.done < self.total:
            return  # a log file gets the finished bar only, not every redraw
        self._drawn, self._shown = now, self.done
        filled = self.WIDTH * self.done // max(1, self.total)
        print(f"\r{self.what} [{'#' * filled}{'.' * (self.WIDTH - filled)}] "
              f"{self.done}/{self.total}  {now - self.start:.1f}s", end="", file=p.stream,
              flush=True)

    def __exit__(self, *exc) -> None:
        p = self.progress
        if self.done < self.total:  # failed or stopped: the error line (if any) instead
            if self._shown is not None and not (p.quiet or p.json) and p.stream.isatty():
                print("\r\033[K", end="", file=p.stream, flush=True)  # erase the bar
            return
        if not (p.quiet or p.json) and (p.stream.isatty() or self.done == self.total):
            if self._shown != self.done:
                self._draw(force=True)
            print(file=p.stream, flush=True)


class ClassRounds:
    """The text log of a multi-class job's K problems (one-vs-rest): one line per round for
    all of them, ``round r  <sums and maxima>  classes n of K (c stopped)``, instead
    of K lines a round (``[class …]`` lines, shown with ``verbose``; the JSON log and the run
    log keep every problem's rows).

    For problems that run side by side (sequential DCD's batches: every problem's rounds
    come together); round r's line is written once every problem has logged round r or
    stopped before it (:meth:`finish`).  Problems that run one after another (up to one per
    worker, :func:`distsvm.solvers.ovr.solve`) show their own ``[class …]`` lines instead,
    as LIBLINEAR shows each one-vs-rest problem's: one line for all would wait for the last
    problem to start."""

    def __init__(self, progress: Progress, labels):
        self.progress, self.labels = progress, list(labels)
        self.rows: dict[int, dict[str, dict]] = {}  # round -> {label: row}
        self.last: dict[str, int] = {}  # label -> its latest round
        self.finished: set[str] = set()
        self.lock = threading.Lock()

    def add(self, label: str, row: dict) -> None:
        with self.lock:
            r = int(row.get("round", 0))
            self.rows.setdefault(r, {})[label] = row
            self.last[label] = max(r, self.last.get(label, r))
            self._flush()

    def finish(self, label: str) -> None:
        """Problem ``label`` has stopped: later rounds do not wait for it."""
        with self.lock:
            if label not in self.finished:
                self.finished.add(label)
                self._flush()

    def _flush(self) -> None:
        while self.rows:
            r = min(self.rows)
            if not all(label in self.rows[r] or label in self.finished
                       or self.last.get(label, -1) > r for label in self.labels):
                return
            self.progress.note(self.line(r, self.rows.pop(r)))

    def line(self, r: int, rows: dict[str, dict]) -> str:
        values = list(rows.values())
        stopped = sum(1 for label in self.finished if self.last.get(label, -1) < r)
        text = f"round {r:4d}"
        for key, what, fmt, agg in (("primal", "primal sum", ".8e", sum),
                                    ("dual", "dual sum", ".8e", sum),
                                    ("pg_violation", "pg max", ".2e", max),
                                    ("rel_grad_norm", "|grad| rel max", ".1e", max)):
            if all(key in v for v in values):
                text += f"  {what} {agg(v[key] for v in values):{fmt}}"
        text += f"  classes {len(values)} of {len(self.labels)} ({stopped} stopped)"
        if all("seconds" in v for v in values):
            text += f"  {max(v['seconds'] for v in values):.2f}s"
        return text

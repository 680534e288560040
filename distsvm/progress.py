"""Per-round log lines on stderr; ``quiet`` silences them."""

from __future__ import annotations

import sys


class Progress:
    """Prints one line per solver round and notes of other long work (ingest phases)."""

    def __init__(self, quiet: bool = False, stream=None):
        self.quiet = quiet
        self.stream = stream or sys.stderr

    def note(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def round(self, row: dict) -> None:
        rel = row["gap"] / abs(row["primal"]) if row["primal"] else float("nan")
        self.note(f"round {row['round']:4d}  primal {row['primal']:.8e}  dual {row['dual']:.8e}  "
                  f"gap {row['gap']:.2e} ({rel:.1e} rel)  pg {row['pg_violation']:.2e}  "
                  f"active {100 * row['active']:5.1f}%  "
                  + (f"read {row['bytes_read'] / 2**20:.0f} MiB  " if "bytes_read" in row else "")
                  + f"{row['seconds']:.2f}s")

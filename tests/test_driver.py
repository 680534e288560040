"""The round loop (:func:`distsvm.solvers.driver.drive`) with problems that go at different
paces, as batched one-vs-rest dual CD's groups do (one task per worker thread, each running
rounds until its batch time is up): every problem runs to its own stop or to the round limit,
whichever group reaches the limit first.  Before, the loop ended once the furthest problem
reached the limit, and the slower group's problems ended short of it, "stopped by the
solver" — on pendigits (tests/test_liblinear_parity), five of ten classes stopped at 217–226
of 300 rounds and so never switched to the primal solver (Σ objective 6183–8062 against
LIBLINEAR's 5094, a different figure each run)."""

from __future__ import annotations

import numpy as np
import pytest

from distsvm.errors import ConvergenceWarning
from distsvm.progress import Progress
from distsvm.solvers import driver


class Paced(driver.Solver):
    """Two problems: a step takes problem 0 three rounds on, problem 1 one round, neither past
    ``max_rounds``; problem 1 stops on its rule at round ``stop1`` (None: never)."""

    problems = 2

    def __init__(self, ctx, max_rounds, stop1=None):
        super().__init__(ctx)
        self.max_rounds, self.stop1 = max_rounds, stop1
        self.steps = 0

    def step(self, r):
        self.steps += 1
        rows = []
        for k, pace in enumerate((3, 1)):
            if self.done[k]:
                continue
            first = len(self.histories[k]) + 1
            for rr in range(first, min(first + pace, self.max_rounds + 1)):
                rows.append((k, {"round": rr, "primal": 1.0 / rr}))
            last = rows[-1][1]["round"]
            self.converged[k] = k == 1 and self.stop1 is not None and last >= self.stop1
            self.done[k] = self.converged[k] or last == self.max_rounds
        return rows

    def w(self, k):
        return np.zeros(3)

    def limit(self, k, history):
        return "the test's rule"

    def line(self, row):
        return f"round {row['round']}"


@pytest.mark.parametrize("stop1, rounds1, by1", [(None, 7, "round limit"), (4, 4, "eps")])
def test_every_problem_runs_to_its_stop_or_the_limit(client, stop1, rounds1, by1):
    ctx = driver.Context(client, None, None, Progress(quiet=True))
    solver = Paced(ctx, 7, stop1)
    with pytest.warns(ConvergenceWarning):  # problem 0 (and 1 without a rule) at the limit
        results = driver.drive(solver, max_rounds=7)
    assert [r.rounds for r in results] == [7, rounds1]
    assert [r.extra["stopped_by"] for r in results] == ["round limit", by1]
    assert [row["round"] for row in results[1].history] == list(range(1, rounds1 + 1))
    assert solver.steps == rounds1  # problem 1's pace: one round a step

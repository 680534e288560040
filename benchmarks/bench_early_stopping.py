"""Early stopping against training to the stop, in one process (issue 31's pypi-summaries
target: within 0.2 points of the converged test accuracy in at most half its train time).

    python benchmarks/bench_early_stopping.py TRAIN TEST [--repeat 5] [-s 3]

Trains ``-s S`` on TRAIN to its own stop, then with 0.1 of its rows held out and
``n_iter_no_change=3`` (scikit-learn's ``validation_fraction``/``n_iter_no_change``), in
turns, on one embedded cluster (after a first one-round run that loads the kernels); prints
each run's train time, rounds, best round, kept model and test accuracy on TEST, the load
average, and the medians' ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics

from distsvm import jobs, prediction
from distsvm.cluster import embedded_client
from distsvm.solvers.registry import LIBLINEAR_TYPES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("train")
    ap.add_argument("test")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("-s", type=int, default=3)
    a = ap.parse_args()
    solver, loss = LIBLINEAR_TYPES[a.s]
    c = embedded_client()
    jobs.train(a.train, client=c, solver=solver, loss=loss, max_rounds=1)
    runs = {"converged": {}, "early stopping": dict(validation_fraction=0.1, n_iter_no_change=3)}
    seconds = {name: [] for name in runs}
    for _ in range(a.repeat):
        for name, kw in runs.items():
            m = jobs.train(a.train, client=c, solver=solver, loss=loss, **kw)
            s = m.summary
            accuracy = prediction.predict(a.test, m, client=c)["accuracy"]
            seconds[name].append(s["train_seconds"])
            print(f"{name}: train {s['train_seconds']:.2f} s, {s['rounds']} rounds, best round "
                  f"{s.get('best_round', '-')}, kept {s.get('kept_model', 'the solver')}, test "
                  f"accuracy {100 * accuracy:.2f}%, load {os.getloadavg()[0]:.1f}", flush=True)
    a_, b_ = (statistics.median(seconds[n]) for n in runs)
    print(f"medians: converged {a_:.2f} s, early stopping {b_:.2f} s, ratio {b_ / a_:.2f}")


if __name__ == "__main__":
    main()

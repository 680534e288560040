"""Benchmark: scale out — does a job on K workers finish sooner than on one (issue 27)?

Two parts, run from the repository root:

(a) real, this machine's cluster: LIBLINEAR, liblinear-multicore `-m 2`, distsvm in one
    process and distsvm on a LocalCluster of 2 single-threaded workers whose memory limits
    let each hold a share of the store but not all of it (the Dask user's case), each tool
    with its defaults and its own stopping rule, in one run (benchmarks/race.py's runner,
    tool `distsvm-cluster`):

        python benchmarks/scale.py --real --data pypi-summaries --s 0 1 2 3 5 \\
            --cluster-memory 780MB --multicore-python /work/venv-mc/bin/python \\
            --work /work/tmp-race --json-out docs/scale-real.json

(b) simulated K workers: the solvers' own code — the coordinator's loop, its combination
    and the workers' per-block tasks and kernels — run in this process on a client of K
    simulated workers (:class:`SimClient`) that runs each task at once and measures it (its
    thread's CPU time, the bytes of its arguments and result).  A wave is the tasks sent
    between two waits of the coordinator; its modelled time is its slowest worker's compute
    plus the communication of a pipelined binary tree over the K workers: the broadcast of
    the largest argument and the reduction of the largest result, each ⌈log₂K⌉ hops (one for
    K = 1) of --latency, and 2·bytes / --bandwidth (every link carries the vector once each
    way, as a tree or ring all-reduce of large vectors).  A group whose members add up their
    parts among themselves (Newton's iteration on up to 4 workers, :class:`_Group`) makes a
    wave of each reduction: its slowest member's compute, plus one hop and (K − 1)·bytes /
    bandwidth (each member sends its part to the K − 1 others at once); the group's call
    (its arguments out, replies back) is one more wave.  The run's modelled time is the sum
    over its waves.  The store needs at least K blocks (block b goes to worker b mod K).
    Each simulated worker's memory holds its share of the store and, for K ≥ 2, not all of
    it (the plan's ``free``), so that each -s runs what distsvm runs on such a cluster (the
    `auto` row): Newton for -s 0 and -s 2; for -s 1 (and -s 7, -s 12) the primal Newton
    solver at the tolerance of jobs.primal_where_spread; for -s 3 dual CD streamed through
    one worker.  K = 1 is one worker that holds the store: dual CD is LIBLINEAR's
    sequential algorithm on the joined store.  `--parallel MODE` adds, for the dual types,
    a row of dual CD's parallel mode MODE at each K ≥ 2 (each worker joins its blocks).

        python benchmarks/scale.py --simulate 1 2 4 8 16 32 --data STORE --s 1 2 3 \\
            --json OUT [--png docs/img/scale.png]
        python benchmarks/scale.py --plot "TITLE=OUT" ... --png docs/img/scale.png

OUT is a JSON list of objects with s, k, algorithm, rounds, bytes_per_round,
compute_seconds, comm_seconds, modelled_seconds and primal_objective.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import os
import pathlib
import sys
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

class _Done:
    """A finished task: what :class:`SimClient.submit` returns; a wait on it closes the
    client's wave."""

    def __init__(self, client, key, value):
        self.client, self.key, self.value = client, key, value

    def result(self, timeout=None):
        self.client.close_wave()
        return self.value

    def release(self):
        pass


class _Runner:
    """A simulated worker's :class:`distsvm.cluster.Runner`: a call is a task on it; a
    group's call (:meth:`together`) a member of a :class:`_Group`."""

    def __init__(self, client, worker):
        self.client, self.worker = client, worker

    def call(self, fn, *args, **kwargs):
        return self.client.submit(fn, *args, workers=[self.worker], **kwargs)

    def together(self, group, rank, peers, fn, *args, **kwargs):
        g = self.client.groups.setdefault(group, _Group(self.client, len(peers)))
        g.members.append((self.worker, fn, args, kwargs))
        return _Member(g, rank)


class _Member:
    """A group member's call: its result, once the group has run."""

    def __init__(self, group, rank):
        self.group, self.rank = group, rank

    def result(self, timeout=None):
        self.group.run()
        return self.group.results[self.rank]


class _Group:
    """A :meth:`distsvm.cluster.Runner.together` group on the simulated workers: each member
    runs in a thread of its own, one at a time in rank order between two of their
    reductions (so each simulated worker has its per-run tables while it runs, and each
    thread's CPU time is its own).  A reduction is a wave: its slowest member's compute
    since the last, plus the exchange of :class:`distsvm.cluster.AllReduce`, each member
    sending its part to each other one at once (one hop of latency and (K − 1)·bytes /
    bandwidth; nothing for K = 1).  The call itself is one more wave: its arguments out and
    its replies back, as a pass's."""

    def __init__(self, client, k):
        self.client, self.k = client, k
        self.members: list = []
        self.results: list | None = None
        self.turn = 0
        self.cv = threading.Condition()
        self.parts: dict = {}
        self.since: dict = {}
        self.compute: dict = {}

    def _wait_turn(self, rank):
        from distsvm.workers import blocks as worker_blocks

        with self.cv:
            self.cv.wait_for(lambda: self.turn == rank)
        worker_blocks._runs = self.client.tables.setdefault(self.members[rank][0], {})
        self.since[rank] = time.thread_time()

    def _stop(self, rank):
        self.compute[rank] = self.compute.get(rank, 0.0) + time.thread_time() - self.since[rank]

    def _pass_turn(self, rank):
        with self.cv:
            self.turn = (rank + 1) % self.k
            self.cv.notify_all()

    def reduce(self, rank, part):
        """The member ``rank``'s reduction of ``part``: the sum of the members' parts."""
        from dask.sizeof import sizeof

        from distsvm.workers.blocks import add_replies

        self._stop(rank)
        self.parts[rank] = part
        if rank == self.k - 1:  # the last member's part: the wave is complete
            sent = (self.k - 1) * sizeof(part)  # by each member, to each other one
            self.client.wave_of(self.compute, (self.client.latency if self.k > 1 else 0)
                                + sent / self.client.bandwidth, self.k * sent)
            self.compute = {}
            self.total = functools.reduce(add_replies, (self.parts[j] for j in range(self.k)))
        self._pass_turn(rank)
        self._wait_turn(rank)
        return self.total if rank == 0 else copy.deepcopy(self.total)

    def run(self):
        from dask.sizeof import sizeof

        if self.results is not None:
            return
        self.client.close_wave()
        self.client.groups = {}
        results = [None] * self.k

        def member(rank):
            worker, fn, args, kwargs = self.members[rank]
            reduce = _Reduce(self, rank)
            self._wait_turn(rank)
            results[rank] = fn(*args, reduce=reduce, **kwargs)
            self._stop(rank)
            self._pass_turn(rank)

        threads = [threading.Thread(target=member, args=(j,)) for j in range(self.k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.client.wave = [(m[0], self.compute.get(j, 0.0), sizeof(m[2]) + sizeof(m[3]),
                             sizeof(results[j])) for j, m in enumerate(self.members)]
        self.client.close_wave()  # the call's own wave, as a pass's
        self.results = results


class _Reduce:
    """A simulated member's ``reduce`` (:class:`distsvm.cluster.AllReduce`)."""

    def __init__(self, group, rank):
        self.group, self.rank = group, rank

    def __call__(self, part):
        return self.group.reduce(self.rank, part)


class SimClient:
    """K simulated workers in this process: each task runs at once, on this thread, its CPU
    time and bytes recorded in the current wave, which the coordinator's first wait on a
    result closes (:meth:`close_wave`).  Only what the solvers call is here."""

    def __init__(self, k: int, latency: float, bandwidth: float):
        self.addresses = [f"sim://{j}" for j in range(k)]
        self.tables: dict[str, dict] = {}  # worker: its distsvm.workers.blocks._runs
        self.latency, self.bandwidth = latency, bandwidth
        self.wave: list[tuple[str, float, int, int]] = []  # (worker, seconds, in, out)
        self.compute = self.comm = 0.0
        self.bytes = 0
        self.waves = 0
        self.n = 0
        self.groups: dict = {}  # group: its _Group, until it runs

    def submit(self, fn, *args, workers=None, pure=False, **kwargs):
        from dask.sizeof import sizeof

        from distsvm.workers import blocks as worker_blocks

        args = [a.value if isinstance(a, _Done) else a for a in args]
        worker = (workers or self.addresses)[0]
        if kwargs.pop("actor", False):  # a Runner: its calls are this client's tasks
            return _Done(self, "Runner", _Runner(self, worker))
        # each simulated worker's own per-run state, as each worker process has its own
        # (the block cache, keyed by content, is shared: the blocks are the owners' anyway)
        worker_blocks._runs = self.tables.setdefault(worker, {})
        t = time.thread_time()
        value = fn(*args, **kwargs)
        seconds = time.thread_time() - t
        self.wave.append((worker, seconds,
                          sizeof(args) + sizeof(kwargs), sizeof(value)))
        self.n += 1
        return _Done(self, f"{getattr(fn, '__name__', 'task')}-{self.n}", value)

    def close_wave(self) -> None:
        """Model the open wave: its slowest worker's compute plus a tree's communication."""
        if not self.wave:
            return
        per: dict[str, float] = {}
        for a, s, _, _ in self.wave:
            per[a] = per.get(a, 0.0) + s
        k = len(self.addresses)
        hops = max(1, math.ceil(math.log2(k))) if k > 1 else 1
        largest_in = max(i for *_, i, _ in self.wave)
        largest_out = max(o for *_, o in self.wave)
        # a pipelined tree: each hop's latency, and every link carries the vector once each
        # way (2 n / B, as a tree or ring all-reduce of large vectors)
        self.wave_of(per, hops * 2 * self.latency + 2 * (largest_in + largest_out) / self.bandwidth,
                     sum(i + o for *_, i, o in self.wave))
        self.wave = []

    def wave_of(self, compute: dict, comm: float, nbytes: int) -> None:
        """Count a wave: each worker's compute in it, its communication and bytes."""
        self.compute += max(compute.values(), default=0.0)
        self.comm += comm
        self.bytes += nbytes
        self.waves += 1

    def run(self, fn, *args, workers=None, on_error=None, **kwargs):
        from distsvm.workers import blocks as worker_blocks

        out = {}
        for a in workers or self.addresses:
            worker_blocks._runs = self.tables.setdefault(a, {})
            out[a] = fn(*args, **kwargs)
        return out

    def scatter(self, data, **kwargs):
        return data

    def cancel(self, futures):
        pass

    def scheduler_info(self):
        return {"workers": {}}


def simulate(store: str, s: int, k: int, a, parallel: str | None = None) -> dict:
    """Train -s ``s`` on ``k`` simulated workers (see the module docstring), dual CD in the
    parallel mode ``parallel`` if given."""
    import distsvm.workers.blocks
    from distsvm import cluster
    from distsvm.jobs import train
    from distsvm.solvers import registry
    from distsvm.storage import open_dataset

    ds = open_dataset(store)
    if len(ds.meta.blocks) < k:
        raise SystemExit(f"{store} has {len(ds.meta.blocks)} blocks: K = {k} needs at least K")
    client = SimClient(k, a.latency, a.bandwidth)
    addrs = client.addresses
    owners = tuple(addrs[b % k] for b in range(len(ds.meta.blocks)))
    sizes = cluster.block_sizes(ds.meta)
    held = {w: sum(z for z, o in zip(sizes, owners) if o == w) for w in addrs}
    # each holds its share beside a read; for K >= 2 not the store joined beside its parts
    free = {w: held[w] + cluster.READ * max(sizes) + (sum(sizes) if k == 1 else 0)
            for w in addrs}
    plan = cluster.assign(cluster.WorkerPlan(owners, {w: 0 for w in addrs},
                                             {w: 1 for w in addrs}, {}, free, tuple(sizes),
                                             max(sizes)), owners)
    kw = {"parallel": parallel, "inner_passes": a.inner_passes} if parallel else {}
    kw.update(registry.type_params(s))  # as the CLI's -s (1, 7, 12: the primal switch)
    distsvm.workers.blocks.clear_cache()
    for info in ds.meta.blocks:  # the blocks in memory (the owners' caches), not timed
        distsvm.workers.blocks.load(ds.url, info, 2 * sum(sizes))
    t = time.perf_counter()
    model = train(ds, client=client, plan=plan, **kw)
    client.close_wave()
    rounds = max(1, model.summary["rounds"])
    return {"s": s, "k": k, "algorithm": f"{model.solver} eps={model.params['eps']:g}"
            + (f" --parallel {parallel} --inner-passes {a.inner_passes}" if parallel else ""),
            "rounds": model.summary["rounds"], "waves": client.waves,
            "bytes_per_round": client.bytes / rounds, "compute_seconds": client.compute,
            "comm_seconds": client.comm, "modelled_seconds": client.compute + client.comm,
            "primal_objective": float(model.summary["primal_objective"]),
            "converged": bool(model.summary["converged"]), "wall_seconds": time.perf_counter() - t,
            "latency": a.latency, "bandwidth": a.bandwidth}


def simulated(a) -> list[dict]:
    from distsvm.solvers import registry

    rows = []
    print(f"{'-s':>3s} {'algorithm':44s} {'K':>3s} {'rounds':>6s} {'waves':>6s} "
          f"{'MB/round':>9s} {'compute s':>9s} {'comm s':>7s} {'model s':>8s} {'/ K=1':>6s} "
          f"{'primal':>14s}  load {os.getloadavg()[0]:.2f}", flush=True)
    for s in a.s:
        dual = registry.LIBLINEAR_TYPES[s][0] == "dcd"
        base = None
        for parallel in [None] + ([a.parallel] if a.parallel and dual else []):
            for k in a.simulate:
                if parallel and k == 1:
                    continue
                r = simulate(a.data, s, k, a, parallel)
                base = base or r["modelled_seconds"]
                r["speedup"] = base / r["modelled_seconds"]
                rows.append(r)
                if a.json_out:  # as it goes: a long run interrupted keeps what it measured
                    pathlib.Path(a.json_out).write_text(json.dumps(rows, indent=1))
                print(f"{s:3d} {r['algorithm']:44s} {k:3d} {r['rounds']:6d} {r['waves']:6d} "
                      f"{r['bytes_per_round'] / 1e6:9.2f} {r['compute_seconds']:9.2f} "
                      f"{r['comm_seconds']:7.2f} {r['modelled_seconds']:8.2f} "
                      f"{r['modelled_seconds'] / base:6.3f} {r['primal_objective']:14.6f}",
                      flush=True)
    return rows


def plot(panels: dict, png):
    """Speed-up over K = 1 of the modelled time against K, one panel per data set
    (``panels``: {title: rows})."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels.items()):
        for key in sorted({(r["s"], r["algorithm"]) for r in rows}):
            pts = sorted((r["k"], r["modelled_seconds"]) for r in rows
                         if (r["s"], r["algorithm"]) == key)
            base = next(r["modelled_seconds"] for r in rows if r["s"] == key[0] and r["k"] == 1)
            ax.plot([p[0] for p in pts], [base / p[1] for p in pts], marker="o",
                    label=f"-s {key[0]}: {key[1]}")
        ks = sorted({r["k"] for r in rows})
        ax.plot(ks, ks, "k:", label="linear")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("K workers (simulated)")
        ax.set_ylabel("speed-up over K = 1 (modelled time to the stop)")
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", type=int, nargs="+", help="K values to simulate")
    ap.add_argument("--real", action="store_true", help="the real 2-worker race (race.py)")
    ap.add_argument("--data", help="--simulate: a store; --real: race.py's dataset names",
                    nargs="+")
    ap.add_argument("--s", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--latency", type=float, default=1e-3, help="seconds a hop (default 1 ms)")
    ap.add_argument("--bandwidth", type=float, default=1e9,
                    help="bytes a second a hop (default 1e9: 10 Gb/s)")
    ap.add_argument("--parallel", help="also dual CD's parallel mode MODE at K >= 2")
    ap.add_argument("--inner-passes", type=int, default=1, help="dual CD's at K >= 2")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--png")
    ap.add_argument("--plot", nargs="+", metavar="TITLE=JSON",
                    help="only draw --png from earlier --json outputs")
    a, rest = ap.parse_known_args()
    if a.plot:
        return plot({t: json.loads(pathlib.Path(f).read_text())
                     for t, f in (item.split("=", 1) for item in a.plot)}, a.png)
    if a.real:
        import race

        sys.argv = [sys.argv[0], "--data", *a.data, "--s", *map(str, a.s), "--tools",
                    "liblinear", "multicore", "distsvm", "distsvm-cluster", *rest]
        return race.main()
    if not a.simulate:
        ap.error("give --simulate K... or --real")
    a.data = a.data[0]
    rows = simulated(a)
    if a.png:
        plot({a.data: rows}, a.png)


if __name__ == "__main__":
    main()

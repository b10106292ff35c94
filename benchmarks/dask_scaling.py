#!/usr/bin/env python3
"""cinnlite over Dask: scaling over local worker processes, against dask.array with numpy.

Two workloads, on a ``distributed.LocalCluster`` of 1, 2 and 4 worker processes (one thread
each), inputs generated and persisted on the workers before anything is timed:

- take: ``table[ids]``, a (10 M x 32) float32 table in row chunks, 20 M int64 ids in chunks.
  cinnlite: ``cl.dask.run`` of a ``take`` program. Peer: dask.array's own indexing, ``table[ids]``.
- message passing: ``out = zeros(N, 32); out[dst] += x[src]`` with 20 M edges over 2 M nodes.
  cinnlite: ``cl.dask.run`` of ``take`` then ``scatter_nd(reduce="add")``. Peer: dask.array's
  indexing for ``x[src]``, then per edge chunk a numpy ``bincount`` scatter into a partial result
  (``map_blocks``-style delayed tasks) and a tree sum of the partials.

Each step is ``persist()`` + ``wait()`` (results stay on the workers); results are checked
against numpy on sampled rows before timing; the implementations alternate round by round and
the medians are printed, with the bytes the workers sent each other during one step (the
workers' ``transfer_outgoing_bytes_total``).

    python benchmarks/dask_scaling.py            # full sizes (several minutes, ~10 GiB of memory)
    python benchmarks/dask_scaling.py --small    # a tenth of the sizes
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import cinnlite as cl
import cinnlite.dask as cdask
from machine import machine_info, print_machine

FEATURES = 32


def programs(rows: int, ids: int, nodes: int, edges: int):
    b = cl.NetBuilder("take_rows")
    b.take(b.create_input("float32", ("R", FEATURES), "table"), b.create_input("int64", ("M",), "ids"))
    take = b.build()
    b = cl.NetBuilder("message_passing")
    x = b.create_input("float32", ("N", FEATURES), "x")
    src = b.create_input("int64", ("E",), "src")
    dst = b.create_input("int64", ("E", 1), "dst")
    messages = b.take(x, src)
    out = b.scatter_nd(b.fill_constant(("N", FEATURES), 0.0, "float32"), dst, messages, reduce="add")
    return take, b.build([out])


def peer_message_passing(x, src, dst, nodes: int):
    """dask.array indexing for the gather, numpy bincount per edge chunk, a tree sum."""
    import dask
    import dask.array as da

    messages = x[src]
    offsets = np.arange(FEATURES, dtype=np.int64)

    @dask.delayed
    def partial(h, d):
        flat = (d.reshape(-1, 1) * FEATURES + offsets).ravel()
        return np.bincount(flat, weights=h.ravel(), minlength=nodes * FEATURES).astype(np.float32).reshape(nodes, FEATURES)

    parts = [da.from_delayed(partial(h, d), (nodes, FEATURES), np.float32)
             for h, d in zip(messages.to_delayed().ravel(), dst.to_delayed().ravel())]
    while len(parts) > 1:
        parts = [sum(parts[k:k + 4]) for k in range(0, len(parts), 4)]
    return parts[0]


def sent_bytes(client) -> int:
    return sum(client.run(lambda dask_worker: dask_worker.transfer_outgoing_bytes_total).values())


def timed(client, make, rounds_out: list, transfers: list):
    from distributed import wait
    before = sent_bytes(client)
    t0 = time.perf_counter()
    result = make().persist()
    wait(result)
    rounds_out.append(time.perf_counter() - t0)
    transfers.append(sent_bytes(client) - before)
    del result


def check(client, got, want_rows, sample):
    rows = got[sample].compute()
    np.testing.assert_allclose(rows, want_rows, rtol=1e-4, atol=1e-4)


def run_cluster(workers: int, sizes, rounds: int):
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    rows, ids, nodes, edges, chunk = sizes
    take_p, mp_p = programs(*sizes[:4])
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    try:
        rng = da.random.default_rng(0)
        table = rng.standard_normal((rows, FEATURES), dtype=np.float32, chunks=(chunk, FEATURES))
        index = rng.integers(0, rows, ids, chunks=chunk)
        x = rng.standard_normal((nodes, FEATURES), dtype=np.float32, chunks=(chunk, FEATURES))
        src = rng.integers(0, nodes, edges, chunks=chunk)
        dst = rng.integers(0, nodes, (edges, 1), chunks=(chunk, 1))
        table, index, x, src, dst = client.persist([table, index, x, src, dst])
        wait([table, index, x, src, dst])

        # checks before timing: sampled output rows against numpy on the same inputs
        sample = np.sort(np.random.default_rng(1).choice(ids, 1000, replace=False))
        ids_s = index[sample].compute()
        check(client, cdask.run(take_p, table=table, ids=index), table[ids_s].compute(), sample)
        check(client, table[index], table[ids_s].compute(), sample)
        node_sample = np.arange(0, nodes, max(1, nodes // 500))
        want = np.zeros((nodes, FEATURES), np.float32)
        s_np, d_np = src.compute(), dst.compute()[:, 0]
        np.add.at(want, d_np, x.compute()[s_np])
        check(client, cdask.run(mp_p, x=x, src=src, dst=dst), want[node_sample], node_sample)
        check(client, peer_message_passing(x, src, dst, nodes), want[node_sample], node_sample)
        del want, s_np, d_np

        impls = {
            ("take", "cinnlite"): lambda: cdask.run(take_p, table=table, ids=index),
            ("take", "dask.array"): lambda: table[index],
            ("message passing", "cinnlite"): lambda: cdask.run(mp_p, x=x, src=src, dst=dst),
            ("message passing", "dask.array + numpy"): lambda: peer_message_passing(x, src, dst, nodes),
        }
        times = {k: [] for k in impls}
        sent = {k: [] for k in impls}
        for _ in range(rounds):
            for key, make in impls.items():
                timed(client, make, times[key], sent[key])
                time.sleep(0.05)
        return {k: (statistics.median(v), statistics.median(sent[k])) for k, v in times.items()}
    finally:
        client.close()
        cluster.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a tenth of the sizes")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    scale = 10 if args.small else 1
    sizes = (10_000_000 // scale, 20_000_000 // scale, 2_000_000 // scale, 20_000_000 // scale, 2_500_000 // scale)
    print_machine(machine_info(1))
    print(f"table {sizes[0]:,} x {FEATURES} float32, {sizes[1]:,} ids; message passing {sizes[3]:,} edges over "
          f"{sizes[2]:,} nodes; chunks of {sizes[4]:,}; median of {args.rounds} rounds, persisted on the workers")
    print(f"{'workers':>7} | {'workload':<16} | {'implementation':<20} | {'median s':>9} | {'vs peer':>8} | "
          f"{'sent between workers':>20}")
    for workers in [int(w) for w in args.workers.split(",")]:
        results = run_cluster(workers, sizes, args.rounds)
        for (workload, impl), (seconds, sent) in results.items():
            peer = [v[0] for (w, i), v in results.items() if w == workload and i != "cinnlite"][0]
            ratio = f"{peer / seconds:.2f}x" if impl == "cinnlite" else ""
            print(f"{workers:>7} | {workload:<16} | {impl:<20} | {seconds:>9.3f} | {ratio:>8} | {sent / 2**20:>16.1f} MiB")


if __name__ == "__main__":
    main()

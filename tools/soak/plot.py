"""The soak's samples (target/soak/samples.csv, written by leaseq-soak run) as one figure of six
panels against minutes: throughput, latency, the server's memory, the clients' memory, the
extension's tables, dead tuples. The warm-up, left out of the slopes, is shaded.

    plot.py SAMPLES.csv OUT.svg [OUT.png …] [--warmup-minutes 5]
"""
import argparse
import csv

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

# Text stays text in the SVG: smaller, and searchable.
plt.rcParams["svg.fonttype"] = "none"


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    columns = {name: [float(r[name]) if r[name] else None for r in rows] for name in rows[0]}
    return columns


def line(ax, columns, name, label, scale=1.0, **style):
    if name not in columns:
        return
    xs, ys = [], []
    for x, y in zip(columns["minute"], columns[name]):
        if y is not None:
            xs.append(x)
            ys.append(y * scale)
    ax.plot(xs, ys, label=label, linewidth=1.5, marker=".", markersize=4, **style)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("samples")
    parser.add_argument("out", nargs="+")
    parser.add_argument("--warmup-minutes", type=float, default=5)
    args = parser.parse_args()
    c = read(args.samples)
    mb = 1 / 1024

    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5), sharex=True)
    (throughput, latency, server), (clients, tables, dead) = axes

    line(throughput, c, "jobs_per_s", "reached a final state")
    line(throughput, c, "enqueued_per_s", "enqueued", linestyle="--")
    throughput.set_title("Throughput (jobs/s)")
    throughput.set_ylim(bottom=0)

    line(latency, c, "latency_p50_ms", "enqueue → completion p50")
    line(latency, c, "latency_p99_ms", "enqueue → completion p99")
    line(latency, c, "enqueue_call_p99_ms", "enqueue call p99", linestyle="--")
    latency.set_title("Latency (ms, log scale)")
    latency.set_yscale("log")
    latency.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))

    line(server, c, "server.pss_sum_kb", "all processes, PSS", mb)
    line(server, c, "server.private_sum_kb", "all processes, private", mb)
    line(server, c, "server.rss_max_kb", "largest process, RSS", mb, linestyle="--")
    line(server, c, "server.private_max_kb", "largest process, private", mb, linestyle="--")
    server.set_title("PostgreSQL memory (MB)")
    server.set_ylim(bottom=0)

    line(clients, c, "workers.rss_sum_kb", "worker processes, RSS sum", mb)
    line(clients, c, "workers.rss_max_kb", "largest worker, RSS", mb, linestyle="--")
    line(clients, c, "driver.rss_kb", "producers + sampler, RSS", mb)
    clients.set_title("Client memory (MB)")
    clients.set_ylim(bottom=0)

    line(tables, c, "jobs.table_kb", "jobs", mb)
    line(tables, c, "jobs.indexes_kb", "jobs' indexes", mb)
    line(tables, c, "closed_attempts.table_kb", "closed_attempts", mb)
    line(tables, c, "closed_attempts.indexes_kb", "closed_attempts' indexes", mb)
    tables.set_title("leaseq tables (MB)")
    tables.set_ylim(bottom=0)

    line(dead, c, "jobs.dead_tuples", "jobs: dead tuples")
    line(dead, c, "closed_attempts.dead_tuples", "closed_attempts: dead tuples")
    line(dead, c, "live_jobs", "jobs not final (backlog)", linestyle="--")
    dead.set_title("Dead tuples and backlog (rows)")
    dead.set_ylim(bottom=0)

    for ax in axes.flat:
        ax.axvspan(0, args.warmup_minutes, color="0.9", zorder=0)
        ax.grid(True, color="0.85", linewidth=0.5)
        # The server's lines fill the top and the bottom: its legend goes between them.
        ax.legend(fontsize=8, loc="lower right" if ax is server else "best")
    for ax in axes[1]:
        ax.set_xlabel("minutes (shaded: warm-up, left out of the slopes)")
    fig.suptitle("leaseq soak: every metric sampled once a minute", fontsize=13)
    fig.tight_layout()
    for out in args.out:
        fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main()

"""Issue 40's measure of the job path, as its text describes it: JOBS (60,000) jobs enqueued
1,000 a call, then drained by tools/bench/jobpath.py (psycopg 3 with its defaults, CONNECTIONS
(2) threads on autocommit connections, each claim finished in one statement with the ids and,
for leaseq, every token as psycopg returned it), for leaseq, the bench's bare queue and pgmq in
turn, the systems' order rotated each repetition; autovacuum as the server has it.
CHECKPOINT=1 checkpoints before each drain and VACUUM=1 vacuums and analyzes the filled table,
as section 16 does; TOKENS=one sends the claim's one token, as section 16 does. Needs the database scripts/bench makes (the bare queue's
bench.bare_jobs; pgmq if installed). Prints a line per drain, then per batch the median rate of
each system, the medians of the per-repetition ratios and the WAL per job.
Usage: DATABASE_URL=… python tools/bench/jobpath_shape.py [BATCH …] (default 1 100 1000)"""

import json
import os
import statistics
import subprocess
import sys

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
URL = os.environ["DATABASE_URL"]
JOBS = int(os.environ.get("JOBS", "60000"))
REPEAT = int(os.environ.get("REPEAT", "3"))
CONNECTIONS = os.environ.get("CONNECTIONS", "2")
TOKENS = os.environ.get("TOKENS", "each")
CHECKPOINT = os.environ.get("CHECKPOINT") == "1"
VACUUM = os.environ.get("VACUUM") == "1"
CHUNK = int(os.environ.get("CHUNK", "1000"))

FILL = {
    "leaseq": "SELECT count(*) FROM leaseq.queue_enqueue_batch('bench', %s::jsonb[])",
    "bare": "INSERT INTO bench.bare_jobs (queue, payload)"
    " SELECT 'bench', p FROM unnest(%s::jsonb[]) AS p",
    "pgmq": "SELECT count(*) FROM pgmq.send_batch('bench', %s::jsonb[])",
}
TABLES = {"leaseq": "leaseq.jobs", "bare": "bench.bare_jobs", "pgmq": "pgmq.q_bench"}
EMPTY = {
    # 0.4.0's lease rows too (a baseline before it has none)
    "leaseq": "DO $$BEGIN TRUNCATE leaseq.jobs CASCADE;"
    " IF to_regclass('leaseq.leases') IS NOT NULL THEN TRUNCATE leaseq.leases; END IF; END$$",
    "bare": "TRUNCATE bench.bare_jobs",
    "pgmq": "TRUNCATE pgmq.q_bench, pgmq.a_bench",
}


def drain(admin: psycopg.Connection, system: str, batch: int) -> tuple[float, float]:
    """Jobs per second and WAL bytes per job of one drain of JOBS fresh jobs."""
    admin.execute(EMPTY[system])
    payloads = ["{}"] * CHUNK
    for _ in range(JOBS // CHUNK):
        admin.execute(FILL[system], (payloads,))
    if VACUUM:
        admin.execute(f"VACUUM ANALYZE {TABLES[system]}")
    if CHECKPOINT:
        admin.execute("CHECKPOINT")
    lsn = "SELECT pg_current_wal_lsn()"
    before = admin.execute(lsn).fetchone()[0]
    env = dict(os.environ, SYSTEM=system, BATCH=str(batch), CONNECTIONS=CONNECTIONS, TOKENS=TOKENS)
    said = subprocess.run(
        [sys.executable, os.path.join(HERE, "jobpath.py")],
        env=env, check=True, capture_output=True, text=True,
    ).stdout
    (wal,) = admin.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (before,)).fetchone()
    run = json.loads(said)
    if run["completed"] != JOBS:
        raise SystemExit(f"{system}, batch {batch}: {run['completed']} of {JOBS} jobs finished")
    return JOBS / run["seconds"], float(wal) / JOBS


def main() -> None:
    batches = [int(b) for b in sys.argv[1:]] or [1, 100, 1000]
    with psycopg.connect(URL, autocommit=True) as admin:
        has_pgmq = admin.execute("SELECT to_regclass('pgmq.q_bench') IS NOT NULL").fetchone()[0]
        systems = ["leaseq", "bare"] + (["pgmq"] if has_pgmq else [])
        for batch in batches:
            runs: dict[str, list[tuple[float, float]]] = {s: [] for s in systems}
            for rep in range(REPEAT):
                for i in range(len(systems)):
                    system = systems[(i + rep) % len(systems)]
                    rate, wal = drain(admin, system, batch)
                    runs[system].append((rate, wal))
                    print(f"batch {batch} rep {rep} {system:<6} {rate:9.0f} jobs/s {wal:6.0f} B/job",
                          flush=True)
            median = {s: statistics.median(r for r, _ in runs[s]) for s in systems}
            wal = {s: statistics.median(w for _, w in runs[s]) for s in systems}
            ratios = {
                other: statistics.median(l[0] / o[0] for l, o in zip(runs["leaseq"], runs[other]))
                for other in systems[1:]
            }
            print(json.dumps({
                "batch": batch, "jobs_per_s": {s: round(median[s]) for s in systems},
                "leaseq_over": {s: round(r, 3) for s, r in ratios.items()},
                "wal_per_job": {s: round(w) for s, w in wal.items()},
                "wal_leaseq_over_bare": round(wal["leaseq"] / wal["bare"], 3),
            }), flush=True)


if __name__ == "__main__":
    main()

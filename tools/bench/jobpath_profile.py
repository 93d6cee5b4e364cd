"""Where a drain of the job path spends its time, per job (docs/benchmarks.md, "Where the job
path's time goes"): JOBS (60,000) jobs enqueued 1,000 a call as in issue 40's measure, drained
on one autocommit connection with psycopg's defaults, BATCH (100) a claim, each claim finished in
one statement with every token as psycopg returned it (tools/bench/jobpath.py's statements), for
SYSTEM leaseq, bare or pgmq. Prints, per job: the wall time, the backend's CPU (its
/proc/<pid>/schedstat, so the server must run on this machine and be readable) split between
claims and finishes, the client's CPU; the claim and finish times by sixth of the drain; and,
when the database has pg_stat_statements (track = all to see leaseq's own statements), the
statements' execution time and WAL per job. Run it alone: another drain's load is in its times.
Usage: DATABASE_URL=… python tools/bench/jobpath_profile.py SYSTEM [BATCH] [JOBS]"""

import os
import sys
import time

import psycopg

from jobpath import STATEMENTS
from jobpath_shape import EMPTY, FILL

SIXTHS = 6


def main() -> None:
    system = sys.argv[1]
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    jobs = int(sys.argv[3]) if len(sys.argv) > 3 else 60_000
    claim, finish = STATEMENTS[system]
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        conn.execute(EMPTY[system])
        for _ in range(jobs // 1000):
            conn.execute(FILL[system], (["{}"] * 1000,))
        statements = conn.execute(
            "SELECT to_regclass('pg_stat_statements') IS NOT NULL"
        ).fetchone()[0]
        if statements:
            conn.execute("SELECT pg_stat_statements_reset()")
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]

        def server_ns() -> int:
            with open(f"/proc/{pid}/schedstat") as stat:
                return int(stat.read().split()[0])

        calls = []  # (jobs, claim wall, finish wall, claim server ns, finish server ns)
        wall, client = time.perf_counter(), time.process_time()
        while True:
            ns0, t0 = server_ns(), time.perf_counter()
            rows = conn.execute(claim, {"worker": "profile", "batch": batch}).fetchall()
            t1, ns1 = time.perf_counter(), server_ns()
            if not rows:
                break
            conn.execute(finish, {"ids": [r[0] for r in rows], "tokens": [r[1] for r in rows]})
            t2, ns2 = time.perf_counter(), server_ns()
            calls.append((len(rows), t1 - t0, t2 - t1, ns1 - ns0, ns2 - ns1))
        wall, client = time.perf_counter() - wall, time.process_time() - client
        done = sum(c[0] for c in calls)
        print(f"{system}, batch {batch}: {done} jobs, {done / wall:.0f} jobs/s")
        print(f"  per job: wall {1e6 * wall / done:.1f} µs, client CPU {1e6 * client / done:.1f} µs,"
              f" server CPU claim {sum(c[3] for c in calls) / 1e3 / done:.1f} µs"
              f" + finish {sum(c[4] for c in calls) / 1e3 / done:.1f} µs")
        step = max(1, len(calls) // SIXTHS)
        sixths = []
        for i in range(0, len(calls), step):
            part = calls[i:i + step]
            n = sum(c[0] for c in part)
            sixths.append(f"{1e6 * sum(c[1] for c in part) / n:.1f}/{1e6 * sum(c[2] for c in part) / n:.1f}")
        print("  claim/finish wall µs a job, by sixth of the drain: " + " ".join(sixths))
        if statements:
            print("  statements (pg_stat_statements): µs a job, WAL B a job, calls")
            for row in conn.execute(
                """SELECT total_exec_time * 1000 / %(jobs)s, wal_bytes / %(jobs)s, calls,
                          left(regexp_replace(query, '\\s+', ' ', 'g'), 70)
                     FROM pg_stat_statements
                    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                      AND query NOT LIKE '%%pg_stat_statements%%'
                    ORDER BY total_exec_time DESC LIMIT 8""",
                {"jobs": done},
            ):
                print(f"  {row[0]:8.2f} {row[1]:6.0f} {row[2]:6d}  {row[3]}")


if __name__ == "__main__":
    main()

"""leaseq-bench section 16: the job path as a Python user drives it, with psycopg 3. CONNECTIONS
threads, each on its own autocommit connection, claim BATCH jobs of the queue `bench` and finish
each claim with one statement, until none is left; SYSTEM picks leaseq (queue_claim +
queue_complete_batch), the bench's bare queue (one CTE + SKIP LOCKED claim, one UPDATE), or pgmq
(read with a 30 s visibility timeout + delete of the batch). Prints the jobs finished and the
seconds from the first claim to the last finish. With CLAIM_FIRST=1 every job is claimed before
any is finished (what a fleet with prefetch does), and the seconds are the finishes' alone. With
WARM=1 (leaseq) each connection first claims and finishes a small flow of its own — a root, two
children, a sink — as a worker that has been running has: its statements prepared and planned,
the catalog caches filled, before the clock starts. TOKENS=each (leaseq) finishes with every
claimed job's token, not the claim's one."""

import json
import os
import threading
import time

import psycopg

STATEMENTS = {
    "leaseq": (
        "SELECT job_id, lease_token FROM leaseq.queue_claim('bench', %(worker)s, %(batch)s)",
        "SELECT count(*) FROM leaseq.queue_complete_batch(%(ids)s::bigint[], %(tokens)s::uuid[])"
        " AS done WHERE done",
    ),
    "bare": (
        """WITH c AS (
               SELECT id FROM bench.bare_jobs
                WHERE queue = 'bench' AND status = 'pending' AND run_at <= now()
                ORDER BY run_at, id LIMIT %(batch)s
                  FOR UPDATE SKIP LOCKED)
           UPDATE bench.bare_jobs b SET status = 'running',
                  leased_until = now() + interval '30 seconds'
             FROM c WHERE b.id = c.id
           RETURNING b.id, NULL::uuid""",
        "WITH f AS (UPDATE bench.bare_jobs SET status = 'done' WHERE id = ANY(%(ids)s::bigint[])"
        " RETURNING 1) SELECT count(*) FROM f",
    ),
    "pgmq": (
        "SELECT msg_id, NULL::uuid FROM pgmq.read('bench', 30, %(batch)s)",
        "SELECT count(*) FROM pgmq.delete('bench', %(ids)s::bigint[])",
    ),
}


WARM_UP = """SELECT leaseq.queue_enqueue(%(queue)s, '{}', depends_on => array_agg(child))
                 FROM leaseq.queue_enqueue_batch(
                          %(queue)s, ARRAY['{}', '{}']::jsonb[],
                          depends_on => ARRAY[leaseq.queue_enqueue(%(queue)s, '{}')]) AS child"""


def warm_up(conn: psycopg.Connection, worker: str) -> None:
    """A flow root → 2 children → sink in a queue of this connection's own, claimed and finished
    until none is left: every statement of a fan-in's finish has run once on the connection."""
    queue = "warm_" + worker.replace("-", "_")
    conn.execute("SELECT leaseq.queue_create(%s)", (queue,))
    conn.execute(WARM_UP, {"queue": queue})
    while rows := conn.execute(
        "SELECT job_id, lease_token FROM leaseq.queue_claim(%s, %s, 100)", (queue, worker)
    ).fetchall():
        conn.execute(
            "SELECT count(*) FROM leaseq.queue_complete_batch(%s::bigint[], %s::uuid[])",
            ([r[0] for r in rows], [rows[0][1]]),
        )


EACH_TOKEN = os.environ.get("TOKENS") == "each"


def drain(
    url: str,
    system: str,
    batch: int,
    worker: str,
    done: list[int],
    claimed: threading.Barrier | None,
    started: list[float],
) -> None:
    claim, finish = STATEMENTS[system]
    with psycopg.connect(url, autocommit=True) as conn:
        if os.environ.get("WARM") == "1":
            warm_up(conn, worker)

        def claim_some() -> list[tuple]:
            return conn.execute(claim, {"worker": worker, "batch": batch}).fetchall()

        def finish_claim(rows: list[tuple]) -> None:
            ids = [r[0] for r in rows]
            # One claim: one token, unless TOKENS=each sends them all, as psycopg returned them
            # (what a user who does not know they are shared does).
            tokens = [r[1] for r in rows] if EACH_TOKEN else [rows[0][1]]
            finished = conn.execute(finish, {"ids": ids, "tokens": tokens}).fetchone()
            done.append(finished[0] if finished else 0)

        if claimed is None:
            while rows := claim_some():
                finish_claim(rows)
            return
        held = []
        while rows := claim_some():
            held.append(rows)
        if claimed.wait() == 0:  # every job claimed, by every connection: the clock starts
            started.append(time.monotonic())
        for rows in held:
            finish_claim(rows)


def main() -> None:
    url = os.environ["DATABASE_URL"]
    system, batch = os.environ["SYSTEM"], int(os.environ["BATCH"])
    connections = int(os.environ["CONNECTIONS"])
    claimed = threading.Barrier(connections) if os.environ.get("CLAIM_FIRST") == "1" else None
    done: list[int] = []
    started: list[float] = []
    threads = [
        threading.Thread(
            target=drain, args=(url, system, batch, f"bench-{i}", done, claimed, started)
        )
        for i in range(connections)
    ]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - (started[0] if started else start)
    print(json.dumps({"completed": sum(done), "seconds": seconds}))


if __name__ == "__main__":
    main()

"""The conformance worker in Python (clients/conformance/README.md says what it does)."""

import os
import sys
import time
from datetime import timedelta

import psycopg

import leaseq

URL = os.environ["DATABASE_URL"]
PID = os.getpid()


def log(job: leaseq.Job, event: str) -> None:
    with psycopg.connect(URL, autocommit=True) as c:
        c.execute(
            "INSERT INTO conformance_log (job_id, attempt, pid, event) VALUES (%s, %s, %s, %s)",
            (job.id, job.attempt, PID, event),
        )


def behave(job: leaseq.Job) -> object:
    time.sleep(job.payload.get("ms", 0) / 1000)
    log(job, "end")
    match job.payload.get("do", "ok"):
        case "throw":
            raise RuntimeError("asked to fail")
        case "dead":
            raise leaseq.Dead({"error": "asked to die"})
        case "snooze":
            raise leaseq.Snooze(3600)
        case "poison":
            return {"big": "x" * 1_100_000}  # over leaseq.max_payload_bytes: refused
    return {"pid": PID}


def handler(job: leaseq.Job) -> object:
    log(job, "start")
    return behave(job)


def transactional(job: leaseq.Job, tx: psycopg.Connection) -> object:
    log(job, "start")
    tx.execute(
        "INSERT INTO conformance_effects (job_id, attempt, pid) VALUES (%s, %s, %s)",
        (job.id, job.attempt, PID),
    )
    return behave(job)


def produce() -> None:
    """A producer: one enqueue rolled back with its transaction, one committed."""
    with psycopg.connect(URL) as conn:
        leaseq.enqueue(conn, os.environ["QUEUE"], {"rolled_back": True})
        conn.rollback()
        leaseq.enqueue(conn, os.environ["QUEUE"], {"committed": True})
        conn.commit()


if __name__ == "__main__" and os.environ.get("MODE") == "enqueue":
    produce()
elif __name__ == "__main__":
    is_tx = os.environ.get("TRANSACTIONAL") == "1"
    lease = os.environ.get("LEASE_MS")
    worker = leaseq.Worker(
        URL,
        queue=os.environ["QUEUE"],
        handler=transactional if is_tx else handler,
        concurrency=int(os.environ.get("CONCURRENCY", "4")),
        prefetch=int(os.environ.get("PREFETCH", "0")),
        lease=None if lease is None else timedelta(milliseconds=int(lease)),
        transactional=is_tx,
        poll=int(os.environ.get("POLL_MS", "1000")) / 1000,
        grace=int(os.environ.get("GRACE_MS", "5000")) / 1000,
    )
    try:
        worker.run()
    except leaseq.LeaseqError as refused:
        print(f"refused: {refused}", file=sys.stderr, flush=True)
        raise SystemExit(1)

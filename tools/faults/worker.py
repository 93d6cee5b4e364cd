"""A Python worker for leaseq-faults (tools/src/bin/leaseq-faults/load.rs starts it): the
client most of our users run, through libpq's multi-host URL. Its handler writes the effect row
in the transaction that completes the job (transactional=True), so an effect commits exactly
when the completion does. Like the Rust workers' handlers it logs (to `OPS_LOG`, one JSON object
a line, as ops.rs reads them) when it returned and when the job's `lost` fired while it ran —
and, like them, it ignores `lost` on purpose: the Worker must not complete the job after it."""

import json
import os
import sys
import time
from typing import Any

import psycopg

import leaseq

NAME = sys.argv[1]
OPS = open(os.environ["OPS_LOG"], "a", encoding="utf-8")


def record(kind: str, job: leaseq.Job, at: float) -> None:
    line: dict[str, Any] = {
        "kind": kind, "op": job.payload.get("op"), "job_id": job.id, "job_key": job.key,
        "lease_token": str(job.lease_token), "attempt_no": job.attempt, "worker": NAME, "at": at,
    }
    # One write of a whole line, flushed before going on: whole or absent if we are killed.
    OPS.write(json.dumps(line) + "\n")
    OPS.flush()


def handle(job: leaseq.Job, tx: psycopg.Connection) -> None:
    if job.lost.wait(job.payload.get("ms", 20) / 1000):
        record("stop", job, time.time())
    tx.execute(
        "INSERT INTO faults.effects (job_id, attempt_no, worker) VALUES (%s, %s, %s)",
        (job.id, job.attempt, NAME),
    )
    record("returned", job, time.time())


if __name__ == "__main__":
    leaseq.Worker(
        os.environ["DATABASE_URL"],
        queue=os.environ["QUEUE"],
        handler=handle,
        transactional=True,
        concurrency=4,
        poll=60,
        grace=5,
        worker_id=NAME,
    ).run()

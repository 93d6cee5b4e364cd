"""A Python worker for leaseq-faults (tools/src/bin/leaseq-faults/load.rs starts it): the
client most of our users run, through libpq's multi-host URL. Its handler writes the effect row
in the transaction that completes the job (transactional=True), so an effect commits exactly
when the completion does."""

import os
import sys
import time

import psycopg

import leaseq

NAME = sys.argv[1]


def handle(job: leaseq.Job, tx: psycopg.Connection) -> None:
    time.sleep(job.payload.get("ms", 20) / 1000)
    tx.execute(
        "INSERT INTO faults.effects (job_id, attempt_no, worker) VALUES (%s, %s, %s)",
        (job.id, job.attempt, NAME),
    )


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

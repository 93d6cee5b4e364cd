"""Every Worker event is logged on `leaseq.worker` with the job's fields in `extra`: start and
success at DEBUG, a failure at WARNING when it will be retried and ERROR when the job is dead
(with the handler's traceback), a lost lease and a fenced outcome at WARNING; and the process's
Workers are counted for Prometheus."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import prometheus_client
import psycopg
import pytest

import leaseq
import leaseq.metrics
from conftest import run_bounded


def records(caplog: pytest.LogCaptureFixture, job_id: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "job_id", None) == job_id]


def test_each_job_event_is_logged_with_the_jobs_fields(
    url: str, client: leaseq.Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="leaseq")
    client.queue_create(queue, max_attempts=2, backoff_base=timedelta(hours=1),
                        backoff_cap=timedelta(hours=1))
    fine = client.enqueue(queue, {"do": "ok"})
    retried = client.enqueue(queue, {"do": "raise"})
    dying = client.enqueue(queue, {"do": "dead"})

    def handler(job: leaseq.Job) -> Any:
        match job.payload["do"]:
            case "raise":
                raise ValueError("the upstream said no")
            case "dead":
                raise leaseq.Dead({"error": "bad input"})
        return {"ok": True}

    run_bounded(leaseq.Worker(url, queue=queue, handler=handler))
    for job_id in (fine, retried, dying):
        for record in records(caplog, job_id):
            assert (record.queue, record.attempt) == (queue, 1)  # type: ignore[attr-defined]
            assert record.key.startswith(f"{job_id}-")  # type: ignore[attr-defined]
    assert [(r.levelname, r.getMessage()) for r in records(caplog, fine)] == [
        ("DEBUG", f"leaseq worker: job {fine} started (attempt 1)"),
        ("DEBUG", f"leaseq worker: job {fine} succeeded"),
    ]
    (failure,) = [r for r in records(caplog, retried) if r.levelno > logging.DEBUG]
    assert failure.levelname == "WARNING" and "to be retried" in failure.getMessage()
    assert "ValueError: the upstream said no" in failure.getMessage()
    assert failure.exc_info is not None and failure.exc_info[0] is ValueError
    assert "Traceback" in caplog.text and 'raise ValueError("the upstream said no")' in caplog.text
    (death,) = [r for r in records(caplog, dying) if r.levelno > logging.DEBUG]
    assert death.levelname == "ERROR" and ", dead" in death.getMessage()
    assert any(r.levelname == "INFO" and "working queue" in r.getMessage() for r in caplog.records)


def test_a_lost_lease_and_a_fenced_outcome_are_warnings(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    lost = client.enqueue(queue, {})

    def handler(job: leaseq.Job) -> None:
        conn.execute("SELECT leaseq.queue_cancel(%s)", (job.id,))
        job.lost.wait(10)

    run_bounded(leaseq.Worker(url, queue=queue, handler=handler, lease=timedelta(seconds=1)))
    assert any(r.levelname == "WARNING" and "lost its lease" in r.getMessage()
               for r in records(caplog, lost))
    fenced = client.enqueue(queue, {})

    def expire(job: leaseq.Job, tx: psycopg.Connection[Any]) -> None:
        # The lease runs out on the server before the completion: it is fenced.
        conn.execute("WITH ended AS (UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp()"
                     " WHERE id = %s RETURNING queue, lease_expires_at, lease_token, id)"
                     " INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)"
                     " SELECT queue, lease_expires_at, lease_token, ARRAY[id] FROM ended",
                     (job.id,))

    summary = run_bounded(leaseq.Worker(url, queue=queue, handler=expire, transactional=True))
    assert summary.fenced == 1
    assert any(r.levelname == "WARNING" and "fenced" in r.getMessage()
               for r in records(caplog, fenced))


def test_the_workers_of_the_process_are_counted_for_prometheus(
    url: str, client: leaseq.Client, queue: str
) -> None:
    registry = prometheus_client.CollectorRegistry()
    registry.register(leaseq.metrics.WorkerCollector())
    client.enqueue_batch(queue, [{"fail": n % 3 == 0} for n in range(9)])

    def handler(job: leaseq.Job) -> None:
        if job.payload["fail"]:
            raise RuntimeError("no")

    worker = leaseq.Worker(url, queue=queue, handler=handler)
    run_bounded(worker)

    def value(outcome: str) -> float | None:
        return registry.get_sample_value(
            "leaseq_worker_jobs_total", {"queue": queue, "outcome": outcome}
        )

    assert (value("completed"), value("failed"), value("lost")) == (6.0, 3.0, 0.0)
    assert registry.get_sample_value("leaseq_worker_handlers", {"queue": queue}) == 0.0

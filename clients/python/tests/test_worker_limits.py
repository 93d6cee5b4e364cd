"""Limits from the handler's side: a handler past the Worker's `timeout` is told and its job
fails with a timeout error (a sync one's thread abandoned, its slot given to the next job), and
`leaseq.Retry(after)` picks the next attempt's delay instead of the queue's backoff."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import leaseq
from conftest import run_bounded, statuses


def test_a_handler_past_its_timeout_is_told_and_its_job_fails_with_a_timeout_error(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    told: list[str] = []

    async def slow_async(job: leaseq.Job) -> None:
        if job.payload.get("quick"):
            return
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            told.append("cancelled")
            raise

    def slow_sync(job: leaseq.Job) -> None:
        if job.payload.get("quick"):
            return
        if job.lost.wait(30):
            told.append("lost set")
        time.sleep(3)  # a handler that does not stop at once: its thread is abandoned

    def slow_transactional(job: leaseq.Job, tx: psycopg.Connection[Any]) -> None:
        if not job.payload.get("quick"):
            tx.execute("SELECT pg_sleep(3)")

    for handler, transactional in ((slow_async, False), (slow_sync, False),
                                   (slow_transactional, True)):
        slow = client.enqueue(queue, {})
        quick = client.enqueue(queue, {"quick": True})
        started = time.monotonic()
        # One slot: the quick job runs only if the timed-out one gave its slot up.
        summary = run_bounded(leaseq.Worker(url, queue=queue, handler=handler, concurrency=1,
                                            timeout=timedelta(seconds=1),
                                            transactional=transactional))
        assert time.monotonic() - started < 10, handler.__name__
        assert (summary.timed_out, summary.failed, summary.completed, summary.lost) == (1, 1, 1, 0)
        failed = client.job(slow)
        assert failed.status is leaseq.JobStatus.PENDING and failed.attempts == 1
        assert json.loads(failed.last_error or "") == {
            "error": "timeout", "message": "the handler ran past its timeout of 1 s"}
        assert client.job(quick).status is leaseq.JobStatus.SUCCEEDED
    assert told == ["cancelled", "lost set"]
    assert statuses(conn, queue) == {"pending": 3, "succeeded": 3}


def test_retry_picks_the_next_attempts_delay(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    later = client.enqueue(queue, {"after": 120})
    recorded = client.enqueue(queue, {"after": timedelta(minutes=10).total_seconds(), "why": True})

    def handler(job: leaseq.Job) -> None:
        if job.payload.get("why"):
            raise leaseq.Retry(timedelta(seconds=job.payload["after"]), {"error": "rate limited"})
        raise leaseq.Retry(job.payload["after"])

    summary = run_bounded(leaseq.Worker(url, queue=queue, handler=handler))
    assert summary.failed == 2
    for job_id, after in ((later, 120), (recorded, 600)):
        row = conn.execute("SELECT extract(epoch FROM run_at - clock_timestamp()), attempts "
                           "FROM leaseq.jobs WHERE id = %s", (job_id,)).fetchone()
        assert row is not None
        assert after - 30 < float(row[0]) <= after and row[1] == 1, (after, row)
    assert '"error": "Retry"' in (client.job(later).last_error or "")
    assert client.job(recorded).last_error == '{"error": "rate limited"}'


def test_a_timeout_of_zero_is_refused(url: str, queue: str) -> None:
    with pytest.raises(ValueError, match="timeout must be more than 0 seconds"):
        leaseq.Worker(url, queue=queue, handler=lambda job: None, timeout=0)

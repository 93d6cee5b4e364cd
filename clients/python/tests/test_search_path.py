"""No statement of the Client or the Worker runs an operator someone else planted in schema
public, on the default search_path (the CVE-2018-1058 class; docs/security.md, "The clients'
own statements"). The trojans are clients/conformance/public_trojans.sql, shared with the Rust
and Node clients' tests: each records the role it ran as in public.trojan_calls."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo
import pytest

import leaseq

TROJANS = Path(__file__).resolve().parents[2] / "conformance" / "public_trojans.sql"


@pytest.fixture
def planted(conn: psycopg.Connection[Any], url: str) -> Iterator[str]:
    """A database of its own with leaseq installed and the trojans planted; its URL."""
    database = f"leaseq_trojans_py_{os.getpid()}"
    conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    conn.execute(f"DROP ROLE IF EXISTS {database}_author")
    conn.execute(f"CREATE DATABASE {database}")
    try:
        planted_url = psycopg.conninfo.make_conninfo(url, dbname=database)
        with psycopg.connect(planted_url, autocommit=True) as setup:
            setup.execute("CREATE EXTENSION leaseq")
            setup.execute(TROJANS.read_text())
            (count,) = setup.execute(
                "SELECT count(*) FROM pg_catalog.pg_operator"
                " WHERE oprnamespace OPERATOR(pg_catalog.=) 'public'::regnamespace"
            ).fetchone() or (0,)
            assert count > 100, "the trojans are planted"
        yield planted_url
    finally:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        conn.execute(f"DROP ROLE IF EXISTS {database}_author")


def test_no_statement_of_the_client_or_worker_runs_an_operator_planted_in_public(
    planted: str,
) -> None:
    queue = "trojans"
    with leaseq.Client(planted) as client:
        client.queue_create(
            queue,
            lease=timedelta(seconds=30),
            backoff_base=timedelta(hours=1),
            backoff_cap=timedelta(hours=1),
            retain=timedelta(days=1),
        )
        ids = client.enqueue_batch(queue, [{"n": n} for n in range(4)])
        ids.append(client.enqueue(queue, {"n": 4}, dedupe_key="once", dedupe_for=timedelta(hours=1)))
        ids.append(client.enqueue(queue, {"n": 5}, depends_on=[ids[0]]))

        # By hand: every call on a claimed job.
        claimed = client.claim(queue, "by-hand", batch=4, lease=timedelta(seconds=30))
        assert sorted(job.id for job in claimed) == ids[:4]
        assert all(job.key.startswith(f"{job.id}-") for job in claimed)
        first, second, third, fourth = sorted(claimed, key=lambda job: job.id)
        assert client.renew(first, timedelta(seconds=30)) is not None
        assert None not in client.renew_batch(claimed, timedelta(seconds=30))
        assert client.progress(first, {"half": True}) and client.step(first, "one", {"s": 1})
        assert client.complete(first, {"ok": True})
        assert client.snooze(second, timedelta(0)) is leaseq.JobStatus.PENDING
        assert client.fail(third, {"e": 1}, retry_in=timedelta(0)) is leaseq.JobStatus.PENDING
        assert client.hand_back([fourth]) == [True]

        # The Worker: claims, a heartbeat (one job outlives two thirds of its 3 s lease), the
        # batched finishes.
        async def handler(job: leaseq.Job) -> Any:
            if job.payload["n"] == 2:
                await asyncio.sleep(2.5)
            return {"n": job.payload["n"]}

        summary = leaseq.Worker(
            planted, queue=queue, handler=handler, concurrency=4, lease=timedelta(seconds=3)
        ).run_until_idle()
        assert summary.completed == 5
        assert client.await_jobs(ids, timedelta(seconds=5)).all_final
        assert [client.job(i).status for i in ids] == [leaseq.JobStatus.SUCCEEDED] * 6
        assert {s.queue: s.succeeded for s in client.stats()}[queue] == 6
        assert len(client.jobs(queue)) == 6 and len(client.attempts(ids[2])) == 2
        assert client.purge(queue, timedelta(days=1)) == 0

        with psycopg.connect(planted) as check:
            calls = check.execute(
                "SELECT DISTINCT operator, called_by FROM public.trojan_calls ORDER BY 1"
            ).fetchall()
        assert calls == [], f"client statements ran operators planted in public: {calls}"

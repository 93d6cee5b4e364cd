"""Durable steps: a step recorded under the job's lease (`queue_step`), in the caller's
transaction, read back by any later attempt (`queue_steps`); `run_step` skips a step an earlier
attempt recorded."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import leaseq
import leaseq.aio


def test_a_step_is_recorded_once_and_read_back_with_its_attempt(
    client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {"order": 7})
    (job,) = client.claim(queue, "w")
    assert client.steps(job_id) == []
    assert client.step(job, "charge", {"charge_id": "ch_1"}) is True
    assert client.step(job, "charge", {"charge_id": "ch_2"}) is False, "the first record stands"
    assert client.step(job, "email") is True
    charge, email = client.steps(job_id)
    assert (charge.name, charge.attempt_no, charge.output) == ("charge", 1, '{"charge_id": "ch_1"}')
    assert (email.name, email.attempt_no, email.output) == ("email", 1, None)
    assert charge.recorded_at <= email.recorded_at


def test_a_stale_token_records_nothing(client: leaseq.Client, queue: str) -> None:
    job_id = client.enqueue(queue, {})
    (first,) = client.claim(queue, "w")
    assert client.fail(first, {"error": "once"}, retry_in=timedelta(0)) is leaseq.JobStatus.PENDING
    assert client.step(first, "charge", {"late": True}) is False
    assert client.steps(job_id) == []
    (second,) = client.claim(queue, "w")
    assert client.step(second, "charge", 1) is True
    assert [(s.name, s.attempt_no, s.output) for s in client.steps(job_id)] == [("charge", 2, "1")]


def test_a_step_commits_and_rolls_back_with_the_callers_transaction(
    url: str, client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    (job,) = client.claim(queue, "w")
    with psycopg.connect(url) as tx:
        assert leaseq.step(tx, job, "rolled back", {"n": 1}) is True
        tx.rollback()
        assert leaseq.step(tx, job, "kept", leaseq.Json('{"n": 2}')) is True
        assert client.steps(job_id) == [], "not visible before the commit"
        tx.commit()
    assert [(s.name, s.output) for s in client.steps(job_id)] == [("kept", '{"n": 2}')]


def test_run_step_skips_what_an_earlier_attempt_recorded(
    url: str, client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    calls: list[str] = []

    def charge() -> dict[str, str]:
        calls.append("charge")
        return {"charge_id": f"ch_{len(calls)}"}

    (first,) = client.claim(queue, "w")
    assert leaseq.run_step(client, first, "charge", charge) == {"charge_id": "ch_1"}
    assert leaseq.run_step(client, first, "charge", charge) == {"charge_id": "ch_1"}
    assert calls == ["charge"], "not again within the attempt"
    assert client.fail(first, {"error": "mailer down"}, retry_in=timedelta(0)) is not None

    (second,) = client.claim(queue, "w")
    assert second.attempt == 2
    with psycopg.connect(url) as tx:  # the handler's own transaction
        assert leaseq.run_step(tx, second, "charge", charge) == {"charge_id": "ch_1"}
        assert leaseq.run_step(tx, second, "email", lambda: None) is None
    assert calls == ["charge"], "the retry skipped the recorded step"
    assert client.complete(second) is True
    recorded = [(s.name, s.attempt_no, s.output) for s in client.steps(job_id)]
    assert recorded == [("charge", 1, '{"charge_id": "ch_1"}'), ("email", 2, None)]


def test_run_step_with_a_lost_lease_raises_and_sets_lost(client: leaseq.Client, queue: str) -> None:
    job_id = client.enqueue(queue, {})
    (job,) = client.claim(queue, "w")
    assert leaseq.run_step(client, job, "first", lambda: 1) == 1
    assert client.cancel(job_id) is True
    with pytest.raises(leaseq.LeaseLost):
        leaseq.run_step(client, job, "second", lambda: 2)
    assert job.lost.is_set()
    assert [s.name for s in client.steps(job_id)] == ["first"]


def test_a_transactional_worker_records_steps_with_the_handlers_writes(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    calls: list[int] = []

    def handler(job: leaseq.Job, tx: psycopg.Connection[Any]) -> Any:
        def charge() -> int:
            calls.append(job.attempt)
            return 42

        # An external effect: its step in a transaction of its own, kept when the attempt fails.
        charged = leaseq.run_step(client, job, "charge", charge)
        # A database effect: its step in the handler's transaction, rolled back with it.
        leaseq.run_step(tx, job, "write", lambda: job.attempt)
        if job.attempt == 1:
            raise RuntimeError("after the charge")
        return charged

    worker = leaseq.Worker(url, queue=queue, handler=handler, transactional=True)
    assert worker.run_until_idle().failed == 1
    assert [s.name for s in client.steps(job_id)] == ["charge"]
    conn.execute("UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = %s", (job_id,))
    assert worker.run_until_idle().completed == 1
    assert calls == [1], "the retry did not charge again"
    assert client.result(job_id) == "42"
    recorded = [(s.name, s.attempt_no, s.output) for s in client.steps(job_id)]
    assert recorded == [("charge", 1, "42"), ("write", 2, "2")]


def test_the_async_client_steps_and_skips(url: str, client: leaseq.Client, queue: str) -> None:
    job_id = client.enqueue(queue, {})
    calls: list[str] = []

    async def charge() -> str:
        calls.append("charge")
        return "ch_1"

    async def scenario() -> None:
        async with await leaseq.aio.AsyncClient.connect(url) as aclient:
            (first,) = await aclient.claim(queue, "w")
            assert await leaseq.aio.run_step(aclient, first, "charge", charge) == "ch_1"
            assert await aclient.step(first, "charge", "ch_2") is False
            await aclient.fail(first, retry_in=timedelta(0))
            (second,) = await aclient.claim(queue, "w")
            async with await psycopg.AsyncConnection.connect(url) as tx:
                assert await leaseq.aio.run_step(tx, second, "charge", charge) == "ch_1"
                assert await leaseq.aio.step(tx, second, "email", {"to": "a@b"}) is True
            steps = await aclient.steps(job_id)
            assert [(s.name, s.attempt_no) for s in steps] == [("charge", 1), ("email", 2)]

    asyncio.run(scenario())
    assert calls == ["charge"]

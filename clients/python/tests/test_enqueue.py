"""Enqueue on the caller's connection: the job shares its transaction."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import psycopg
import pytest

import leaseq
import leaseq.aio
from conftest import count_jobs


def test_an_enqueue_commits_and_rolls_back_with_the_callers_transaction(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    with psycopg.connect(url) as own:
        leaseq.enqueue(own, queue, {"order": 1})
        own.rollback()
        assert count_jobs(conn, queue) == 0
        job_id = leaseq.enqueue(own, queue, {"order": 2})
        assert count_jobs(conn, queue) == 0, "not visible before the caller commits"
        own.commit()
    assert count_jobs(conn, queue) == 1
    assert client.job(job_id).status is leaseq.JobStatus.PENDING


def test_a_batch_returns_ids_in_payload_order(
    url: str, client: leaseq.Client, queue: str
) -> None:
    with psycopg.connect(url) as own:
        ids = leaseq.enqueue_batch(own, queue, [{"n": n} for n in range(5)])
    assert ids == sorted(ids) and len(ids) == 5
    assert [client.job(i).payload for i in ids] == [f'{{"n": {n}}}' for n in range(5)]


def test_a_payload_comes_back_exactly_as_enqueued(client: leaseq.Client, queue: str) -> None:
    text = '{"big": 123456789012345678901234567890, "fine": 0.1000000000000000055511151231257827}'
    client.enqueue(queue, leaseq.Json(text))
    (job,) = client.claim(queue, "w")
    assert job.payload_text == text
    assert job.payload["big"] == 123456789012345678901234567890


def test_a_dedupe_key_returns_the_live_jobs_id(client: leaseq.Client, queue: str) -> None:
    first = client.enqueue(queue, {}, dedupe_key="k")
    assert client.enqueue(queue, {"again": True}, dedupe_key="k") == first


def test_a_job_may_depend_on_one_enqueued_before_it_in_the_same_transaction(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    with psycopg.connect(url) as own:
        parent = leaseq.enqueue(own, queue, {})
        child = leaseq.enqueue(own, queue, {}, depends_on=[parent], on_parent_failure="dead")
        fan_out = leaseq.enqueue_batch(own, queue, [{}, {}], depends_on=[parent, child])
        own.rollback()
        assert count_jobs(conn, queue) == 0, "the parents and their children roll back together"
        parent = leaseq.enqueue(own, queue, {})
        fan_out = leaseq.enqueue_batch(own, queue, [{}, {}], depends_on=[parent])
    statuses = [client.job(i).status for i in fan_out]
    assert statuses == [leaseq.JobStatus.BLOCKED, leaseq.JobStatus.BLOCKED]
    assert [p.parent_id for p in client.parents(fan_out[1])] == [parent]


def test_a_plain_enqueue_still_calls_the_definition_of_a_database_not_yet_updated(
    url: str, conn: psycopg.Connection[Any]
) -> None:
    # The library of this release serves 0.2.0's definitions until ALTER EXTENSION UPDATE:
    # only an enqueue with parents needs 0.3.0's.
    old = f"py_at_020_{os.getpid()}"
    conn.execute(f"DROP DATABASE IF EXISTS {old}")
    conn.execute(f"CREATE DATABASE {old}")
    try:
        old_url = psycopg.conninfo.make_conninfo(url, dbname=old)
        with psycopg.connect(old_url, autocommit=True) as setup:
            setup.execute("CREATE EXTENSION leaseq VERSION '0.2.0'")
            setup.execute("SELECT leaseq.queue_create('py_old')")
        with leaseq.Client(old_url) as client:
            parent = client.enqueue("py_old", {"n": 1}, group_key="g")
            assert len(client.enqueue_batch("py_old", [{}, {}])) == 2
            # The server's own error, as psycopg raises it: not one of leaseq's refusals.
            with pytest.raises(psycopg.errors.UndefinedFunction):
                client.enqueue("py_old", {}, depends_on=[parent])
    finally:
        conn.execute(f"DROP DATABASE {old} WITH (FORCE)")


def test_the_async_enqueue_shares_the_callers_transaction(
    url: str, conn: psycopg.Connection[Any], queue: str
) -> None:
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(url) as own:
            await leaseq.aio.enqueue(own, queue, {"order": 1})
            await own.rollback()
            assert count_jobs(conn, queue) == 0
            ids = await leaseq.aio.enqueue_batch(own, queue, [{}, {}])
            await own.commit()
            assert len(ids) == 2

    asyncio.run(scenario())
    assert count_jobs(conn, queue) == 2

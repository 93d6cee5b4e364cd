"""Progress (`queue_progress`): a running job's last report, stored under its lease and shown by
`job()`; and `await_jobs` (`CALL queue_await`): a wait for jobs to be final, woken by the commits
that finish them, that runs only outside a transaction block."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
import time
from datetime import timedelta
from typing import Any
from uuid import uuid4

import psycopg
import pytest

import leaseq
import leaseq.aio

AWAITING = """SELECT count(*) FROM pg_stat_activity
                WHERE pid = %s AND state = 'active' AND query LIKE 'CALL leaseq.queue_await%%'"""


def waiting(conn: psycopg.Connection[Any], pid: int) -> bool:
    """Whether backend `pid` is inside `queue_await` now."""
    row = conn.execute(AWAITING, (pid,)).fetchone()
    return row is not None and row[0] == 1


def wait_until_waiting(conn: psycopg.Connection[Any], pid: int) -> None:
    deadline = time.monotonic() + 10
    while not waiting(conn, pid):
        assert time.monotonic() < deadline, "the await never started"
        time.sleep(0.02)
    time.sleep(0.2)  # past its first look: asleep, to be woken


# --- progress --------------------------------------------------------------------------------


def test_progress_is_stored_under_the_lease_and_shown_by_job(
    client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    (job,) = client.claim(queue, "w")
    before = client.job(job_id)
    assert (before.progress, before.progress_at) == (None, None), "nothing reported yet"
    assert client.progress(job, {"done": 3, "of": 10}) is True
    first = client.job(job_id)
    assert first.progress is not None and json.loads(first.progress) == {"done": 3, "of": 10}
    assert first.progress_at is not None and first.progress_at >= before.updated_at
    assert first.status is leaseq.JobStatus.RUNNING
    assert client.progress(job, leaseq.Json("0.5")) is True
    second = client.job(job_id)
    assert second.progress == "0.5", "each report replaces the last"
    assert second.progress_at is not None and second.progress_at >= first.progress_at
    assert client.complete(job, "ok") is True
    done = client.job(job_id)
    assert (done.status, done.progress) == (leaseq.JobStatus.SUCCEEDED, "0.5"), "the last stays"
    assert client.progress(job, 1.0) is False, "a finished job's token is fenced"
    assert client.job(job_id).progress == "0.5"


def test_a_stale_tokens_progress_is_false_and_changes_nothing(
    client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    (first,) = client.claim(queue, "w")
    assert client.progress(first, {"step": 1}) is True
    assert client.fail(first, {"error": "once"}, retry_in=timedelta(0)) is leaseq.JobStatus.PENDING
    kept = client.job(job_id)
    assert client.progress(first, {"step": "late"}) is False
    assert client.job(job_id) == kept, "the job row read back unchanged"
    (second,) = client.claim(queue, "w")
    assert client.progress(first, {"step": "late"}) is False, "the earlier attempt's token"
    assert client.job(job_id).progress == '{"step": 1}', "the earlier attempt's report shows"
    assert client.progress(second, {"step": 2}) is True
    assert client.job(job_id).progress == '{"step": 2}'
    assert client.cancel(job_id) is True
    cancelled = client.job(job_id)
    with pytest.raises(leaseq.LeaseLost):
        leaseq.report_progress(client, second, {"step": 3})
    assert second.lost.is_set()
    assert client.job(job_id) == cancelled


def test_progress_commits_and_rolls_back_with_the_callers_transaction(
    url: str, client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    (job,) = client.claim(queue, "w")
    with psycopg.connect(url) as tx:
        assert leaseq.progress(tx, job, {"n": 1}) is True
        tx.rollback()
        assert client.job(job_id).progress is None
        assert leaseq.progress(tx, job, {"n": 2}) is True
        assert client.job(job_id).progress is None, "not visible before the commit"
        tx.commit()
    assert client.job(job_id).progress == '{"n": 2}'
    # A random token: false, nothing stored, in the caller's transaction too.
    with psycopg.connect(url) as tx:
        assert leaseq.progress(tx, dataclasses.replace(job, lease_token=uuid4()), {"n": 3}) is False
    assert client.job(job_id).progress == '{"n": 2}'


def test_progress_refusals_surface_with_their_sqlstate_and_change_nothing(
    client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    (job,) = client.claim(queue, "w")
    assert client.progress(job, "started") is True
    kept = client.job(job_id)
    with pytest.raises(leaseq.NullArgument, match='argument "progress" must not be NULL') as null:
        client.progress(job, None)
    assert null.value.sqlstate == "22004"
    client.conn.execute("SET leaseq.max_payload_bytes = 16")
    with pytest.raises(leaseq.PayloadTooLarge) as large:
        client.progress(job, {"padding": "x" * 64})
    assert large.value.sqlstate == "54000"
    client.conn.execute("RESET leaseq.max_payload_bytes")
    with client.conn.transaction():
        client.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(leaseq.NeedsReadCommitted) as isolation:
            client.progress(job, "repeatable")
    assert isolation.value.sqlstate == "0A000"
    assert client.job(job_id) == kept


def test_a_handler_reports_progress_seen_while_it_runs(
    url: str, client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {"items": 3})
    seen: list[tuple[leaseq.JobStatus, str | None]] = []

    def handler(job: leaseq.Job) -> str:
        with leaseq.Client(url) as own:
            for done in range(1, job.payload["items"] + 1):
                leaseq.report_progress(own, job, {"done": done})
                detail = client.job(job.id)
                seen.append((detail.status, detail.progress))
        return "done"

    assert leaseq.Worker(url, queue=queue, handler=handler).run_until_idle().completed == 1
    running = leaseq.JobStatus.RUNNING
    assert seen == [(running, f'{{"done": {n}}}') for n in (1, 2, 3)], "seen at once, while running"
    assert client.job(job_id).progress == '{"done": 3}'


# --- await_jobs -------------------------------------------------------------------------------


def test_await_returns_all_final_once_every_job_is_final(client: leaseq.Client, queue: str) -> None:
    client.queue_create(queue, max_attempts=1)
    succeeded, dead, cancelled = (client.enqueue(queue, {"n": n}) for n in range(3))
    ok, bad = client.claim(queue, "w", batch=2)
    assert client.complete(ok) is True
    assert client.fail(bad, {"error": "bad"}) is leaseq.JobStatus.DEAD
    assert client.await_jobs([succeeded, dead, cancelled], timedelta(0)) == leaseq.Awaited(
        False, [cancelled]
    )
    assert client.cancel(cancelled) is True
    started = time.monotonic()
    awaited = client.await_jobs([cancelled, dead, succeeded], timedelta(minutes=1))
    assert awaited == leaseq.Awaited(all_final=True, unfinished=[])
    assert time.monotonic() - started < 5, "all final: it returns at once, not at the timeout"
    assert client.await_jobs([], timedelta(hours=1)) == leaseq.Awaited(True, [])


def test_await_with_timeout_zero_on_pending_jobs_says_which(
    client: leaseq.Client, queue: str
) -> None:
    first, second = client.enqueue(queue, {}), client.enqueue(queue, {})
    assert client.await_jobs([first], timedelta(0)) == leaseq.Awaited(False, [first])
    assert client.await_jobs([second, first], timedelta(0)) == leaseq.Awaited(
        False, [first, second]
    ), "ascending"
    started = time.monotonic()
    assert client.await_jobs([first], timedelta(milliseconds=300)).unfinished == [first]
    assert time.monotonic() - started >= 0.3, "the timeout was waited out"
    assert client.job(first).status is leaseq.JobStatus.PENDING


def test_await_wakes_when_another_connection_completes_the_job(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    (job,) = client.claim(queue, "w")
    answers: list[leaseq.Awaited] = []
    failures: list[BaseException] = []

    with leaseq.Client(url) as waiter:

        def wait() -> None:
            try:
                answers.append(waiter.await_jobs([job_id], timedelta(seconds=60)))
            except BaseException as error:  # surfaced by the main thread's asserts
                failures.append(error)

        thread = threading.Thread(target=wait)
        thread.start()
        wait_until_waiting(conn, waiter.conn.info.backend_pid)
        row = conn.execute(
            "SELECT backend_xmin, backend_xid FROM pg_stat_activity WHERE pid = %s",
            (waiter.conn.info.backend_pid,),
        ).fetchone()
        assert row == (None, None), "it waits holding no snapshot and no transaction id"
        assert answers == [] and failures == [], "still waiting before the job finishes"
        completed = time.monotonic()
        assert client.complete(job, "done") is True
        thread.join(20)
        woke = time.monotonic() - completed
    assert not thread.is_alive(), "the await did not return within 20 s of the completion"
    assert failures == []
    assert answers == [leaseq.Awaited(True, [])]
    assert woke < 5, f"woke {woke:.2f} s after the completion"


def test_await_in_a_transaction_block_is_refused_with_25001(
    url: str, client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    kept = client.job(job_id)
    started = time.monotonic()
    with pytest.raises(leaseq.NeedsOwnTransactions) as refused:
        with client.conn.transaction():
            client.await_jobs([job_id], timedelta(seconds=30))
    assert refused.value.sqlstate == "25001"
    assert "must be called by CALL on its own" in str(refused.value)
    assert time.monotonic() - started < 5, "refused at once, not after the timeout"
    assert client.job(job_id) == kept, "the client's connection works on, nothing changed"

    async def scenario() -> None:
        # An AsyncClient over a connection that is not in autocommit: every call opens a
        # transaction, so the await is always refused.
        async with leaseq.aio.AsyncClient(await psycopg.AsyncConnection.connect(url)) as inside:
            with pytest.raises(leaseq.NeedsOwnTransactions) as refused:
                await inside.await_jobs([job_id], timedelta(seconds=30))
            assert refused.value.sqlstate == "25001"

    asyncio.run(scenario())
    assert client.job(job_id) == kept


def test_await_refusals_surface_with_their_sqlstate_and_change_nothing(
    client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    kept = client.job(job_id)
    unknown = 9_000_000_000_000_000_000
    bad: list[tuple[list[Any], timedelta, type[leaseq.LeaseqError], str, str]] = [
        ([job_id], timedelta(seconds=-1), leaseq.InvalidArgument, "22023",
         'argument "timeout" must be at least 0 and at most 1 day'),
        ([job_id], timedelta(days=1, seconds=1), leaseq.InvalidArgument, "22023",
         'argument "timeout" must be at least 0 and at most 1 day'),
        ([job_id, job_id], timedelta(0), leaseq.InvalidArgument, "22023",
         'argument "job_ids" must not name a job twice'),
        ([job_id, unknown], timedelta(seconds=30), leaseq.NotFound, "42704",
         f"job {unknown} does not exist"),
        ([job_id, None], timedelta(0), leaseq.NullArgument, "22004",
         'argument "job_ids[2]" must not be NULL'),
    ]
    for ids, timeout, kind, sqlstate, said in bad:
        started = time.monotonic()
        with pytest.raises(kind) as refused:
            client.await_jobs(ids, timeout)
        assert refused.value.sqlstate == sqlstate, said
        assert said in str(refused.value)
        assert time.monotonic() - started < 5, "refused before any wait"
    assert client.job(job_id) == kept


def test_await_and_progress_follow_the_queues_privileges(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    (job,) = client.claim(queue, "w")
    assert client.progress(job, "mine") is True
    kept = client.job(job_id)
    suffix = os.getpid()
    observer, producer = f"py_await_observer_{suffix}", f"py_await_producer_{suffix}"
    for role, group in ((observer, "leaseq_observer"), (producer, "leaseq_producer")):
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE {group}")
    try:
        with leaseq.Client(psycopg.conninfo.make_conninfo(url, user=observer)) as watching:
            assert watching.await_jobs([job_id], timedelta(0)) == leaseq.Awaited(False, [job_id])
            with pytest.raises(leaseq.PermissionDenied) as refused:
                watching.progress(job, "not theirs")
            assert refused.value.sqlstate == "42501"
        with leaseq.Client(psycopg.conninfo.make_conninfo(url, user=producer)) as producing:
            with pytest.raises(leaseq.PermissionDenied) as refused:
                producing.await_jobs([job_id], timedelta(0))
            assert refused.value.sqlstate == "42501"
    finally:
        for role in (observer, producer):
            conn.execute(f"DROP ROLE {role}")
    assert client.job(job_id) == kept


def test_the_async_client_reports_progress_and_awaits(url: str, queue: str) -> None:
    async def scenario() -> None:
        async with (
            await leaseq.aio.AsyncClient.connect(url) as client,
            await leaseq.aio.AsyncClient.connect(url) as waiter,
        ):
            job_id = await client.enqueue(queue, {})
            (job,) = await client.claim(queue, "aw")
            assert await client.progress(job, {"done": 1}) is True
            await leaseq.aio.report_progress(client, job, {"done": 2})
            async with await psycopg.AsyncConnection.connect(url) as tx:
                assert await leaseq.aio.progress(tx, job, {"done": 3}) is True
                await tx.rollback()
            detail = await client.job(job_id)
            assert detail.progress == '{"done": 2}' and detail.progress_at is not None
            assert await waiter.await_jobs([job_id], timedelta(0)) == leaseq.Awaited(False, [job_id])
            awaiting = asyncio.create_task(waiter.await_jobs([job_id], timedelta(seconds=60)))
            deadline = time.monotonic() + 10
            pid = waiter.conn.info.backend_pid
            while True:
                cur = await client.conn.execute(AWAITING, (pid,))
                row = await cur.fetchone()
                if row is not None and row[0] == 1:
                    break
                assert time.monotonic() < deadline, "the await never started"
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)
            assert not awaiting.done()
            assert await client.complete(job) is True
            awaited = await asyncio.wait_for(awaiting, timeout=20)
            assert awaited == leaseq.Awaited(True, [])
            assert await client.progress(job, {"done": 4}) is False
            with pytest.raises(leaseq.LeaseLost):
                await leaseq.aio.report_progress(client, job, {"done": 5})
            assert job.lost.is_set()
            assert (await client.job(job_id)).progress == '{"done": 2}'

    asyncio.run(scenario())


def test_job_reads_a_database_not_yet_updated_without_progress(
    url: str, conn: psycopg.Connection[Any]
) -> None:
    # The library of this release serves 0.2.0's definitions until ALTER EXTENSION UPDATE, and
    # 0.2.0's `queue_job` has no progress columns: `job()` reads the job there without them.
    old = f"py_progress_at_020_{os.getpid()}"
    conn.execute(f"DROP DATABASE IF EXISTS {old}")
    conn.execute(f"CREATE DATABASE {old}")
    try:
        old_url = psycopg.conninfo.make_conninfo(url, dbname=old)
        with psycopg.connect(old_url, autocommit=True) as setup:
            setup.execute("CREATE EXTENSION leaseq VERSION '0.2.0'")
            setup.execute("SELECT leaseq.queue_create('py_old')")
        with leaseq.Client(old_url) as client:
            job_id = client.enqueue("py_old", {"n": 1})
            (job,) = client.claim("py_old", "w")
            detail = client.job(job_id)
            assert (detail.job_id, detail.status, detail.payload) == (
                job_id,
                leaseq.JobStatus.RUNNING,
                '{"n": 1}',
            )
            assert (detail.progress, detail.progress_at) == (None, None)
            # Inside a transaction the refusal aborts it: no second read, the server's answer.
            with pytest.raises(psycopg.errors.UndefinedColumn):
                with client.conn.transaction():
                    client.job(job_id)
            with pytest.raises(psycopg.errors.UndefinedFunction):
                client.progress(job, 1)
            assert client.complete(job) is True
            assert client.job(job_id).status == leaseq.JobStatus.SUCCEEDED

        async def scenario() -> None:
            async with await leaseq.aio.AsyncClient.connect(old_url) as aclient:
                detail = await aclient.job(job_id)
                assert detail.status == leaseq.JobStatus.SUCCEEDED and detail.progress is None

        asyncio.run(scenario())
    finally:
        conn.execute(f"DROP DATABASE {old} WITH (FORCE)")

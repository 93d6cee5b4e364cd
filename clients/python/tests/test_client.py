"""The Client covers every call the Rust client does, with typed rows."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import timedelta
from typing import Any

import psycopg

import leaseq
import leaseq.aio


def test_queue_create_defaults_are_the_sql_functions(
    conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    client.queue_create(queue + "_py")
    conn.execute("SELECT leaseq.queue_create(%s)", (queue + "_sql",))
    settings = """SELECT lease, max_attempts, backoff_base, backoff_cap, retain, max_snoozes,
                         group_concurrency
                    FROM leaseq.queues WHERE name = %s"""
    by_python = conn.execute(settings, (queue + "_py",)).fetchone()
    by_sql = conn.execute(settings, (queue + "_sql",)).fetchone()
    assert by_python is not None and by_python == by_sql


def test_a_job_lives_through_claim_renew_and_complete_under_its_lease(
    client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {"n": 1}, priority=5)
    (job,) = client.claim(queue, "w", lease=timedelta(minutes=1))
    assert (job.id, job.queue, job.attempt, job.priority) == (job_id, queue, 1, 5)
    assert client.result(job_id) is None, "no result while it runs"
    assert client.renew(job) is not None
    assert client.renew_batch([job]) == [client.job(job_id).lease_expires_at]
    assert client.complete(job, {"done": True}) is True
    assert client.complete(job) is False, "a finished job's token is fenced"
    assert client.renew(job) is None
    detail = client.job(job_id)
    assert detail.status is leaseq.JobStatus.SUCCEEDED and detail.result == '{"done": true}'
    assert client.result(job_id) == '{"done": true}'
    (attempt,) = client.attempts(job_id)
    assert attempt.outcome is leaseq.AttemptOutcome.SUCCEEDED and attempt.worker == "w"


def test_failures_retry_then_die_and_redrive_brings_them_back(
    client: leaseq.Client, queue: str
) -> None:
    client.queue_create(queue, max_attempts=2)
    job_id = client.enqueue(queue, {})
    (job,) = client.claim(queue, "w")
    assert client.fail(job, {"error": "once"}, retry_in=timedelta(0)) is leaseq.JobStatus.PENDING
    (job,) = client.claim(queue, "w")
    assert job.attempt == 2
    assert client.fail(job, {"error": "twice"}) is leaseq.JobStatus.DEAD
    assert [j.status for j in client.jobs(queue)] == [leaseq.JobStatus.DEAD]
    assert client.redrive(job_id) is True and client.redrive(job_id) is False
    (job,) = client.claim(queue, "w")
    assert job.attempt == 3, "numbered after its whole history"
    assert client.snooze(job, timedelta(hours=1)) is leaseq.JobStatus.PENDING
    assert client.cancel(job_id) is True
    outcomes = [a.outcome for a in client.attempts(job_id)]
    assert outcomes == [
        leaseq.AttemptOutcome.FAILED,
        leaseq.AttemptOutcome.FAILED,
        leaseq.AttemptOutcome.SNOOZED,
    ]


def test_batches_answer_per_job_in_input_order(client: leaseq.Client, queue: str) -> None:
    client.enqueue_batch(queue, [{}, {}, {}, {}])
    a, b, c, d = client.claim(queue, "w", batch=4)
    client.cancel(b.id)
    assert client.complete_batch([(a, {"r": 1}), (b, None), (c, None)]) == [True, False, True]
    assert client.fail_batch([(b, None), (d, {"e": 1})], retry=False) == [
        None,
        leaseq.JobStatus.DEAD,
    ]
    assert client.redrive_all(queue) == 1


def test_a_paused_queue_claims_nothing_until_resumed(client: leaseq.Client, queue: str) -> None:
    job_id = client.enqueue(queue, {})
    assert client.pause(queue) is True
    assert client.pause(queue) is False, "already paused"
    assert client.claim(queue, "w") == []
    assert client.resume(queue) is True
    assert client.resume(queue) is False, "already running"
    (job,) = client.claim(queue, "w")
    assert job.id == job_id


def test_redrive_many_and_cancel_many_answer_per_id_in_input_order(
    client: leaseq.Client, queue: str
) -> None:
    client.queue_create(queue, max_attempts=1)
    dead = client.enqueue(queue, {})
    (job,) = client.claim(queue, "w")
    assert client.fail(job) is leaseq.JobStatus.DEAD
    pending = client.enqueue(queue, {})
    assert client.redrive_many([dead, pending]) == [True, False]
    assert client.job(dead).status is leaseq.JobStatus.PENDING
    assert client.job(pending).status is leaseq.JobStatus.PENDING
    assert client.redrive_many([]) == []
    claimed = {j.id: j for j in client.claim(queue, "w", batch=2)}
    assert client.complete(claimed[pending]) is True
    assert client.cancel_many([pending, dead]) == [False, True], "finished already; running"
    assert client.complete(claimed[dead]) is False, "the cancelled job's lease is gone"
    assert client.job(dead).status is leaseq.JobStatus.CANCELLED
    assert client.job(pending).status is leaseq.JobStatus.SUCCEEDED
    outcomes = [a.outcome for a in client.attempts(dead)]
    assert outcomes == [leaseq.AttemptOutcome.FAILED, leaseq.AttemptOutcome.CANCELLED]


def test_jobs_filters_and_keyset_pages(client: leaseq.Client, queue: str) -> None:
    other = queue + "_other"
    client.queue_create(other)
    mark = {"customer": queue}  # matches this test's jobs only
    a = client.enqueue(queue, {**mark, "n": 1}, group_key="g1", dedupe_key=queue + "_d1")
    b = client.enqueue(queue, {"customer": "someone else"})
    c = client.enqueue(queue, {**mark, "n": 3})
    d = client.enqueue(other, mark)
    (running,) = client.claim(queue, queue + "_w")
    assert running.id == a

    def ids(rows: list[leaseq.JobSummary]) -> list[int]:
        return [r.job_id for r in rows]

    assert ids(client.jobs(queue)) == [c, b, a], "newest first"
    assert ids(client.jobs(queue, payload_contains=mark)) == [c, a]
    assert ids(client.jobs(queue, payload_contains=leaseq.Json('{"n": 3}'))) == [c]
    assert ids(client.jobs(payload_contains=mark)) == [d, c, a], "every queue when None"
    assert ids(client.jobs(queue, leaseq.JobStatus.RUNNING)) == [a]
    assert ids(client.jobs(queue, status=leaseq.JobStatus.PENDING, max_rows=1)) == [c]
    (found,) = client.jobs(worker=queue + "_w")
    assert (found.job_id, found.queue, found.group_key, found.dedupe_key, found.worker) == (
        a,
        queue,
        "g1",
        queue + "_d1",
        queue + "_w",
    )
    assert ids(client.jobs(queue, group_key="g1")) == [a]
    assert ids(client.jobs(dedupe_key=queue + "_d1")) == [a]
    assert client.jobs(other)[0].queue == other
    created_b = client.job(b).created_at
    assert ids(client.jobs(queue, created_after=created_b)) == [c, b]
    assert ids(client.jobs(queue, created_before=created_b)) == [a]

    many = client.enqueue_batch(other, [{"i": i} for i in range(7)])
    everything = ids(client.jobs(other))
    assert everything == [*reversed(many), d]
    pages: list[list[int]] = []
    before: int | None = None
    while page := ids(client.jobs(other, max_rows=3, before_id=before)):
        pages.append(page)
        before = page[-1]
    assert [len(p) for p in pages] == [3, 3, 2]
    assert [i for p in pages for i in p] == everything, "disjoint pages, all of them, in order"
    # Newer than one seen (tailing), and a window of ids.
    assert ids(client.jobs(other, after_id=many[4])) == [many[6], many[5]]
    assert ids(client.jobs(other, after_id=many[1], before_id=many[4])) == [many[3], many[2]]


def test_stats_grants_schedules_and_metrics_read_as_typed_rows(
    conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    client.enqueue(queue, {})
    (row,) = [s for s in client.stats() if s.queue == queue]
    assert (row.pending, row.running, row.waiting) == (1, 0, 0)
    assert row.oldest_pending_age is not None
    conn.execute(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'py_team') THEN "
        "CREATE ROLE py_team NOLOGIN; END IF; END $$"
    )
    assert client.grant(queue, "py_team", leaseq.QueuePrivilege.WORK) is True
    (grant,) = [g for g in client.grants() if g.queue == queue]
    assert (grant.role, grant.privilege) == ("py_team", leaseq.QueuePrivilege.WORK)
    assert client.revoke(queue, "py_team", leaseq.QueuePrivilege.WORK) is True
    (mine,) = [p for p in client.privileges() if p.queue == queue]
    assert mine == leaseq.QueueAccess(queue, produce=True, work=True, observe=True, admin=True)
    first = client.schedule(queue + "_tick", queue, "*/5 * * * *", {"tick": True})
    (found,) = [s for s in client.schedules() if s.name == queue + "_tick"]
    assert found.next_at == first and found.payload == '{"tick": true}'
    assert found.last_job_id is None  # no tick yet
    assert client.unschedule(queue + "_tick") is True
    assert f'leaseq_jobs{{queue="{queue}",state="pending"}} 1' in client.metrics()
    assert client.purge(queue, timedelta(0)) == 0


def test_metrics_show_a_snapshot_holding_the_horizon_back_until_it_ends(
    url: str, client: leaseq.Client, queue: str
) -> None:
    def gauge(line: str) -> float:
        found = re.search("^" + re.escape(line) + " (\\S+)$", client.metrics(), re.M)
        assert found, line
        return float(found.group(1))

    age, backend = "leaseq_oldest_snapshot_age_seconds", (
        'leaseq_xmin_horizon_age_transactions{holder="backend"}'
    )
    with psycopg.connect(url) as holder:
        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        holder.execute("SELECT count(*) FROM leaseq.jobs")
        client.enqueue(queue, {})  # a transaction since the snapshot's
        time.sleep(1.2)
        assert gauge(age) >= 1.2
        assert gauge(backend) >= 1
        holder.rollback()
    assert gauge(age) < 1.0


def test_the_async_client_runs_the_same_calls(url: str, queue: str) -> None:
    async def scenario() -> None:
        async with await leaseq.aio.AsyncClient.connect(url) as client:
            job_id = await client.enqueue(queue, {"async": True})
            (job,) = await client.claim(queue, "aw")
            assert job.id == job_id and job.payload == {"async": True}
            assert await client.complete(job) is True
            assert (await client.job(job_id)).status is leaseq.JobStatus.SUCCEEDED
            assert await client.pause(queue) is True
            await client.enqueue(queue, {"paused": True})
            assert await client.claim(queue, "aw") == []
            assert await client.resume(queue) is True
            (job,) = await client.claim(queue, "aw")
            assert await client.cancel_many([job.id]) == [True]
            assert await client.redrive_many([job.id]) == [False]
            assert await client.complete(job) is False
            (row,) = await client.jobs(queue, payload_contains={"paused": True})
            assert (row.job_id, row.status, row.queue) == (job.id, leaseq.JobStatus.CANCELLED, queue)
            assert queue in {p.queue for p in await client.privileges() if p.admin}

    asyncio.run(scenario())


def test_the_enums_have_the_extensions_labels_in_order(conn: psycopg.Connection[Any]) -> None:
    for sql_type, enum in (
        ("leaseq.job_status", leaseq.JobStatus),
        ("leaseq.attempt_outcome", leaseq.AttemptOutcome),
        ("leaseq.queue_privilege", leaseq.QueuePrivilege),
    ):
        row = conn.execute(f"SELECT enum_range(NULL::{sql_type})::text[]").fetchone()
        assert row is not None and row[0] == [e.value for e in enum], sql_type

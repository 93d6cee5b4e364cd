"""The Client covers every call the Rust client does, with typed rows."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime, timedelta, timezone
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
    enqueued_us = (detail.created_at - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(
        microseconds=1
    )
    assert job.key == f"{job_id}-{enqueued_us}", "the key: the id and the enqueue's microsecond"
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


def test_a_child_waits_for_both_parents_and_reads_their_results(
    client: leaseq.Client, queue: str
) -> None:
    children = queue + "_children"  # parents of any queue: the child's claims stay apart
    client.queue_create(children)
    first = client.enqueue(queue, {"part": 1})
    second = client.enqueue(queue, {"part": 2})
    child = client.enqueue(children, {"join": True}, depends_on=[first, second])
    assert client.job(child).status is leaseq.JobStatus.BLOCKED
    assert [j.job_id for j in client.jobs(children, leaseq.JobStatus.BLOCKED)] == [child]
    assert client.claim(children, "w") == [], "blocked: not claimable"
    a, b = sorted(client.claim(queue, "w", batch=10), key=lambda j: j.id)
    assert (a.id, b.id) == (first, second)
    big = '{"rows": 123456789012345678901234567890}'
    assert client.complete(b, leaseq.Json(big)) is True
    assert client.job(child).status is leaseq.JobStatus.BLOCKED, "one parent still runs"
    assert client.claim(children, "w") == []
    assert client.parents(child) == [
        leaseq.Parent(first, queue, leaseq.JobStatus.RUNNING, None),  # no result while it runs
        leaseq.Parent(second, queue, leaseq.JobStatus.SUCCEEDED, big),  # every digit kept
    ], "oldest first"
    assert client.complete(a, {"rows": 1}) is True
    assert client.job(child).status is leaseq.JobStatus.PENDING, "released by the last parent"
    (job,) = client.claim(children, "w")
    assert job.id == child
    assert [p.result for p in client.parents(child)] == ['{"rows": 1}', big]
    assert client.parents(first) == [], "no parents"


def test_a_parent_that_dies_cancels_its_children_or_runs_them_when_asked(
    client: leaseq.Client, queue: str
) -> None:
    children = queue + "_children"
    client.queue_create(children)
    parent = client.enqueue(queue, {})
    anyway = client.enqueue_batch(
        children, [{"n": 1}, {"n": 2}], depends_on=[parent], on_parent_failure="run"
    )
    cancelled = client.enqueue(children, {}, depends_on=[parent])
    assert [client.job(i).status for i in [*anyway, cancelled]] == [leaseq.JobStatus.BLOCKED] * 3
    (job,) = client.claim(queue, "w")
    assert client.fail(job, {"error": "gone"}, retry=False) is leaseq.JobStatus.DEAD
    assert client.job(cancelled).status is leaseq.JobStatus.CANCELLED, "the default: cancel"
    claimed = client.claim(children, "w", batch=10)
    assert sorted(j.id for j in claimed) == anyway, "run: once every parent is final"
    (dead,) = client.parents(anyway[0])
    assert (dead.parent_id, dead.status, dead.result) == (parent, leaseq.JobStatus.DEAD, None)


def test_each_job_of_a_batch_waits_for_its_own_parents(
    url: str, client: leaseq.Client, queue: str
) -> None:
    parents_queue = queue + "_parents"  # the parents' claims never take a child
    client.queue_create(parents_queue)
    first = client.enqueue(parents_queue, {"part": 1})
    second = client.enqueue(parents_queue, {"part": 2})
    both, only_first, free = client.enqueue_batch(
        queue, [{"n": 1}, {"n": 2}, {"n": 3}], depends_on_each=[[first, second], [first], []]
    )

    def status(job_id: int) -> leaseq.JobStatus:
        return client.job(job_id).status

    blocked, pending = leaseq.JobStatus.BLOCKED, leaseq.JobStatus.PENDING
    assert [status(i) for i in (both, only_first, free)] == [blocked, blocked, pending]
    assert [p.parent_id for p in client.parents(both)] == [first, second]
    assert [p.parent_id for p in client.parents(only_first)] == [first]
    assert client.parents(free) == []
    (job,) = client.claim(queue, "w", batch=10)
    assert job.id == free, "only the job without parents is claimable"

    a, b = sorted(client.claim(parents_queue, "w", batch=10), key=lambda j: j.id)
    assert (a.id, b.id) == (first, second)
    assert client.complete(a, {"one": 1}) is True
    assert [status(both), status(only_first)] == [blocked, pending], "released: only its job"
    (job,) = client.claim(queue, "w", batch=10)
    assert job.id == only_first
    assert client.complete(b) is True
    assert status(both) is pending, "released by its last parent"
    (job,) = client.claim(queue, "w", batch=10)
    assert job.id == both

    # On the caller's connection and in asyncio, the same argument, with `on_parent_failure`.
    with psycopg.connect(url) as own:
        parent = leaseq.enqueue(own, parents_queue, {})
        cancels = leaseq.enqueue_batch(own, queue, [{}, {}], depends_on_each=[[], [parent]])

    async def scenario() -> list[int]:
        async with await leaseq.aio.AsyncClient.connect(url) as aclient:
            dies = await aclient.enqueue_batch(
                queue, [{}, {}], depends_on_each=[[parent], []], on_parent_failure="dead"
            )
        async with await psycopg.AsyncConnection.connect(url) as own:
            runs = await leaseq.aio.enqueue_batch(
                own, queue, [{}], depends_on_each=[[parent]], on_parent_failure="run"
            )
        return [*dies, *runs]

    dies_a, free_b, runs = asyncio.run(scenario())
    assert [status(i) for i in (*cancels, dies_a, free_b, runs)] == [
        pending, blocked, blocked, pending, blocked
    ]
    (job,) = client.claim(parents_queue, "w")
    assert job.id == parent
    assert client.fail(job, retry=False) is leaseq.JobStatus.DEAD
    assert [status(i) for i in (cancels[1], dies_a, runs)] == [
        leaseq.JobStatus.CANCELLED, leaseq.JobStatus.DEAD, pending
    ]


def test_a_flow_fans_out_and_in_and_reports_how_far_it_got(
    client: leaseq.Client, queue: str
) -> None:
    big = '{"url": "x", "size": 123456789012345678901234567890}'
    ids = client.flow(
        [
            # Children before their parents: the server enqueues parents first, the answer
            # keeps the order given.
            leaseq.FlowNode("zip", queue, depends_on=["left", "right"], max_attempts=2),
            {"key": "fetch", "queue": queue, "payload": leaseq.Json(big), "priority": 3},
            leaseq.FlowNode("left", queue, {"side": "left"}, depends_on=("fetch",)),
            {"key": "right", "queue": queue, "depends_on": ["fetch"], "on_parent_failure": "run"},
        ]
    )
    assert list(ids) == ["zip", "fetch", "left", "right"]
    assert ids["fetch"] < ids["left"] < ids["right"] < ids["zip"], "parents first"
    fetch = client.job(ids["fetch"])
    assert (fetch.payload, fetch.priority, fetch.status) == (big, 3, leaseq.JobStatus.PENDING)
    assert client.job(ids["zip"]).payload == "{}", "the server's default payload"
    assert client.job(ids["zip"]).max_attempts == 2
    assert [p.parent_id for p in client.parents(ids["zip"])] == [ids["left"], ids["right"]]
    assert client.flow_status(ids["fetch"]) == leaseq.FlowStatus(
        jobs=4, blocked=3, pending=1, running=0, succeeded=0, dead=0, cancelled=0, finished=False
    )

    (job,) = client.claim(queue, "w", batch=10)
    assert job.id == ids["fetch"] and job.payload_text == big
    status = client.flow_status(ids["fetch"])
    assert (status.running, status.blocked) == (1, 3)
    assert client.complete(job, {"fetched": True}) is True
    status = client.flow_status(ids["fetch"])
    assert (status.blocked, status.pending, status.succeeded) == (1, 2, 1), "fanned out"
    sides = client.claim(queue, "w", batch=10)
    assert sorted(j.id for j in sides) == [ids["left"], ids["right"]]
    assert client.complete_batch([(j, None) for j in sides]) == [True, True]
    (job,) = client.claim(queue, "w", batch=10)
    assert job.id == ids["zip"], "fanned in"
    assert client.complete(job) is True
    assert client.flow_status(ids["fetch"]) == leaseq.FlowStatus(4, 0, 0, 0, 4, 0, 0, True)
    assert client.flow_status(ids["left"]).jobs == 2, "a job and its descendants"


def test_the_async_client_runs_dependencies_and_flows(url: str, queue: str) -> None:
    async def scenario() -> None:
        async with await leaseq.aio.AsyncClient.connect(url) as client:
            parent = await client.enqueue(queue, {"n": 1})
            (child,) = await client.enqueue_batch(queue, [{}], depends_on=[parent])
            alone = await client.enqueue(queue, {}, depends_on=[parent], on_parent_failure="dead")
            (job,) = await client.claim(queue, "aw", batch=10)
            assert job.id == parent
            assert await client.complete(job, {"ok": 1}) is True
            (row,) = await client.parents(child)
            assert (row.parent_id, row.result) == (parent, '{"ok": 1}')
            assert (await client.flow_status(parent)).pending == 2
            assert {j.id for j in await client.claim(queue, "aw", batch=10)} == {child, alone}
            ids = await client.flow(
                [leaseq.FlowNode("a", queue), leaseq.FlowNode("b", queue, depends_on=["a"])]
            )
            assert list(ids) == ["a", "b"]
            assert (await client.flow_status(ids["a"])).blocked == 1

    asyncio.run(scenario())


def test_the_enums_have_the_extensions_labels_in_order(conn: psycopg.Connection[Any]) -> None:
    for sql_type, enum in (
        ("leaseq.job_status", leaseq.JobStatus),
        ("leaseq.attempt_outcome", leaseq.AttemptOutcome),
        ("leaseq.queue_privilege", leaseq.QueuePrivilege),
    ):
        row = conn.execute(f"SELECT enum_range(NULL::{sql_type})::text[]").fetchone()
        assert row is not None and row[0] == [e.value for e in enum], sql_type

"""The Worker on a live cluster: every job run and finished once, outcomes mapped as documented,
never more than `concurrency` handlers, a lost lease fires `job.lost`, and a transactional
handler's writes commit only with its fenced completion."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

import leaseq


def statuses(conn: psycopg.Connection[Any], queue: str) -> dict[str, int]:
    rows = conn.execute(
        "SELECT status::text, count(*) FROM leaseq.jobs WHERE queue = %s GROUP BY 1", (queue,)
    ).fetchall()
    return {status: int(n) for status, n in rows}


def test_every_job_runs_once_and_succeeds_with_its_result(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    ids = client.enqueue_batch(queue, [{"n": n} for n in range(200)])
    seen: list[int] = []

    async def handler(job: leaseq.Job) -> Any:
        seen.append(job.id)
        return {"double": job.payload["n"] * 2}

    summary = leaseq.Worker(url, queue=queue, handler=handler, concurrency=8).run_until_idle()
    assert sorted(seen) == ids, "every job once"
    assert summary.completed == 200 and summary.fenced == 0
    assert statuses(conn, queue) == {"succeeded": 200}
    assert client.job(ids[7]).result == '{"double": 14}'


def test_outcomes_map_to_retry_dead_and_snooze(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    failing = client.enqueue(queue, {"do": "raise"})
    dying = client.enqueue(queue, {"do": "dead"})
    snoozing = client.enqueue(queue, {"do": "snooze"})

    def handler(job: leaseq.Job) -> Any:
        match job.payload["do"]:
            case "raise":
                raise RuntimeError("the upstream said no")
            case "dead":
                raise leaseq.Dead({"error": "unparsable"})
            case _:
                raise leaseq.Snooze(3600)

    summary = leaseq.Worker(url, queue=queue, handler=handler, concurrency=3).run_until_idle()
    assert (summary.failed, summary.dead, summary.snoozed) == (1, 1, 1)
    failed = client.job(failing)
    assert failed.status is leaseq.JobStatus.PENDING and failed.attempts == 1
    assert failed.last_error is not None
    assert '"error": "RuntimeError"' in failed.last_error
    assert "the upstream said no" in failed.last_error and "Traceback" in failed.last_error
    assert client.job(dying).status is leaseq.JobStatus.DEAD
    assert client.job(dying).last_error == '{"error": "unparsable"}'
    snoozed = client.job(snoozing)
    assert snoozed.status is leaseq.JobStatus.PENDING and snoozed.attempts == 0
    assert snoozed.snoozes == 1, "the budget is kept"


def test_never_more_than_concurrency_handlers_and_sync_ones_run_in_threads(
    url: str, client: leaseq.Client, queue: str
) -> None:
    client.enqueue_batch(queue, [{} for _ in range(40)])
    lock = threading.Lock()
    running = peak = 0
    threads: set[int] = set()

    def handler(job: leaseq.Job) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            threads.add(threading.get_ident())
        time.sleep(0.02)
        with lock:
            running -= 1

    summary = leaseq.Worker(url, queue=queue, handler=handler, concurrency=4).run_until_idle()
    assert summary.completed == 40
    assert 1 < peak <= 4, peak
    assert threading.get_ident() not in threads, "sync handlers never run on the loop's thread"


def test_a_lost_lease_fires_the_jobs_event_and_the_job_is_never_finished(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    told = asyncio.Event()

    async def handler(job: leaseq.Job) -> str:
        # Somebody cancels the job while it runs; the next heartbeat learns it.
        conn.execute("SELECT leaseq.queue_cancel(%s)", (job.id,))
        for _ in range(100):
            if job.lost.is_set():
                told.set()
                break
            await asyncio.sleep(0.05)
        return "too late"

    summary = leaseq.Worker(
        url, queue=queue, handler=handler, lease=timedelta(seconds=1)
    ).run_until_idle()
    assert told.is_set(), "job.lost fired"
    assert summary.lost == 1 and summary.completed == 0
    assert client.job(job_id).status is leaseq.JobStatus.CANCELLED
    assert client.job(job_id).result is None


def test_a_transactional_handlers_writes_commit_only_with_its_completion(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    effects = f"{queue}_effects"
    conn.execute(f"CREATE TABLE {effects} (job_id bigint PRIMARY KEY)")
    kept = client.enqueue(queue, {"lose": False})
    stale = client.enqueue(queue, {"lose": True})
    failing = client.enqueue(queue, {"raise": True})

    def handler(job: leaseq.Job, tx: psycopg.Connection[Any]) -> str:
        tx.execute(f"INSERT INTO {effects} VALUES (%s)", (job.id,))
        if job.payload.get("lose"):
            # The lease runs out before the completion (as for a worker paused past it).
            conn.execute(
                "UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp() WHERE id = %s",
                (job.id,),
            )
        if job.payload.get("raise"):
            raise ValueError("rolled back")
        return "effect written"

    summary = leaseq.Worker(
        url, queue=queue, handler=handler, concurrency=3, transactional=True
    ).run_until_idle()
    assert (summary.completed, summary.fenced, summary.failed) == (1, 1, 1)
    written = [row[0] for row in conn.execute(f"SELECT job_id FROM {effects}").fetchall()]
    assert written == [kept], "only the accepted completion's effect committed"
    assert client.job(kept).status is leaseq.JobStatus.SUCCEEDED
    # Left to its lease, which the worker's next claim reclaimed: retried later, history kept.
    assert client.job(stale).status is leaseq.JobStatus.PENDING
    assert [a.outcome for a in client.attempts(stale)] == [leaseq.AttemptOutcome.LEASE_EXPIRED]
    assert client.job(failing).status is leaseq.JobStatus.PENDING
    conn.execute(f"DROP TABLE {effects}")


def test_an_async_transactional_handler_shares_the_completion_transaction(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    effects = f"{queue}_effects"
    conn.execute(f"CREATE TABLE {effects} (job_id bigint PRIMARY KEY)")
    client.enqueue_batch(queue, [{}, {}])

    async def handler(job: leaseq.Job, tx: psycopg.AsyncConnection[Any]) -> None:
        await tx.execute(f"INSERT INTO {effects} VALUES (%s)", (job.id,))

    summary = leaseq.Worker(url, queue=queue, handler=handler, transactional=True).run_until_idle()
    assert summary.completed == 2
    assert conn.execute(f"SELECT count(*) FROM {effects}").fetchone() == (2,)
    conn.execute(f"DROP TABLE {effects}")


def test_stop_drains_and_a_committed_enqueue_wakes_an_idle_worker(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    woke: list[float] = []
    enqueued_at: list[float] = []

    async def handler(job: leaseq.Job) -> None:
        woke.append(time.monotonic())

    worker = leaseq.Worker(url, queue=queue, handler=handler, poll=600)

    async def scenario() -> leaseq.Summary:
        run = asyncio.create_task(worker.run_async())
        await asyncio.sleep(0.5)  # idle, its poll ten minutes away
        enqueued_at.append(time.monotonic())
        await asyncio.to_thread(client.enqueue, queue, {})
        for _ in range(3000):
            if woke:
                break
            await asyncio.sleep(0.01)
        worker.stop()
        return await run

    summary = asyncio.run(scenario())
    assert summary.completed == 1
    # Its poll is ten minutes away: anything within seconds is the NOTIFY (a loaded CI machine
    # once took 0.7 s to run the enqueue and the claim).
    assert woke and woke[0] - enqueued_at[0] < 10, "woken by the NOTIFY, not the poll"
    assert statuses(conn, queue) == {"succeeded": 1}


def test_an_idle_worker_whose_sessions_are_cut_listens_again_long_before_its_poll(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    # The worker's sessions: leaseq-py's in this database, begun after a time (the test's own
    # client began before the worker).
    theirs = """FROM pg_stat_activity WHERE datname = current_database()
                 AND application_name = 'leaseq-py' AND backend_start > %s"""

    def began_since(since: Any) -> int:
        found = conn.execute(f"SELECT count(*) {theirs}", (since,)).fetchone()
        assert found is not None
        return int(found[0])

    async def until(ready: Callable[[], bool]) -> bool:
        for _ in range(1000):
            if await asyncio.to_thread(ready):
                return True
            await asyncio.sleep(0.01)
        return False

    async def handler(job: leaseq.Job) -> None:
        pass

    worker = leaseq.Worker(url, queue=queue, handler=handler, poll=600)

    async def scenario() -> tuple[bool, bool, leaseq.Summary]:
        started = conn.execute("SELECT clock_timestamp()").fetchone()
        assert started is not None
        run = asyncio.create_task(worker.run_async())
        await until(lambda: began_since(started[0]) == 4)  # claims, heartbeat, finishes, LISTEN
        await asyncio.sleep(0.5)  # its first claim found nothing: idle
        # As a failover does: every session of the idle worker ends, and nothing tells it.
        cut = await asyncio.to_thread(
            lambda: conn.execute(
                f"SELECT clock_timestamp(), count(pg_terminate_backend(pid)) {theirs}",
                (started[0],),
            ).fetchone()
        )
        assert cut is not None and cut[1] == 4, cut
        back = await until(lambda: began_since(cut[0]) > 0)
        await asyncio.sleep(0.5)  # its claim after connecting again found nothing
        job = await asyncio.to_thread(client.enqueue, queue, {})
        # Its poll is ten minutes away: only a NOTIFY on a new session can have woken it.
        done = await until(lambda: client.job(job).status is leaseq.JobStatus.SUCCEEDED)
        worker.stop()
        return back, done, await run

    back, done, summary = asyncio.run(scenario())
    assert back, "the worker connected again at once, not at its poll"
    assert done and summary.completed == 1, "woken by a NOTIFY on its new session"


def test_prefetch_holds_jobs_beyond_the_slots_and_hands_back_the_unstarted_at_stop(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    client.enqueue_batch(queue, [{} for _ in range(20)])
    gate = asyncio.Event()
    running = peak = 0

    async def handler(job: leaseq.Job) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await gate.wait()
        running -= 1

    worker = leaseq.Worker(url, queue=queue, handler=handler, concurrency=2, prefetch=5, batch=10)

    async def scenario() -> tuple[dict[str, int], leaseq.Summary]:
        run = asyncio.create_task(worker.run_async())
        for _ in range(500):  # 2 running and 5 prefetched, all of them claimed
            if await asyncio.to_thread(statuses, conn, queue) == {"running": 7, "pending": 13}:
                break
            await asyncio.sleep(0.01)
        held = await asyncio.to_thread(statuses, conn, queue)
        worker.stop()
        for _ in range(500):  # the prefetched go back while the running still run
            if await asyncio.to_thread(statuses, conn, queue) == {"running": 2, "pending": 18}:
                break
            await asyncio.sleep(0.01)
        gate.set()
        return held, await run

    held, summary = asyncio.run(scenario())
    assert held == {"running": 7, "pending": 13}
    assert peak == 2, "never more handlers than slots"
    assert (summary.completed, summary.handed_back) == (2, 5)
    assert statuses(conn, queue) == {"succeeded": 2, "pending": 18}
    handed = conn.execute(
        """SELECT count(*) FROM leaseq.attempts a JOIN leaseq.jobs j ON j.id = a.job_id
            WHERE j.queue = %s AND a.outcome = 'handed_back' AND a.attempt_no = 1
              AND j.status = 'pending' AND j.attempts = 0""",
        (queue,),
    ).fetchone()
    assert handed == (5,), "handed back with no attempt spent, in history"


def test_prefetch_out_of_range_is_refused_before_anything_runs(url: str, queue: str) -> None:
    for bad in (-1, 10001):
        try:
            leaseq.Worker(url, queue=queue, handler=lambda job: None, prefetch=bad)
        except ValueError as refused:
            assert "prefetch must be between 0 and 10000" in str(refused)
        else:
            raise AssertionError(f"prefetch={bad} was accepted")


def test_a_worker_that_cannot_connect_says_where_and_why() -> None:
    worker = leaseq.Worker("postgresql://nobody@127.0.0.1:1/nowhere", queue="q", handler=print)
    try:
        worker.run_until_idle()
    except leaseq.ConnectionFailed as failed:
        assert str(failed).startswith("cannot connect to 127.0.0.1:1/nowhere as nobody: ")
        assert "Connection refused" in str(failed)
    else:
        raise AssertionError("connected to nowhere")

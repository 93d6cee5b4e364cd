"""The Worker on a live cluster: every job run and finished once, outcomes mapped as documented,
never more than `concurrency` handlers, a lost lease fires `job.lost`, and a transactional
handler's writes commit only with its fenced completion — also when its connections go silent
in a partition (`Partition`, a proxy that stops forwarding)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

import psycopg
import psycopg.conninfo

import leaseq
from conftest import statuses


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
                "WITH ended AS (UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp()"
                     " WHERE id = %s RETURNING queue, lease_expires_at, lease_token, id)"
                     " INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)"
                     " SELECT queue, lease_expires_at, lease_token, ARRAY[id] FROM ended",
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

    def began_since(since: Any, besides: list[int] | None = None) -> int:
        sql = f"SELECT count(*) {theirs} AND pid <> ALL(%s)"
        found = conn.execute(sql, (since, besides or [])).fetchone()
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
                f"SELECT array_agg(pid) FILTER (WHERE pg_terminate_backend(pid)) {theirs}",
                (started[0],),
            ).fetchone()
        )
        assert cut is not None and len(cut[0]) == 4, cut
        # Told apart by pid, not by time: a loaded machine may start its new session before the
        # statement that cut the old ones has ended.
        back = await until(lambda: began_since(started[0], besides=cut[0]) > 0)
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


class Partition:
    """A TCP proxy on 127.0.0.1 between a Worker and the test's server that can go silent, as a
    network partition does: every socket stays open and nothing tells either end, but no byte
    gets through either way — what is sent meanwhile is lost, so a call sent into the silence is
    never answered, even after it heals (TCP would send it again, at a backoff reaching minutes)
    — and a connection made meanwhile waits, unanswered, until it heals. A connection's end (a
    FIN) gets through once healed."""

    def __init__(self, url: str):
        self._url = url
        params = psycopg.conninfo.conninfo_to_dict(url)
        host, port = str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)
        self._unix = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else None
        self._upstream = (host, port)
        self._healed = asyncio.Event()
        self._healed.set()
        self._closing = False
        self._streams: list[asyncio.StreamWriter] = []
        self._serving: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._port = 0

    async def __aenter__(self) -> Partition:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def url(self) -> str:
        return psycopg.conninfo.make_conninfo(self._url, host="127.0.0.1", port=str(self._port))

    def silence(self) -> None:
        self._healed.clear()

    def heal(self) -> None:
        self._healed.set()

    async def close(self) -> None:
        """Ends every connection (each end sees it closed) and stops listening."""
        if self._closing:
            return
        self._closing = True
        self._healed.set()
        assert self._server is not None
        self._server.close()
        for stream in self._streams:
            stream.close()
        await asyncio.gather(*self._serving)
        await self._server.wait_closed()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        self._streams.append(client_w)
        try:
            await self._healed.wait()  # made in the silence: held, unanswered
            if self._closing:
                return
            if self._unix is not None:
                server_r, server_w = await asyncio.open_unix_connection(self._unix)
            else:
                server_r, server_w = await asyncio.open_connection(*self._upstream)
            self._streams.append(server_w)
            await asyncio.gather(self._pump(client_r, server_w), self._pump(server_r, client_w))
        except (ConnectionError, OSError):
            pass  # one end went away: the other is closed below
        finally:
            client_w.close()

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                if self._healed.is_set():
                    sink.write(data)
                    await sink.drain()
            await self._healed.wait()
        finally:
            sink.close()


def lease_end_when_lost(url: str, job: leaseq.Job, within: float) -> tuple[datetime, datetime] | None:
    """Waits up to `within` seconds for `job.lost` (in a handler's thread); then, at once, the
    server's clock and the job's lease end on the server, read on a connection of its own, not
    through the proxy. None if `lost` never came."""
    with psycopg.connect(url, autocommit=True) as watcher:
        if not job.lost.wait(within):
            return None
        row = watcher.execute(
            "SELECT clock_timestamp(), lease_expires_at FROM leaseq.jobs WHERE id = %s", (job.id,)
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def assert_told_before_the_lease_ended(seen: tuple[datetime, datetime] | None) -> None:
    assert seen is not None, "job.lost was set while the database could not be reached"
    told_at, lease_end = seen
    assert told_at < lease_end, f"told at {told_at}, after its lease ended at {lease_end}"
    # Near the end (at the end less a tenth, counted from the renewal's sending), not at the
    # first trouble.
    assert (lease_end - told_at).total_seconds() < 1.5, seen


async def stopped(
    worker: leaseq.Worker, run: asyncio.Task[leaseq.Summary], partition: Partition
) -> leaseq.Summary:
    """Stops `worker`. One still waiting on a silent connection 10 s on (as a worker that never
    gives a call up does) has the proxy closed under it, so that a failing test ends."""
    worker.stop()
    await asyncio.wait({run}, timeout=10)
    if not run.done():
        await partition.close()
    return await asyncio.wait_for(run, 30)


def until(ready: Callable[[], bool], within: float) -> bool:
    """Polls `ready` every 10 ms for up to `within` seconds (blocking: run it in a thread)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.01)
    return ready()


def attempt_outcomes(client: leaseq.Client, job_id: int) -> list[leaseq.AttemptOutcome]:
    return [a.outcome for a in client.attempts(job_id)]


def test_a_partitioned_handler_is_told_before_its_lease_ends_and_its_job_is_never_finished(
    url: str, client: leaseq.Client, queue: str
) -> None:
    job_id = client.enqueue(queue, {})
    lease = 3.0
    started, told, may_return = threading.Event(), threading.Event(), threading.Event()
    seen: list[tuple[datetime, datetime] | None] = []

    def handler(job: leaseq.Job) -> str:
        started.set()
        seen.append(lease_end_when_lost(url, job, within=3 * lease))
        told.set()
        may_return.wait(30)
        return "too late"

    async def scenario() -> leaseq.Summary:
        async with Partition(url) as partition:
            worker = leaseq.Worker(
                partition.url, queue=queue, handler=handler, concurrency=1,
                lease=timedelta(seconds=lease), poll=600,
            )
            run = asyncio.create_task(worker.run_async())
            assert await asyncio.to_thread(started.wait, 10), "the job was claimed"
            partition.silence()
            await asyncio.to_thread(told.wait, 4 * lease)
            worker.stop()  # while its one slot is taken: no claim after this one
            partition.heal()
            may_return.set()
            return await stopped(worker, run, partition)

    summary = asyncio.run(scenario())
    assert_told_before_the_lease_ended(seen[0] if seen else None)
    assert (summary.completed, summary.lost) == (0, 1)
    # The worker has stopped and its proxy is closed: nothing of it can reach the server now.
    assert client.job(job_id).status is not leaseq.JobStatus.SUCCEEDED
    assert leaseq.AttemptOutcome.SUCCEEDED not in attempt_outcomes(client, job_id)


def test_a_claim_lost_in_a_partition_is_given_up_and_claiming_resumes_once_it_heals(
    url: str, client: leaseq.Client, queue: str
) -> None:
    client.enqueue(queue, {"silence": True})
    silenced = asyncio.Event()

    async def scenario() -> tuple[bool, float, leaseq.Summary]:
        async with Partition(url) as partition:

            async def handler(job: leaseq.Job) -> None:
                if job.payload.get("silence") and job.attempt == 1:
                    # One slot: the next claim waits for this job, then goes out into the silence.
                    partition.silence()
                    silenced.set()

            worker = leaseq.Worker(
                partition.url, queue=queue, handler=handler, concurrency=1,
                lease=timedelta(seconds=4), poll=600,
            )
            run = asyncio.create_task(worker.run_async())
            await asyncio.wait_for(silenced.wait(), 10)
            await asyncio.sleep(1.0)  # the partition lasts a second
            partition.heal()
            healed_at = time.monotonic()
            later = await asyncio.to_thread(client.enqueue, queue, {})
            done = await asyncio.to_thread(
                until, lambda: client.job(later).status is leaseq.JobStatus.SUCCEEDED, 10
            )
            took = time.monotonic() - healed_at
            return done, took, await stopped(worker, run, partition)

    done, took, summary = asyncio.run(scenario())
    # Its poll is ten minutes away, its claim's answer lost for ever: only a claim given up
    # after a lease (4 s from 1 s before the heal) and sent again can have found the job. The
    # first job's outcome, sent into the silence too, holds the finisher for 5 s (the least a
    # finishing call gets; the 4 s lease leaves room for it), then is given up.
    assert done and took < 8, f"a job enqueued after the partition healed finished {took:.1f} s on"
    assert summary.completed >= 1 and summary.lost >= 1


def test_a_partitioned_transactional_handler_is_told_in_time_and_its_writes_never_commit(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    effects = f"{queue}_effects"
    conn.execute(f"CREATE TABLE {effects} (job_id bigint PRIMARY KEY)")
    job_id = client.enqueue(queue, {})
    lease = 3.0
    wrote, told, may_return = threading.Event(), threading.Event(), threading.Event()
    seen: list[tuple[datetime, datetime] | None] = []

    def handler(job: leaseq.Job, tx: psycopg.Connection[Any]) -> str:
        tx.execute(f"INSERT INTO {effects} VALUES (%s)", (job.id,))
        wrote.set()
        seen.append(lease_end_when_lost(url, job, within=3 * lease))
        told.set()
        may_return.wait(30)
        return "too late"

    async def scenario() -> leaseq.Summary:
        async with Partition(url) as partition:
            worker = leaseq.Worker(
                partition.url, queue=queue, handler=handler, concurrency=1, transactional=True,
                lease=timedelta(seconds=lease), poll=600,
            )
            run = asyncio.create_task(worker.run_async())
            assert await asyncio.to_thread(wrote.wait, 10), "the job was claimed"
            partition.silence()
            await asyncio.to_thread(told.wait, 4 * lease)
            worker.stop()
            partition.heal()
            may_return.set()
            return await stopped(worker, run, partition)

    summary = asyncio.run(scenario())
    assert_told_before_the_lease_ended(seen[0] if seen else None)
    assert (summary.completed, summary.fenced, summary.lost) == (0, 0, 1)
    assert conn.execute(f"SELECT count(*) FROM {effects}").fetchone() == (0,)
    assert client.job(job_id).status is not leaseq.JobStatus.SUCCEEDED
    assert leaseq.AttemptOutcome.SUCCEEDED not in attempt_outcomes(client, job_id)
    conn.execute(f"DROP TABLE {effects}")


def test_a_transactional_commit_lost_in_a_partition_is_given_up_by_the_lease_and_never_counted(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    effects = f"{queue}_effects"
    conn.execute(f"CREATE TABLE {effects} (job_id bigint PRIMARY KEY)")
    job_id = client.enqueue(queue, {})
    held: list[leaseq.Job] = []
    returned = threading.Event()

    async def scenario() -> tuple[float, leaseq.Summary]:
        loop = asyncio.get_running_loop()
        async with Partition(url) as partition:

            async def go_silent() -> None:
                partition.silence()

            def handler(job: leaseq.Job, tx: psycopg.Connection[Any]) -> str:
                tx.execute(f"INSERT INTO {effects} VALUES (%s)", (job.id,))
                held.append(job)
                # The completion and the commit go out into the silence.
                asyncio.run_coroutine_threadsafe(go_silent(), loop).result()
                returned.set()
                return "written"

            worker = leaseq.Worker(
                partition.url, queue=queue, handler=handler, concurrency=1, transactional=True,
                lease=timedelta(seconds=2), poll=600,
            )
            run = asyncio.create_task(worker.run_async())
            assert await asyncio.to_thread(returned.wait, 10), "the job was claimed"
            returned_at = time.monotonic()
            await asyncio.to_thread(held[0].lost.wait, 10)
            gave_up = time.monotonic() - returned_at
            partition.heal()
            return gave_up, await stopped(worker, run, partition)

    gave_up, summary = asyncio.run(scenario())
    # The lease (2 s) ends first; a finishing call gets 5 s at the least.
    assert held[0].lost.is_set() and gave_up < 7, f"given up {gave_up:.1f} s after the handler returned"
    assert (summary.completed, summary.failed, summary.lost) == (0, 0, 1)
    assert conn.execute(f"SELECT count(*) FROM {effects}").fetchone() == (0,)
    assert leaseq.AttemptOutcome.SUCCEEDED not in attempt_outcomes(client, job_id)
    conn.execute(f"DROP TABLE {effects}")

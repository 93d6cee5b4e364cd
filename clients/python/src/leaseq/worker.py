"""The worker loop every queue user otherwise rewrites: claim into free slots, heartbeat, finish
under the fence, back off on database trouble, drain on SIGTERM — as the Rust `Worker` does it.

One asyncio loop drives four things, each on a connection of its own (autocommit):
- **claims**: for the free slots only (at most `batch`), so no claimed job waits for a slot while
  its lease runs; when nothing is due it waits for a `NOTIFY leaseq_<queue>` (a `LISTEN`
  connection) or the `poll` interval, whichever comes first. With `prefetch=N` (opt-in) claims
  also fill N places for jobs that wait, in claim order, for the next free slot, their leases
  renewed with the others; at shutdown those not started are handed back (`queue_hand_back`:
  due again at once, no attempt spent). It trades fairness between workers and an attempt's
  `started_at` (the claim) for throughput: docs/design.md;
- **handlers**: an `async def` handler runs on the loop, a plain function in a thread
  (`asyncio.to_thread`), so a blocking handler never stalls heartbeats;
- **the heartbeat**: every held lease renewed by one `queue_renew_batch` at a third of the
  lease; a lease refused (expired, reclaimed, cancelled) sets the job's `lost` event, and the
  worker never finishes that job;
- **the finisher**: outcomes that arrive together go as one `queue_complete_batch` and one
  `queue_fail_batch` per kind (`Snooze` and a failure's own delay go alone).

With `transactional=True` the handler gets `(job, conn)`, `conn` inside an open transaction, and
the job is completed in that same transaction: the handler's writes commit only if the
completion is accepted, so a worker that lost its lease has its effects rolled back.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import signal
import socket
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import psycopg
import psycopg_pool
from psycopg import sql

from . import _calls
from . import aio as _aio
from . import client as _sync
from .errors import LeaseqError, connect_options
from .types import Job, JobStatus


class Dead(Exception):
    """Raised by a handler: the job goes dead at once, no retry (bad input never gets better)."""

    def __init__(self, error: Any = None):
        super().__init__(error)
        self.error = error


class Snooze(Exception):
    """Raised by a handler: not ready yet — the job comes back after `seconds`, its attempt
    budget kept (`queue_snooze`)."""

    def __init__(self, seconds: float):
        super().__init__(seconds)
        self.seconds = seconds


@dataclass
class Summary:
    """What a run did."""

    completed: int = 0
    failed: int = 0
    dead: int = 0
    snoozed: int = 0
    #: Jobs whose lease was lost before they finished (never completed nor failed by us).
    lost: int = 0
    #: Outcomes the server fenced: the lease ran out between the handler's end and its finish.
    fenced: int = 0
    #: Prefetched jobs never started, handed back at shutdown.
    handed_back: int = 0


@dataclass
class _Decision:
    job: Job
    kind: str  # complete | fail | dead | snooze
    document: Any = None
    delay: timedelta | None = None
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


Handler = Callable[..., Any]

#: Trouble only — database errors while claiming, renewing or finishing, and lost leases — at
#: WARNING, with the server's message (never a payload).
log = logging.getLogger("leaseq.worker")


def error_document(error: BaseException) -> dict[str, Any]:
    """What a handler's exception records as the attempt's error."""
    return {
        "error": type(error).__name__,
        "message": str(error),
        "traceback": "".join(traceback.format_exception(error)),
    }


class Worker:
    """Runs `handler` for the jobs of `queue`, at most `concurrency` at once.

    `handler(job)` (or `handler(job, conn)` with `transactional=True`) returns the job's result
    (any JSON value, or None), or raises: `Dead(error)` → dead at once, `Snooze(seconds)` →
    back later with its budget kept, any other exception → failed and retried by the queue's
    backoff (its error document: type, message, traceback).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        queue: str,
        handler: Handler,
        concurrency: int = 10,
        lease: timedelta | None = None,
        batch: int | None = None,
        prefetch: int = 0,
        transactional: bool = False,
        poll: float = 1.0,
        grace: float = 30.0,
        worker_id: str | None = None,
    ):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 0 <= prefetch <= 10000:
            raise ValueError("prefetch must be between 0 and 10000")
        self.conninfo = conninfo
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.lease = lease
        self.prefetch = prefetch
        self.batch = max(1, min(batch or concurrency + prefetch, 10000))
        self.transactional = transactional
        self.poll = poll
        self.grace = grace
        self.worker_id = worker_id or f"{socket.gethostname()}/pid-{os.getpid()}/py"
        self.summary = Summary()
        self._is_async = inspect.iscoroutinefunction(handler)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- running -------------------------------------------------------------------------

    def run(self) -> Summary:
        """Works until SIGTERM or SIGINT (or `stop()`): stops claiming, lets running handlers
        finish for up to `grace` seconds, leaves the rest to their leases, returns."""
        return asyncio.run(self.run_async(signals=True))

    def run_until_idle(self) -> Summary:
        """Works until no job is due and none is held: for tests and batch jobs."""
        return asyncio.run(self.run_async(until_idle=True))

    def stop(self) -> None:
        """Asks a running worker to drain and return (from any thread)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def run_async(self, *, until_idle: bool = False, signals: bool = False) -> Summary:
        loop = self._loop = asyncio.get_running_loop()
        stop = self._stop = asyncio.Event()
        # Room for the jobs claimed and not done (running or prefetched), slots for the running.
        room = asyncio.Semaphore(self.concurrency + self.prefetch)
        slots = asyncio.Semaphore(self.concurrency)
        held: dict[int, Job] = {}
        waiting: dict[int, Job] = {}
        decisions: asyncio.Queue[_Decision] = asyncio.Queue()
        wake = asyncio.Event()
        running: set[asyncio.Task[None]] = set()
        # Everything opened is closed on the way out, whatever failed on the way in.
        async with contextlib.AsyncExitStack() as opened:
            if signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, stop.set)
                    opened.callback(loop.remove_signal_handler, sig)
            pool: Any = None
            if self.transactional and self._is_async:
                pool = psycopg_pool.AsyncConnectionPool(
                    self.conninfo, min_size=0, max_size=self.concurrency, open=False,
                    kwargs=connect_options(self.conninfo),
                )
                await pool.open()
                opened.push_async_callback(pool.close)
            elif self.transactional:
                pool = psycopg_pool.ConnectionPool(
                    self.conninfo, min_size=0, max_size=self.concurrency, open=False,
                    kwargs=connect_options(self.conninfo),
                )
                await asyncio.to_thread(pool.open)
                opened.push_async_callback(asyncio.to_thread, pool.close)
            conns = []
            for _ in range(4):  # claims, heartbeat, finishes, LISTEN
                conn = await _aio.connect(self.conninfo)
                opened.push_async_callback(conn.close)
                conns.append(conn)
            claimer, heart, finisher, listener = conns
            await listener.execute(self._listen_statement())
            background = [
                asyncio.create_task(self._listen(listener, wake)),
                asyncio.create_task(self._heartbeat(heart, held)),
                asyncio.create_task(self._finish(finisher, decisions)),
            ]
            try:
                claimer = await self._claim_loop(
                    claimer, (room, slots), (held, waiting), running, decisions, wake, pool,
                    until_idle,
                )
                opened.push_async_callback(claimer.close)  # a new one if it had to reconnect
                if waiting:
                    await self._hand_back(claimer, held, waiting)
                if running:
                    _, late = await asyncio.wait(running, timeout=self.grace)
                    for task in late:
                        task.cancel()
                    if late:
                        await asyncio.gather(*late, return_exceptions=True)
                await decisions.join()
            finally:
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
        return self.summary

    # --- claiming ------------------------------------------------------------------------

    async def _claim_loop(
        self,
        conn: psycopg.AsyncConnection[Any],
        semaphores: tuple[asyncio.Semaphore, asyncio.Semaphore],
        jobs_by_id: tuple[dict[int, Job], dict[int, Job]],
        running: set[asyncio.Task[None]],
        decisions: asyncio.Queue[_Decision],
        wake: asyncio.Event,
        pool: Any,
        until_idle: bool,
    ) -> psycopg.AsyncConnection[Any]:
        """Claims until stopped; returns the connection it ended with."""
        assert self._stop is not None
        room, held = semaphores[0], jobs_by_id[0]
        backoff = 0.1
        while not self._stop.is_set():
            if not await self._room_or_stop(room):  # room for at least one job before claiming
                break
            if self._stop.is_set():
                room.release()
                break
            free = 1
            while free < self.batch and not room.locked():
                await room.acquire()
                free += 1
            wake.clear()
            try:
                jobs = await _aio.run(conn, _calls.claim(self.queue, self.worker_id, free, self.lease))
                backoff = 0.1
            except LeaseqError as refused:
                for _ in range(free):
                    room.release()
                if refused.sqlstate and refused.sqlstate[:2] in ("22", "42", "0A", "54", "3F"):
                    raise  # the server refuses this claim and would again
                log.warning("leaseq worker: claim failed, retrying in %.1f s: %s", backoff, refused)
                conn = await self._reconnect(conn, backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            except psycopg.OperationalError as lost:
                for _ in range(free):
                    room.release()
                log.warning("leaseq worker: claim failed, retrying in %.1f s: %s", backoff, lost)
                conn = await self._reconnect(conn, backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            for _ in range(free - len(jobs)):
                room.release()
            for job in jobs:
                held[job.id] = job
                task = asyncio.create_task(
                    self._run_job(job, semaphores, jobs_by_id, decisions, pool)
                )
                running.add(task)
                task.add_done_callback(running.discard)
            if jobs:
                continue
            if until_idle and not held and not running and decisions.empty():
                return conn
            # Idle only once what is held has finished: until then, look again soon.
            timeout = 0.05 if until_idle else self.poll
            waits = [asyncio.create_task(wake.wait()), asyncio.create_task(self._stop.wait())]
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
        return conn

    async def _room_or_stop(self, room: asyncio.Semaphore) -> bool:
        """Takes room for one job; False, taking none, when stopped first (prefetched jobs
        waiting for slots must not hold up their hand-back)."""
        assert self._stop is not None
        if not room.locked():
            await room.acquire()
            return True
        took, stopped = asyncio.create_task(room.acquire()), asyncio.create_task(self._stop.wait())
        await asyncio.wait((took, stopped), return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if took.done():
            return True
        took.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await took
        if took.cancelled():
            return False
        room.release()  # acquired while being cancelled
        return False

    async def _hand_back(
        self,
        conn: psycopg.AsyncConnection[Any],
        held: dict[int, Job],
        waiting: dict[int, Job],
    ) -> None:
        """Gives back, in one call, the prefetched jobs not started at shutdown; should that
        fail they are left to their leases. (Their tasks, finding themselves gone from
        `waiting`, end when a slot reaches them.)"""
        jobs = [j for j in waiting.values() if not j.lost.is_set()]
        waiting.clear()
        try:
            answers = await _aio.run(conn, _calls.hand_back([(j.id, j.lease_token) for j in jobs]))
            self.summary.handed_back += sum(answers)
            self.summary.lost += len(answers) - sum(answers)
        except (LeaseqError, psycopg.OperationalError) as failed:
            log.warning("leaseq worker: %d prefetched job(s) left to their leases: %s", len(jobs), failed)
        finally:
            for job in jobs:
                held.pop(job.id, None)

    async def _reconnect(
        self, conn: psycopg.AsyncConnection[Any], backoff: float
    ) -> psycopg.AsyncConnection[Any]:
        await asyncio.sleep(backoff)
        if not conn.closed:
            return conn
        try:
            return await _aio.connect(self.conninfo)
        except LeaseqError:
            return conn

    # --- one job -------------------------------------------------------------------------

    async def _run_job(
        self,
        job: Job,
        semaphores: tuple[asyncio.Semaphore, asyncio.Semaphore],
        jobs_by_id: tuple[dict[int, Job], dict[int, Job]],
        decisions: asyncio.Queue[_Decision],
        pool: Any,
    ) -> None:
        (room, slots), (held, waiting) = semaphores, jobs_by_id
        released = started = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                room.release()
                if started:
                    slots.release()

        try:
            # A slot at once, or (prefetched) in claim order: asyncio's semaphore is fair.
            waiting[job.id] = job
            await slots.acquire()
            started = True
            if waiting.pop(job.id, None) is None or job.lost.is_set():
                if job.lost.is_set():
                    self.summary.lost += 1
                return  # handed back at shutdown, or its lease is gone: not ours to start
            if self.transactional:
                await self._run_in_transaction(job, pool)
                return
            try:
                result = await self._call(job)
                decision = _Decision(job, "complete", result)
            except Dead as dead:
                decision = _Decision(job, "dead", dead.error)
            except Snooze as snooze:
                decision = _Decision(job, "snooze", delay=timedelta(seconds=snooze.seconds))
            except Exception as error:
                decision = _Decision(job, "fail", error_document(error))
            # A slot frees as soon as the handler is done: the next claim overlaps the finish.
            release()
            if job.lost.is_set():
                self.summary.lost += 1
                return
            await decisions.put(decision)
            await decision.done
        except asyncio.CancelledError:
            # Shut down past the grace: the job is left to its lease, never finished by us.
            job.lost.set()
            raise
        finally:
            waiting.pop(job.id, None)
            release()
            held.pop(job.id, None)

    async def _call(self, job: Job, *extra: Any) -> Any:
        if self._is_async:
            return await cast(Awaitable[Any], self.handler(job, *extra))
        return await asyncio.to_thread(self.handler, job, *extra)

    async def _run_in_transaction(self, job: Job, pool: Any) -> None:
        """The handler and the completion in one transaction, committed only if the completion
        is accepted; a failure rolls the handler's writes back and fails the job apart."""
        if self._is_async:
            async with pool.connection() as conn:
                kind, document, delay = await self._transaction_async(job, conn)
        else:
            kind, document, delay = await asyncio.to_thread(self._transaction_sync, job, pool)
        if kind in ("completed", "fenced"):
            setattr(self.summary, kind, getattr(self.summary, kind) + 1)
            return
        async with await _aio.connect(self.conninfo) as conn:
            if kind == "snooze" and delay is not None:
                status = await _aio.run(conn, _calls.snooze(job.id, job.lease_token, delay))
            else:
                status = await _aio.run(
                    conn, _calls.fail(job.id, job.lease_token, document, kind != "dead", None)
                )
            self._count(kind, status)

    async def _transaction_async(
        self, job: Job, conn: psycopg.AsyncConnection[Any]
    ) -> tuple[str, Any, timedelta | None]:
        try:
            async with conn.transaction():
                result = await cast(Awaitable[Any], self.handler(job, conn))
                if not await _aio.run(conn, _calls.complete(job.id, job.lease_token, result)):
                    raise _Fenced()
            return ("completed", None, None)
        except BaseException as error:
            return _outcome_of(error)

    def _transaction_sync(self, job: Job, pool: Any) -> tuple[str, Any, timedelta | None]:
        with pool.connection() as conn:
            try:
                with conn.transaction():
                    result = self.handler(job, conn)
                    if not _sync.run(conn, _calls.complete(job.id, job.lease_token, result)):
                        raise _Fenced()
                return ("completed", None, None)
            except BaseException as error:
                return _outcome_of(error)

    def _count(self, kind: str, status: JobStatus | None) -> None:
        if status is None:
            self.summary.fenced += 1
        elif kind == "snooze":
            self.summary.snoozed += 1
        elif status is JobStatus.DEAD:
            self.summary.dead += 1
        else:
            self.summary.failed += 1

    # --- background ----------------------------------------------------------------------

    async def _listen(self, conn: psycopg.AsyncConnection[Any], wake: asyncio.Event) -> None:
        """Sets `wake` at each NOTIFY. The notifications end with the session (a failover, a
        terminated backend): then it listens again on a new one and wakes the claim loop, for
        jobs may have come meanwhile — an idle worker would otherwise sleep until its poll."""
        backoff = 0.1
        try:
            while True:
                with contextlib.suppress(psycopg.OperationalError):
                    async for _ in conn.notifies():
                        wake.set()
                await conn.close()
                try:
                    conn = await _aio.connect(self.conninfo)
                    await conn.execute(self._listen_statement())
                    backoff = 0.1
                    wake.set()
                except (LeaseqError, psycopg.OperationalError) as failed:
                    # `conn` closed, its notifies end at once: the next round tries again.
                    await conn.close()
                    log.warning("leaseq worker: LISTEN failed, retrying in %.1f s: %s", backoff, failed)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
        finally:
            await conn.close()

    def _listen_statement(self) -> sql.Composed:
        return sql.SQL("LISTEN {}").format(sql.Identifier(f"leaseq_{self.queue}"))

    async def _heartbeat(self, conn: psycopg.AsyncConnection[Any], held: dict[int, Job]) -> None:
        try:
            while True:
                jobs = [j for j in list(held.values()) if not j.lost.is_set()]
                # Every held lease renewed at a third of the shortest: one statement for them all.
                # (Nothing held: look again soon, so a short lease claimed meanwhile is not missed.)
                shortest = min((j.lease_seconds for j in jobs), default=0.3)
                await asyncio.sleep(min(max(shortest / 3, 0.05), 10.0))
                jobs = [j for j in list(held.values()) if not j.lost.is_set()]
                if not jobs:
                    continue
                try:
                    expiries = await _aio.run(
                        conn, _calls.renew_batch([(j.id, j.lease_token) for j in jobs], self.lease)
                    )
                except (LeaseqError, psycopg.OperationalError):
                    if conn.closed:
                        try:
                            conn = await _aio.connect(self.conninfo)
                        except LeaseqError:
                            pass
                    continue
                for job, expiry in zip(jobs, expiries):
                    if expiry is None:
                        log.warning(
                            "leaseq worker: job %s lost its lease (attempt %s)", job.id, job.attempt
                        )
                        job.lost.set()
        finally:
            await conn.close()

    async def _finish(
        self, conn: psycopg.AsyncConnection[Any], decisions: asyncio.Queue[_Decision]
    ) -> None:
        try:
            while True:
                round_ = [await decisions.get()]
                while not decisions.empty():
                    round_.append(decisions.get_nowait())
                try:
                    try:
                        await self._finish_round(conn, round_)
                    except (LeaseqError, psycopg.OperationalError):
                        if not conn.closed:
                            raise
                        # Its session was cut while idle (a failover, a terminated backend): send
                        # again on a new one. The fence makes that safe: an outcome whose commit
                        # went unanswered is refused as stale, changing nothing (counted fenced).
                        conn = await _aio.connect(self.conninfo)
                        await self._finish_round(conn, round_)
                except (LeaseqError, psycopg.OperationalError) as failed:
                    # Unsent: the jobs' leases run out and they are retried by the queue's policy.
                    log.warning("leaseq worker: %d outcome(s) not sent: %s", len(round_), failed)
                    self.summary.lost += len(round_)
                    if conn.closed:
                        try:
                            conn = await _aio.connect(self.conninfo)
                        except LeaseqError:
                            pass
                finally:
                    for decision in round_:
                        if not decision.done.done():
                            decision.done.set_result(None)
                        decisions.task_done()
        finally:
            await conn.close()

    async def _finish_round(
        self, conn: psycopg.AsyncConnection[Any], round_: list[_Decision]
    ) -> None:
        completes = [d for d in round_ if d.kind == "complete"]
        if completes:
            done = await _aio.run(
                conn, _calls.complete_batch([(d.job.id, d.job.lease_token, d.document) for d in completes])
            )
            self.summary.completed += sum(done)
            self.summary.fenced += len(done) - sum(done)
        for kind, retry in (("fail", True), ("dead", False)):
            failing = [d for d in round_ if d.kind == kind]
            if failing:
                statuses = await _aio.run(
                    conn,
                    _calls.fail_batch([(d.job.id, d.job.lease_token, d.document) for d in failing], retry),
                )
                for status in statuses:
                    self._count(kind, status)
        for d in round_:
            if d.kind == "snooze" and d.delay is not None:
                status = await _aio.run(conn, _calls.snooze(d.job.id, d.job.lease_token, d.delay))
                self._count("snooze", status)


class _Fenced(Exception):
    """The completion was refused: roll the handler's writes back."""


def _outcome_of(error: BaseException) -> tuple[str, Any, timedelta | None]:
    """What a transactional handler's exception (its transaction rolled back) does to the job."""
    if isinstance(error, _Fenced):
        return ("fenced", None, None)
    if isinstance(error, Dead):
        return ("dead", error.error, None)
    if isinstance(error, Snooze):
        return ("snooze", None, timedelta(seconds=error.seconds))
    if isinstance(error, Exception):
        return ("fail", error_document(error), None)
    raise error


__all__ = ["Dead", "Snooze", "Summary", "Worker", "error_document"]

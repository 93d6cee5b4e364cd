"""The worker loop every queue user otherwise rewrites: claim into free slots, heartbeat, finish
under the fence, back off on database trouble, drain on SIGTERM — as the Rust `Worker` does it.

One asyncio loop drives four things, each on a connection of its own (autocommit):
- **claims**: for the free slots only (at most `batch`), so no claimed job waits for a slot while
  its lease runs; when nothing is due it waits for a `NOTIFY leaseq_<queue>` (a `LISTEN`
  connection) or the `poll` interval, whichever comes first. With `prefetch=N` (opt-in) claims
  also fill N places for jobs that wait, in claim order, for the next free slot, their leases
  renewed with the others; at shutdown those not started are handed back (`queue_hand_back`:
  due again at once, no attempt spent). It trades fairness between workers and an attempt's
  `started_at` (the claim) for throughput: docs/design.md. A claim waits for its answer a lease
  at most (the Worker's `lease`, else the queue's as the last claimed jobs told it, 30 s before
  any): jobs in a later answer would be lost already, and a connection gone silent (a partition:
  no answer, no reset) must not hold the claim loop until TCP gives up, a quarter of an hour on;
- **handlers**: an `async def` handler (or any callable whose call returns an awaitable) runs
  on the loop, a plain function on one of the Worker's own `concurrency` threads, so a blocking
  handler never stalls heartbeats, and never waits for a thread;
- **the heartbeat**: every held lease renewed at the latest when a third of its time is left,
  with every other past a sixth of its time, in one `queue_renew_batch`. A lease's end is
  counted from when the claim or renewal that granted it was *sent*: the server counts from when
  it ran it, later, so ours comes first. A lease refused (expired, reclaimed, cancelled) — or
  unrenewed by its end less a margin (a tenth, 1 s at most), even while a renewal is still out —
  sets the job's `lost` event, and the worker never finishes that job; a renewal unanswered by
  then has its connection dropped, and the next one is made anew;
- **the finisher**: outcomes that arrive together go as one `queue_complete_batch` and one
  `queue_fail_batch` per kind (`Snooze` and a failure's own delay go alone). A call waits for
  its answer until the leases it carries end (5 s at least): then its connection is dropped and
  the outcomes are left to the leases (counted `lost`); the fence makes a late one harmless.
  An outcome JSON cannot encode, or that the server refuses for its document (too large, or a
  data exception), fails its own job only — dead, or retried if it was a failure, with the
  reason as its error — and never holds the rest of the round back.

Stopping (SIGTERM or SIGINT from the main thread, or `stop()`): claims stop, prefetched jobs are
handed back, handlers get `grace` seconds; past it they are abandoned — their jobs left to their
leases and counted — and nothing they keep running holds the process (a second signal exits at
once).

Dropping a connection with a call out shuts its socket down: the call fails at once, where
cancelling it would have psycopg ask the server to cancel it, over the same silent network, for
up to 10 s.

With `transactional=True` the handler gets `(job, conn)`, `conn` inside an open transaction, and
the job is completed in that same transaction: the handler's writes commit only if the
completion is accepted, so a worker that lost its lease has its effects rolled back. `conn` is
cut when the lease is given up, and the completion and commit wait for their answer until the
lease's end (5 s at least): a commit not sent by then never goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from queue import SimpleQueue
from typing import Any, TypeVar, cast

import psycopg
import psycopg_pool
from psycopg import sql

from . import _calls, _otel
from . import aio as _aio
from . import metrics as _metrics
from . import client as _sync
from ._calls import Call
from .errors import LeaseqError, connect_options
from .types import Job, JobStatus, Json, document

T = TypeVar("T")

#: How long a claim may wait for its answer before any claim has told the queue's lease.
FIRST_CLAIM_WAIT = 30.0
#: The least time one finishing call gets, even when its leases are about to end.
MIN_FINISH_WAIT = 5.0
#: A handler is told it lost its job 1/STOP_MARGIN_FRACTION of the lease left before its end (as
#: counted here) when no renewal has answered, STOP_MARGIN_CAP seconds at most.
STOP_MARGIN_FRACTION = 10.0
STOP_MARGIN_CAP = 1.0
#: SQLSTATE classes of a claim the server refuses and would refuse again (bad input, a constraint,
#: names and privileges, unsupported, program limits, no schema): raised, not retried.
REFUSED_CLASSES = ("0A", "22", "23", "3F", "42", "54")
#: SQLSTATE classes of an outcome the server refuses for its document (a data exception, too
#: large): it would be refused again, so its job fails with the reason instead.
POISON_CLASSES = ("22", "54")
#: What a JSON encoder raises for a value it cannot encode.
UNENCODABLE = (TypeError, ValueError, RecursionError)


class _NoAnswer(Exception):
    """A call got no answer in time: its connection was dropped."""


#: Database trouble: a refusal, the driver's own errors, a call that got no answer.
_TROUBLE = (LeaseqError, psycopg.Error, _NoAnswer)


def _sqlstate(error: BaseException) -> str:
    return getattr(error, "sqlstate", None) or ""


class Dead(Exception):
    """Raised by a handler: the job goes dead at once, no retry (bad input never gets better)."""

    #: What the Worker goes by, not the class: a `Dead` from another copy of this module (two
    #: installs, a reload) is still one.
    leaseq_outcome = "dead"

    def __init__(self, error: Any = None):
        super().__init__(error)
        self.error = error


class Snooze(Exception):
    """Raised by a handler: not ready yet — the job comes back after `seconds` (a number of
    seconds or a timedelta), its attempt budget kept (`queue_snooze`)."""

    leaseq_outcome = "snooze"

    def __init__(self, seconds: float | timedelta):
        super().__init__(seconds)
        self.seconds = seconds


class Retry(Exception):
    """Raised by a handler: the attempt failed, and the job comes back after `after` (seconds or
    a timedelta) instead of the queue's backoff — its attempt spent, as any failure's
    (`queue_fail(retry_in => …)`: dead once the budget is). `error`: what the attempt records
    (default: this exception's type, message and traceback)."""

    leaseq_outcome = "retry"

    def __init__(self, after: float | timedelta, error: Any = None):
        super().__init__(after)
        self.after = after
        self.error = error


def seconds_of(value: float | timedelta) -> float:
    """A duration given as seconds or a timedelta, in seconds: every duration the Worker takes."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@dataclass
class Summary:
    """What a run did."""

    completed: int = 0
    failed: int = 0
    dead: int = 0
    snoozed: int = 0
    #: Jobs whose lease was lost before they finished, or whose outcome got no answer before
    #: the lease's end (never completed nor failed by us, or not that we know).
    lost: int = 0
    #: Outcomes the server fenced: the lease ran out between the handler's end and its finish.
    fenced: int = 0
    #: Prefetched jobs never started, handed back at shutdown.
    handed_back: int = 0
    #: Jobs whose handler was still running when the grace ran out: left to their leases.
    abandoned: int = 0
    #: Jobs whose handler ran past the Worker's `timeout`: failed with a timeout error (also
    #: counted `failed` or `dead`), a sync handler's thread abandoned.
    timed_out: int = 0


@dataclass
class _Decision:
    job: Job
    kind: str  # complete | fail | dead | snooze
    document: Any = None
    delay: timedelta | None = None
    #: When the job's lease ends (`time.monotonic()`), as last granted: no call waits past it.
    ends: float = 0.0
    #: Counted in the Summary (its call answered).
    recorded: bool = False
    #: The server's answer: the completion's boolean, else the job's status (None: fenced).
    answer: Any = None
    #: Its own outcome could not be sent: it fails with the reason instead (`poison`).
    poisoned: bool = False
    #: The handler's exception, for the log.
    error: BaseException | None = None
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def became(self) -> str:
        """What became of the outcome, for the attempt's span: its kind, or `dead` when a
        failure spent the last attempt, `fenced` when the server refused it, `lost` unsent."""
        if not self.recorded:
            return "lost"
        if self.answer is None or self.answer is False:
            return "fenced"
        return "dead" if self.answer is JobStatus.DEAD else self.kind

    def encode(self) -> _Decision:
        """Encodes the document now, in the handler's task: one that JSON cannot encode poisons
        this decision, not the finisher's round."""
        if self.document is not None and not isinstance(self.document, Json):
            try:
                self.document = Json(document(self.document))
            except UNENCODABLE as error:
                self.poison(error)
        return self

    def poison(self, why: BaseException) -> None:
        """The outcome cannot be sent, and never will: the job fails with the reason as its error
        — dead, unless it was a failure already (then retried by the queue's policy)."""
        log.warning("leaseq worker: job %s: its %s outcome cannot be sent (%s): it fails with the "
                    "reason", self.job.id, self.kind, why, extra=job_fields(self.job))
        self.document = Json(document(refusal(self.kind, why)))
        self.kind = "fail" if self.kind in ("fail", "retry") else "dead"
        self.delay = None
        self.poisoned = True


def refusal(kind: str, why: BaseException) -> dict[str, Any]:
    """The error a job records when its outcome (`kind`) cannot be sent: why, and the server's
    SQLSTATE when it refused it."""
    reason: dict[str, Any] = {"error": "outcome_refused", "outcome": kind}
    if isinstance(why, LeaseqError):
        reason.update(message=why.message, sqlstate=why.sqlstate)
    elif isinstance(why, psycopg.Error):
        reason.update(message=why.diag.message_primary or str(why), sqlstate=why.sqlstate)
    else:
        reason.update(message=f"{type(why).__name__}: {why}")
    return reason


def _verdict(error: Exception) -> tuple[str, Any, timedelta | None]:
    """What a handler's exception does to its job — the outcome, its document and delay: `Dead`
    and `Snooze` (known by their `leaseq_outcome`), or a failure retried by the queue's policy.
    A snooze for no duration at all is dead, with the reason."""
    match getattr(error, "leaseq_outcome", None):
        case "dead":
            return ("dead", getattr(error, "error", None), None)
        case "snooze":
            try:
                return ("snooze", None, timedelta(seconds=seconds_of(getattr(error, "seconds"))))
            except (TypeError, ValueError, OverflowError) as bad:
                return ("dead", refusal("snooze", bad), None)
        case "retry":
            recorded = getattr(error, "error", None)
            try:
                after = timedelta(seconds=seconds_of(getattr(error, "after")))
            except (TypeError, ValueError, OverflowError) as bad:
                return ("dead", refusal("retry", bad), None)
            return ("retry", error_document(error) if recorded is None else recorded, after)
    return ("fail", error_document(error), None)


Handler = Callable[..., Any]

#: Logger `leaseq.worker` (under `leaseq`): each job's start and success at DEBUG; a failure at
#: WARNING when it will be retried, ERROR when the job is dead, with the handler's traceback; a
#: lost lease, a fenced or refused outcome, an abandoned handler and database trouble at WARNING;
#: the run's start and end at INFO. A job's records carry `job_id`, `queue`, `attempt` and `key`
#: in `extra` (never its payload, which may hold secrets).
log = logging.getLogger("leaseq.worker")


def job_fields(job: Job) -> dict[str, Any]:
    """What a job's log records carry in `extra`."""
    return {"job_id": job.id, "queue": job.queue, "attempt": job.attempt, "key": job.key}


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
    back later with its budget kept, `Retry(after)` → failed and back after `after`, any other
    exception → failed and retried by the queue's backoff (its error document: type, message,
    traceback). Durations — `lease`, `poll`, `grace`, `timeout`, and those of `Snooze` and
    `Retry` — are seconds or timedeltas. `timeout`: a handler still running after it is told
    (`job.lost` set, an async one cancelled, a transactional one's connection cut) and its job
    fails with `{"error": "timeout"}`, retried by the queue's policy; a sync handler's thread is
    abandoned (`Summary.timed_out`).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        queue: str,
        handler: Handler,
        concurrency: int = 10,
        lease: float | timedelta | None = None,
        batch: int | None = None,
        prefetch: int = 0,
        transactional: bool = False,
        poll: float | timedelta = 1.0,
        grace: float | timedelta = 30.0,
        worker_id: str | None = None,
        prepared_statements: bool = True,
        timeout: float | timedelta | None = None,
    ):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 0 <= prefetch <= 10000:
            raise ValueError("prefetch must be between 0 and 10000")
        if timeout is not None and not seconds_of(timeout) > 0:
            raise ValueError("timeout must be more than 0 seconds")
        self.conninfo = conninfo
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.lease = None if lease is None else timedelta(seconds=seconds_of(lease))
        self.prefetch = prefetch
        self.batch = max(1, min(batch or concurrency + prefetch, 10000))
        self.transactional = transactional
        self.poll = seconds_of(poll)
        self.grace = seconds_of(grace)
        self.timeout = None if timeout is None else seconds_of(timeout)
        self.worker_id = worker_id or f"{socket.gethostname()}/pid-{os.getpid()}/py"
        #: False: none on its connections (a pooler in transaction mode; the README's "Poolers").
        self.prepared_statements = prepared_statements
        self.summary = Summary()
        self._is_async = _is_async(handler)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Asked by `stop()`, even before the run has started; cleared when the run ends.
        self._stop_asked = threading.Event()
        self._signals = 0
        # All made anew by each run.
        self._leases = _Leases()
        self._dropped: set[asyncio.Task[None]] = set()
        self._threads = _Threads(concurrency)
        self._abandoned: set[int] = set()
        #: The tracer when the last claim found an OpenTelemetry SDK set: its jobs get spans.
        self._tracer: Any = None
        #: Handlers running now (`leaseq.metrics`).
        self.handlers_running = 0
        _metrics.track(self)

    # --- running -------------------------------------------------------------------------

    def run(self) -> Summary:
        """Works until `stop()` — or, run from the main thread, SIGTERM or SIGINT (a second one
        exits at once): stops claiming, lets running handlers finish for up to `grace` seconds,
        abandons the rest to their leases, returns. From any thread."""
        main = threading.current_thread() is threading.main_thread()
        return _run_to_end(self.run_async(signals=main))

    def run_until_idle(self) -> Summary:
        """Works until no job is due and none is held: for tests and batch jobs."""
        return _run_to_end(self.run_async(until_idle=True))

    def stop(self) -> None:
        """Asks the worker to drain and return, from any thread — before its run has started
        too: then the run returns at once."""
        self._stop_asked.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop has closed: the run is over
                loop.call_soon_threadsafe(stop.set)

    async def run_async(self, *, until_idle: bool = False, signals: bool = False) -> Summary:
        """`run` (`signals`: stop on SIGTERM and SIGINT, main thread only) or `run_until_idle`
        on the running loop — a FastAPI lifespan's, say."""
        try:
            return await self._run(until_idle, signals)
        finally:
            self._stop_asked.clear()

    async def _run(self, until_idle: bool, signals: bool) -> Summary:
        loop = self._loop = asyncio.get_running_loop()
        stop = self._stop = asyncio.Event()
        if self._stop_asked.is_set():
            return self.summary
        leases = self._leases = _Leases()
        self._dropped = set()
        self._signals = 0
        self._threads = threads = _Threads(self.concurrency)
        self._abandoned = set()
        # Room for the jobs claimed and not done (running or prefetched), slots for the running.
        room = asyncio.Semaphore(self.concurrency + self.prefetch)
        slots = asyncio.Semaphore(self.concurrency)
        held: dict[int, Job] = {}
        waiting: dict[int, Job] = {}
        decisions: asyncio.Queue[_Decision] = asyncio.Queue()
        wake = asyncio.Event()
        running: dict[asyncio.Task[None], Job] = {}
        # Everything opened is closed on the way out, whatever failed on the way in.
        async with contextlib.AsyncExitStack() as opened:
            # Last of all: the connections dropped on the way, once their calls have ended.
            opened.push_async_callback(self._close_all_dropped)
            opened.callback(threads.close)
            if signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, self._signalled, sig)
                    opened.callback(loop.remove_signal_handler, sig)
            pool: Any = None
            if self.transactional and self._is_async:
                pool = psycopg_pool.AsyncConnectionPool(
                    self.conninfo, min_size=0, max_size=self.concurrency, open=False,
                    kwargs=connect_options(self.conninfo, self.prepared_statements),
                )
                await pool.open()
                opened.push_async_callback(pool.close)
            elif self.transactional:
                pool = psycopg_pool.ConnectionPool(
                    self.conninfo, min_size=0, max_size=self.concurrency, open=False,
                    kwargs=connect_options(self.conninfo, self.prepared_statements),
                )
                await asyncio.to_thread(pool.open)
                opened.push_async_callback(asyncio.to_thread, pool.close)
            links = []
            for _ in range(3):  # claims, heartbeat, finishes
                link = _Link(self, await _aio.connect(self.conninfo, self.prepared_statements))
                opened.push_async_callback(link.close)
                links.append(link)
            claimer, heart, finisher = links
            listener = await _aio.connect(self.conninfo, self.prepared_statements)
            opened.push_async_callback(listener.close)
            await listener.execute(self._listen_statement())
            background = [
                asyncio.create_task(self._listen(listener, wake), name="LISTEN"),
                asyncio.create_task(self._heartbeat(heart, leases), name="heartbeat"),
                asyncio.create_task(self._finish(finisher, decisions), name="finisher"),
            ]
            for task in background:
                task.add_done_callback(_said_if_crashed)
            log.info("leaseq worker %s: working queue %s (concurrency %d)", self.worker_id,
                     self.queue, self.concurrency, extra={"queue": self.queue})
            try:
                await self._claim_loop(
                    claimer, (room, slots), (held, waiting), running, decisions, wake, pool,
                    until_idle,
                )
                if waiting:
                    await self._hand_back(claimer, held, waiting)
                if running:
                    _, late = await asyncio.wait(set(running), timeout=self.grace)
                    if late:
                        await self._abandon({task: running[task] for task in late})
                await decisions.join()
            finally:
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
        log.info("leaseq worker %s: stopped: %s", self.worker_id, self.summary,
                 extra={"queue": self.queue})
        return self.summary

    def _signalled(self, sig: int) -> None:
        """The first SIGTERM or SIGINT drains; a second (either) exits at once, by that signal,
        leaving every job held to its lease."""
        self._signals += 1
        if self._signals == 1:
            log.info("leaseq worker: %s: stopping (a second signal exits at once)",
                     signal.Signals(sig).name)
            if self._stop is not None:
                self._stop.set()
            return
        log.warning("leaseq worker: %s again: exiting at once, %d job(s) left to their leases",
                    signal.Signals(sig).name, len(self._leases.held))
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)

    async def _abandon(self, late: dict[asyncio.Task[None], Job]) -> None:
        """The grace is over: the handlers still running are abandoned — their jobs given up,
        left to their leases, and counted — and their tasks cancelled but waited for a moment
        only: a sync handler's thread cannot be stopped, and an async one may ignore its
        cancellation."""
        for task, job in late.items():
            self._abandoned.add(job.id)
            self._leases.give_up(job)
            task.cancel()
        self.summary.abandoned += len(late)
        log.warning("leaseq worker: %d handler(s) still running after the grace of %.1f s: "
                    "abandoned, their jobs left to their leases (ids %s)",
                    len(late), self.grace, sorted(job.id for job in late.values()))
        await asyncio.wait(late, timeout=0.5)

    # --- claiming ------------------------------------------------------------------------

    async def _claim_loop(
        self,
        link: _Link,
        semaphores: tuple[asyncio.Semaphore, asyncio.Semaphore],
        jobs_by_id: tuple[dict[int, Job], dict[int, Job]],
        running: dict[asyncio.Task[None], Job],
        decisions: asyncio.Queue[_Decision],
        wake: asyncio.Event,
        pool: Any,
        until_idle: bool,
    ) -> None:
        """Claims until stopped."""
        assert self._stop is not None
        room, held = semaphores[0], jobs_by_id[0]
        backoff = 0.1
        # A claim waits for its answer a lease at most: the Worker's, or the queue's as the last
        # claimed jobs told it.
        claim_wait = self.lease.total_seconds() if self.lease is not None else FIRST_CLAIM_WAIT
        traced = True
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
            # The leases are counted from here: the server counts from when it runs the claim.
            sent = time.monotonic()
            try:
                # The trace contexts only when spans are made: a column fewer to read per job.
                self._tracer = _otel.tracer()
                claim = _calls.claim(self.queue, self.worker_id, free, self.lease,
                                     traced and self._tracer is not None)
                jobs = await self._within(link, claim, claim_wait)
                backoff = 0.1
            except _TROUBLE as failed:
                for _ in range(free):
                    room.release()
                if traced and isinstance(failed, psycopg.errors.UndefinedColumn):
                    traced = False  # a database not yet updated to 0.3.0: no trace contexts
                    continue
                if _sqlstate(failed)[:2] in REFUSED_CLASSES:
                    raise  # the server refuses this claim and would again
                log.warning("leaseq worker: claim failed, retrying in %.1f s: %s", backoff, failed)
                await asyncio.sleep(backoff)  # the next claim connects again if need be
                backoff = min(backoff * 2, 5.0)
                continue
            if jobs and self.lease is None:
                claim_wait = jobs[0].lease_seconds
            for _ in range(free - len(jobs)):
                room.release()
            for job in jobs:
                held[job.id] = job
                self._leases.hold(job, sent)
                task = asyncio.create_task(
                    self._run_job(job, semaphores, jobs_by_id, decisions, pool)
                )
                running[task] = job
                task.add_done_callback(lambda done: running.pop(done, None))
            if jobs:
                continue
            if until_idle and not held and not running and decisions.empty():
                return
            # Idle only once what is held has finished: until then, look again soon.
            timeout = 0.05 if until_idle else self.poll
            waits = [asyncio.create_task(wake.wait()), asyncio.create_task(self._stop.wait())]
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()

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
        link: _Link,
        held: dict[int, Job],
        waiting: dict[int, Job],
    ) -> None:
        """Gives back, in one call, the prefetched jobs not started at shutdown; should that
        fail they are left to their leases. (Their tasks, finding themselves gone from
        `waiting`, end when a slot reaches them.)"""
        jobs, ends = [], []
        for job in waiting.values():
            end = self._leases.release(job)
            if end is not None:  # a lost one is counted by its task
                jobs.append(job)
                ends.append(end)
        waiting.clear()
        if not jobs:
            return
        try:
            answers = await self._within(
                link,
                _calls.hand_back([(j.id, j.lease_token) for j in jobs]),
                max(min(ends) - time.monotonic(), MIN_FINISH_WAIT),
            )
            self.summary.handed_back += sum(answers)
            self.summary.lost += len(answers) - sum(answers)
        except _TROUBLE as failed:
            log.warning("leaseq worker: %d prefetched job(s) left to their leases: %s", len(jobs), failed)
        finally:
            for job in jobs:
                held.pop(job.id, None)

    # --- calls and connections -----------------------------------------------------------

    async def _within(self, link: _Link, call: Call[T], seconds: float) -> T:
        """Runs `call` on `link` (connecting again if need be), waiting `seconds` at most for its
        answer: past them the connection is dropped and `_NoAnswer` raised."""
        task = asyncio.create_task(self._run_on(link, call))
        try:
            await asyncio.wait({task}, timeout=max(seconds, 0.0))
        except asyncio.CancelledError:
            link.drop(task)
            raise
        if not task.done():
            link.drop(task)
            raise _NoAnswer(f"no answer within {seconds:.1f} s: connection dropped")
        return task.result()

    @staticmethod
    async def _run_on(link: _Link, call: Call[T]) -> T:
        return await _aio.run(await link.get(), call)

    def _drop(self, conn: psycopg.AsyncConnection[Any] | None, call: asyncio.Task[Any]) -> None:
        """Ends `call`, given up, and closes `conn`, its connection, in the background."""
        closing = asyncio.create_task(self._close_dropped(conn, call))
        self._dropped.add(closing)
        closing.add_done_callback(self._dropped.discard)

    @staticmethod
    async def _close_dropped(
        conn: psycopg.AsyncConnection[Any] | None, call: asyncio.Task[Any]
    ) -> None:
        # Its socket shut down, the call fails at once. One still connecting has no socket to
        # shut: it is cancelled, which psycopg's connect takes at once.
        if conn is not None and _cut(conn):
            await asyncio.wait({call}, timeout=1.0)
        if not call.done():
            call.cancel()
        await asyncio.wait({call})
        if not call.cancelled() and call.exception() is not None:
            log.debug("leaseq worker: a call given up ended: %s", call.exception())
        if conn is not None:
            await conn.close()

    async def _close_all_dropped(self) -> None:
        while self._dropped:
            await asyncio.gather(*list(self._dropped))

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
                    self.handlers_running -= 1

        try:
            # A slot at once, or (prefetched) in claim order: asyncio's semaphore is fair.
            waiting[job.id] = job
            await slots.acquire()
            started = True
            self.handlers_running += 1
            if waiting.pop(job.id, None) is None or job.lost.is_set():
                if job.lost.is_set():
                    self.summary.lost += 1
                return  # handed back at shutdown, or its lease is gone: not ours to start
            if log.isEnabledFor(logging.DEBUG):
                log.debug("leaseq worker: job %s started (attempt %s)", job.id, job.attempt,
                          extra=job_fields(job))
            tracer = self._tracer
            with _otel.NO_SPAN if tracer is None else _otel.consumer_span(tracer, job) as span:
                if self.transactional:
                    await self._run_in_transaction(job, pool, decisions, span)
                else:
                    await self._attempt(job, decisions, release, span)
        except asyncio.CancelledError:
            # Shut down past the grace: the job is left to its lease, never finished by us.
            self._leases.give_up(job)
            raise
        finally:
            waiting.pop(job.id, None)
            release()
            self._leases.release(job)
            held.pop(job.id, None)

    async def _attempt(
        self,
        job: Job,
        decisions: asyncio.Queue[_Decision],
        release: Callable[[], None],
        span: Any,
    ) -> None:
        """The handler, then its outcome sent with others by the finisher; `span`: the
        attempt's (None: not traced)."""
        timed_out: _TimedOut | None = None
        try:
            decision = _Decision(job, "complete", await self._timed(job, self._call(job)))
        except _TimedOut as late:
            decision = _Decision(job, "fail", late.document, error=late)
            timed_out = late
        except Exception as error:
            decision = _Decision(job, *_verdict(error), error=error)
        decision.encode()
        # A slot frees as soon as the handler is done: the next claim overlaps the finish.
        release()
        # No renewal after this, and no giving up: the lease is ours until `ends`.
        ends = timed_out.ends if timed_out is not None else self._leases.release(job)
        if ends is None:
            _otel.outcome(span, "lost")
            if job.id not in self._abandoned:
                self.summary.lost += 1
                log.warning("leaseq worker: job %s: its lease was lost while it ran: its "
                            "outcome is not sent", job.id, extra=job_fields(job))
            return
        decision.ends = ends
        await decisions.put(decision)
        await decision.done
        if span is not None:
            _otel.outcome(span, "timed_out" if timed_out else decision.became(), decision.error)

    def _timed(self, job: Job, work: Awaitable[T]) -> Awaitable[T]:
        """`work`, the handler's, to await until the Worker's `timeout` (`work` itself when there
        is none: no coroutine more per job): past it the job is timed out
        (`_Leases.time_out`), an async handler cancelled, a sync one's thread abandoned, and
        `_TimedOut` raised with when the job's lease ends."""
        return work if self.timeout is None else self._within_timeout(job, work, self.timeout)

    async def _within_timeout(self, job: Job, work: Awaitable[T], timeout: float) -> T:
        task = asyncio.ensure_future(work)
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if done:
            return task.result()
        ends = self._leases.time_out(job)
        task.cancel()
        if not self._is_async:
            self._threads.abandon()
        self.summary.timed_out += 1
        log.warning("leaseq worker: job %s: its handler ran past the timeout of %.1f s: it fails "
                    "with a timeout error", job.id, timeout, extra=job_fields(job))
        raise _TimedOut(timeout, ends)

    def _call(self, job: Job) -> Awaitable[Any]:
        """The handler's work on `job`: an async one's own awaitable, or a sync one's run on a
        handler thread."""
        if self._is_async:
            return cast(Awaitable[Any], self.handler(job))
        return self._call_sync(job)

    async def _call_sync(self, job: Job) -> Any:
        result = await self._threads.run(self.handler, job)
        if inspect.isawaitable(result):  # an async callable that did not look like one
            result = await result
        return result

    async def _run_in_transaction(
        self, job: Job, pool: Any, decisions: asyncio.Queue[_Decision], span: Any
    ) -> None:
        """The handler and the completion in one transaction, committed only if the completion
        is accepted; a failure rolls the handler's writes back and fails the job apart."""
        try:
            if self._is_async:
                outcome = await self._timed(job, self._transaction_async(job, pool))
            else:
                loop = asyncio.get_running_loop()
                outcome = await self._timed(
                    job, self._threads.run(self._transaction_sync, job, pool, loop)
                )
        except _TimedOut as late:
            outcome = ("fail", late.document, None, late.ends, late)
        kind, document, delay, ends, error = outcome
        if kind in ("completed", "fenced", "lost"):
            _otel.outcome(span, "complete" if kind == "completed" else kind)
        if kind == "completed":
            self.summary.completed += 1
            if log.isEnabledFor(logging.DEBUG):
                log.debug("leaseq worker: job %s succeeded", job.id, extra=job_fields(job))
            return
        if kind == "fenced":
            self.summary.fenced += 1
            _said_fenced(job)
            return
        timed_out = isinstance(error, _TimedOut)
        if ends is None and not timed_out:
            ends = self._leases.release(job)
        # Given up (its lease, or its commit unanswered by the lease's end): nothing is sent. (A
        # timed-out job's `lost` is set to tell its handler; its lease is ours until `ends`.)
        if kind == "lost" or ends is None or (job.lost.is_set() and not timed_out):
            self.summary.lost += 1
            return
        decision = _Decision(job, kind, document, delay, ends, error=error).encode()
        await decisions.put(decision)
        await decision.done
        if span is not None:
            _otel.outcome(span, "timed_out" if timed_out else decision.became(), decision.error)

    async def _transaction_async(self, job: Job, pool: Any) -> _TxOutcome:
        async with pool.connection() as conn:
            tx = self._leases.attach(job, conn, asyncio.get_running_loop())
            if tx is None:
                return ("lost", None, None, None, None)
            ends = None
            try:
                async with conn.transaction():
                    result = await cast(Awaitable[Any], self.handler(job, conn))
                    ends = self._finishing(job, tx)
                    with _poisoned_if_refused():
                        done = await _aio.run(conn, _calls.complete(job.id, job.lease_token, result))
                    if not done:
                        raise _Fenced()
                return ("completed", None, None, ends, None)
            except BaseException as error:
                return (*_outcome_of(error), ends, error)
            finally:
                tx.close()

    def _transaction_sync(
        self, job: Job, pool: Any, loop: asyncio.AbstractEventLoop
    ) -> _TxOutcome:
        with pool.connection() as conn:
            tx = self._leases.attach(job, conn, loop)
            if tx is None:
                return ("lost", None, None, None, None)
            ends = None
            try:
                with conn.transaction():
                    result = self.handler(job, conn)
                    if inspect.isawaitable(result):
                        if inspect.iscoroutine(result):
                            result.close()
                        raise TypeError("the transactional handler returned an awaitable: make it "
                                        "an `async def` to get an async connection")
                    ends = self._finishing(job, tx)
                    with _poisoned_if_refused():
                        done = _sync.run(conn, _calls.complete(job.id, job.lease_token, result))
                    if not done:
                        raise _Fenced()
                return ("completed", None, None, ends, None)
            except BaseException as error:
                return (*_outcome_of(error), ends, error)
            finally:
                tx.close()

    def _finishing(self, job: Job, tx: _Transaction) -> float:
        """The handler is done: its lease is no longer renewed (a renewal would wait for the row
        lock the completion takes) and the completion and commit must answer by its end, 5 s at
        least. Raises `_Lost` when the lease is already gone: the transaction rolls back."""
        ends = self._leases.release(job)
        if ends is None:
            raise _Lost()
        tx.finish_within(max(ends - time.monotonic(), MIN_FINISH_WAIT))
        return ends

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
                    conn = await _aio.connect(self.conninfo, self.prepared_statements)
                    await conn.execute(self._listen_statement())
                    backoff = 0.1
                    wake.set()
                except (LeaseqError, psycopg.Error) as failed:
                    # `conn` closed, its notifies end at once: the next round tries again.
                    await conn.close()
                    log.warning("leaseq worker: LISTEN failed, retrying in %.1f s: %s", backoff, failed)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
        finally:
            await conn.close()

    def _listen_statement(self) -> sql.Composed:
        return sql.SQL("LISTEN {}").format(sql.Identifier(f"leaseq_{self.queue}"))

    async def _heartbeat(self, link: _Link, leases: _Leases) -> None:
        """Renews the held leases together (see the module docstring); gives a lease up when a
        renewal answers NULL, or when its `stop_at` comes with no renewal answered, whether the
        database refused us or has not answered yet."""
        backoff = 0.1
        while True:
            # Cleared before the next wake is read: a lease held after that sets it again.
            leases.earlier.clear()
            wake_at = leases.next_wake()
            if wake_at is None:
                await leases.earlier.wait()
                continue
            if wake_at > time.monotonic():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(leases.earlier.wait(), wake_at - time.monotonic())
                continue
            now = time.monotonic()
            leases.give_up_unrenewed(now)
            group = leases.renewable(now)
            if not group:
                continue
            sent = time.monotonic()
            renewal = asyncio.create_task(self._run_on(link, _calls.renew_batch_left(
                [(lease.job.id, lease.job.lease_token) for lease in group], self.lease
            )))
            # No answer is waited for past the first lease to be given up: that lease's
            # handler must hear it then, not when a connection that stopped answering times out.
            try:
                while not renewal.done():
                    first_stop = leases.first_stop()
                    if first_stop is None:
                        break  # nothing held any more: nobody needs the answer
                    await asyncio.wait({renewal}, timeout=max(first_stop - time.monotonic(), 0.0))
                    if not renewal.done() and leases.give_up_unrenewed(time.monotonic()):
                        break
            except asyncio.CancelledError:
                link.drop(renewal)
                raise
            answers: list[float | None] | None = None
            error: BaseException | None = None
            if not renewal.done():
                link.drop(renewal)
                error = _NoAnswer("no answer before a lease had to be given up: connection dropped")
            elif isinstance(renewal.exception(), (LeaseqError, psycopg.Error)):
                error = renewal.exception()
            else:
                answers = renewal.result()  # raises what is not database trouble: a bug
                if len(answers) != len(group):
                    error = LeaseqError(f"{len(answers)} answers for {len(group)} leases")
                    answers = None
            if answers is not None:
                backoff = 0.1
                for lease, left in zip(group, answers):
                    leases.renewed(lease, sent, left)
            elif leases.still_held(group):
                log.warning(
                    "leaseq worker: renewing %d lease(s) failed, retrying in %.1f s: %s",
                    len(group), backoff, error,
                )
                leases.retry(group, time.monotonic() + backoff)
                backoff = min(backoff * 2, 5.0)

    async def _finish(self, link: _Link, decisions: asyncio.Queue[_Decision]) -> None:
        while True:
            round_ = [await decisions.get()]
            while not decisions.empty():
                round_.append(decisions.get_nowait())
            try:
                try:
                    await self._finish_round(link, round_)
                except (LeaseqError, psycopg.Error):
                    if not link.lost():
                        raise
                    # Its session was cut while idle (a failover, a terminated backend): send
                    # again on a new one. The fence makes that safe: an outcome whose commit
                    # went unanswered is refused as stale, changing nothing (counted fenced).
                    await self._finish_round(link, [d for d in round_ if not d.recorded])
            except _TROUBLE as failed:
                # Unsent or unanswered: the jobs' leases run out and they are retried by the
                # queue's policy (an outcome that arrives later is fenced).
                unsent = [d for d in round_ if not d.recorded]
                log.warning("leaseq worker: %d outcome(s) not sent: %s", len(unsent), failed)
                self.summary.lost += len(unsent)
            finally:
                for decision in round_:
                    if not decision.done.done():
                        decision.done.set_result(None)
                    decisions.task_done()

    async def _finish_round(self, link: _Link, round_: list[_Decision]) -> None:
        """One call per kind of outcome (`Snooze` alone: each has its own delay), for the
        decisions not yet recorded."""
        for kind in ("complete", "fail", "dead", "snooze", "retry"):
            group = [d for d in round_ if d.kind == kind and not d.recorded]
            for part in [[d] for d in group] if kind in ("snooze", "retry") else [group]:
                if part:
                    await self._send(link, kind, part)

    async def _send(self, link: _Link, kind: str, group: list[_Decision]) -> None:
        """Sends `group`'s outcomes of `kind` in one call, and counts the answers. One the server
        refuses for its document is sent again alone, and refused alone its job fails with the
        reason (`_Decision.poison`): one poison outcome never sinks the rest."""
        # No call outlives its leases by much: past them the server refuses anyway, and a
        # connection that stopped answering must not hold the jobs for ever.
        wait = max(min(d.ends for d in group) - time.monotonic(), MIN_FINISH_WAIT)
        try:
            answers = await self._within(link, _outcomes_call(kind, group), wait)
        except (LeaseqError, psycopg.Error) as refused:
            if _sqlstate(refused)[:2] not in POISON_CLASSES or group[0].poisoned:
                raise
            if len(group) > 1:
                for decision in group:
                    await self._send(link, kind, [decision])
                return
            group[0].poison(refused)
            await self._send(link, group[0].kind, group)
            return
        for decision, answer in zip(group, answers):
            if kind == "complete":
                self.summary.completed += answer is True
                self.summary.fenced += answer is not True
            else:
                self._count(kind, answer)
            decision.recorded, decision.answer = True, answer
            _said(decision, answer)


def _said(decision: _Decision, answer: Any) -> None:
    """Logs what became of a job whose outcome the server answered (`answer`: the completion's
    boolean, else the job's status; None or False: fenced)."""
    job = decision.job
    if answer is None or answer is False:
        _said_fenced(job)
    elif decision.kind == "complete":
        if log.isEnabledFor(logging.DEBUG):
            log.debug("leaseq worker: job %s succeeded", job.id, extra=job_fields(job))
    elif decision.kind == "snooze":
        if log.isEnabledFor(logging.DEBUG):
            log.debug("leaseq worker: job %s snoozed for %s", job.id, decision.delay,
                      extra=job_fields(job))
    else:
        dead = answer is JobStatus.DEAD
        error = decision.error
        log.log(
            logging.ERROR if dead else logging.WARNING,
            "leaseq worker: job %s failed (attempt %s)%s: %s",
            job.id, job.attempt, ", dead" if dead else ", to be retried",
            "" if error is None else f"{type(error).__name__}: {error}",
            exc_info=None if error is None else (type(error), error, error.__traceback__),
            extra=job_fields(job),
        )


def _said_fenced(job: Job) -> None:
    log.warning("leaseq worker: job %s: its outcome was fenced: the lease ran out before it was "
                "sent", job.id, extra=job_fields(job))


def _outcomes_call(kind: str, group: list[_Decision]) -> Call[list[Any]]:
    """The call that sends `group`'s outcomes of `kind`; its answer, one per decision."""
    if kind == "complete":
        return _calls.complete_batch([(d.job.id, d.job.lease_token, d.document) for d in group])
    if kind in ("snooze", "retry"):
        (d,) = group
        assert d.delay is not None
        one = (
            _calls.snooze(d.job.id, d.job.lease_token, d.delay)
            if kind == "snooze"
            else _calls.fail(d.job.id, d.job.lease_token, d.document, True, d.delay)
        )
        return Call(one.sql, one.params, lambda rows: [one.decode(rows)])
    return _calls.fail_batch([(d.job.id, d.job.lease_token, d.document) for d in group], kind == "fail")


def _is_async(handler: Handler) -> bool:
    """Whether `handler` is awaited on the loop rather than run on a thread: an `async def`, also
    behind `functools.wraps` or `partial`, or an object whose `__call__` is one. (A callable
    that hides it still works: what a sync call returns is awaited when it is awaitable.)"""
    target = inspect.unwrap(handler)
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(type(target), "__call__", None)
    )


def _run_to_end(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, except that the tasks left at the end (handlers abandoned past the
    grace) are cancelled and waited for a second at most: asyncio.run waits for them without
    bound, and an async handler that ignores its cancellation would hold the process."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.wait(left, timeout=1.0))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


class _Threads:
    """The threads sync handlers run on: `size` at most (the Worker's `concurrency`, whatever the
    CPUs — the loop's default executor has min(32, CPUs + 4), and psycopg resolves host names on
    it, so reconnects would queue behind handlers), started as needed. Daemon threads rather
    than an executor's: a handler still running past the grace is abandoned, and must not keep
    the process alive, where an executor's threads are joined at exit."""

    def __init__(self, size: int):
        self._size = size
        self._work: SimpleQueue[Callable[[], None] | None] = SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._started = 0

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """`fn(*args)` on one of the threads, in a copy of the caller's context (on the loop)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        context = contextvars.copy_context()

        def settle(result: Any, error: BaseException | None) -> None:
            if future.cancelled():
                return  # abandoned
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)

        def work() -> None:
            try:
                answer: tuple[Any, BaseException | None] = (context.run(fn, *args), None)
            except BaseException as error:
                answer = (None, error)
            with contextlib.suppress(RuntimeError):  # the loop closed: the run is over
                loop.call_soon_threadsafe(settle, *answer)

        self._work.put(work)
        # An idle thread takes it; else a new one, while there are fewer than `size`.
        if not self._idle.acquire(blocking=False) and self._started < self._size:
            self._started += 1
            name = f"leaseq-handler-{self._started}"
            threading.Thread(target=self._serve, name=name, daemon=True).start()
        return future

    def abandon(self) -> None:
        """A thread is left to a handler that ran past its timeout: another may start."""
        self._size += 1

    def _serve(self) -> None:
        while (work := self._work.get()) is not None:
            work()
            self._idle.release()

    def close(self) -> None:
        """Ends each thread once it is free (one still running a handler finishes it first)."""
        for _ in range(self._started):
            self._work.put(None)


def _said_if_crashed(task: asyncio.Task[None]) -> None:
    """A background task ends only when cancelled: anything else is a bug, logged as it happens
    (the run gathers them at its end, ignoring what they raised)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("leaseq worker: the %s task stopped", task.get_name(), exc_info=task.exception())


class _Link:
    """One of the worker's connections: made again when needed once closed or dropped."""

    def __init__(self, worker: Worker, conn: psycopg.AsyncConnection[Any] | None):
        self._worker = worker
        self.conn = conn

    async def get(self) -> psycopg.AsyncConnection[Any]:
        if self.conn is None or self.conn.closed:
            self.conn = await _aio.connect(self._worker.conninfo, self._worker.prepared_statements)
        return self.conn

    def lost(self) -> bool:
        return self.conn is None or self.conn.closed

    def drop(self, call: asyncio.Task[Any]) -> None:
        """Gives up `call`, out on this connection, and the connection with it."""
        conn, self.conn = self.conn, None
        self._worker._drop(conn, call)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


def _cut(conn: psycopg.BaseConnection[Any]) -> bool:
    """Shuts `conn`'s socket down both ways, from any thread: a call waiting on it (a read, a
    write) fails at once. False when it has no socket left."""
    try:
        fd = conn.pgconn.socket
    except psycopg.Error:
        return False
    # A duplicate of the descriptor, closed here; the shutdown is the socket's, the connection's
    # own descriptor stays for psycopg to close.
    with socket.socket(fileno=os.dup(fd)) as duplicate:
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        except OSError:
            return False  # not connected any more
    return True


def _stop_margin(lease: float) -> float:
    """How long before a lease's end (as we count it) its handler is told it lost the job when no
    renewal has answered: a tenth of the lease, at most a second — room for a late timer on a
    busy loop and for the handler to stop, well after the renewal due at a third left."""
    return min(lease / STOP_MARGIN_FRACTION, STOP_MARGIN_CAP)


@dataclass(eq=False)
class _Lease:
    job: Job
    #: When the lease ends, as last granted (`time.monotonic()`): never after its end on the
    #: server, which counts the time it gave from when it ran the claim or renewal, we from
    #: when we sent it.
    ends: float = 0.0
    #: Renewed with others from here on (a sixth of its time gone) …
    early: float = 0.0
    #: … and alone at the latest here (a third of its time left).
    due: float = 0.0
    #: Unless a renewal has answered by here, the lease is given up and `job.lost` set — even
    #: while a renewal is still out: a little before `ends`, so that the handler hears it before
    #: the server may reclaim the job.
    stop_at: float = 0.0
    #: A transactional job's open transaction: cut when the lease is given up.
    tx: _Transaction | None = None

    def granted(self, sent: float, left: float) -> None:
        """The server gave `left` seconds to the claim or renewal sent at `sent`."""
        self.ends = sent + left
        self.early, self.due = sent + left / 6, sent + left * 2 / 3
        self.stop_at = self.ends - _stop_margin(left)


class _Leases:
    """The leases of the jobs held, by job id: what the heartbeat renews or gives up."""

    def __init__(self) -> None:
        # The heartbeat gives leases up on the loop while a transactional handler's thread
        # releases its own: under one lock, a job finds its lease either still held (and
        # finishes it) or given up (and never does).
        self.lock = threading.Lock()
        self.held: dict[int, _Lease] = {}
        #: When the heartbeat next wakes (None: when a lease is held).
        self.wake_at: float | None = None
        #: Wakes the heartbeat when a lease falls due before it would wake.
        self.earlier = asyncio.Event()

    def hold(self, job: Job, sent: float) -> None:
        """Holds `job`'s lease, granted by the claim sent at `sent` (on the loop)."""
        lease = _Lease(job)
        lease.granted(sent, job.lease_seconds)
        with self.lock:
            self.held[job.id] = lease
        if self.wake_at is None or lease.due < self.wake_at:
            self.earlier.set()

    def release(self, job: Job) -> float | None:
        """Stops renewing `job`'s lease and giving it up; when it ends — None when it is lost
        (given up, or found stale by the handler's own calls)."""
        with self.lock:
            lease = self.held.pop(job.id, None)
        if lease is None or job.lost.is_set():
            return None
        return lease.ends

    def time_out(self, job: Job) -> float | None:
        """`job`'s handler ran past its timeout: its lease is no longer renewed, `lost` is set
        (the handler told), and a transaction it has open is cut; when the lease ends — None
        when it was lost already."""
        with self.lock:
            lease = self.held.pop(job.id, None)
            was_lost = job.lost.is_set()
            job.lost.set()
            if lease is not None and lease.tx is not None:
                lease.tx.cut_locked()
        return None if lease is None or was_lost else lease.ends

    def give_up(self, job: Job) -> None:
        """The worker stops on `job` (shutdown past the grace): `lost` set, its transaction cut."""
        with self.lock:
            lease = self.held.pop(job.id, None)
            job.lost.set()
            if lease is not None and lease.tx is not None:
                lease.tx.cut_locked()

    def attach(
        self, job: Job, conn: psycopg.BaseConnection[Any], loop: asyncio.AbstractEventLoop
    ) -> _Transaction | None:
        """Registers `job`'s transaction, cut if its lease is given up; None: already lost."""
        with self.lock:
            lease = self.held.get(job.id)
            if lease is None or job.lost.is_set():
                return None
            lease.tx = _Transaction(job, conn, self.lock, loop)
            return lease.tx

    def _live(self) -> list[_Lease]:
        return [lease for lease in self.held.values() if not lease.job.lost.is_set()]

    def next_wake(self) -> float | None:
        with self.lock:
            self.wake_at = min((min(l.due, l.stop_at) for l in self._live()), default=None)
        return self.wake_at

    def first_stop(self) -> float | None:
        with self.lock:
            return min((l.stop_at for l in self._live()), default=None)

    def renewable(self, now: float) -> list[_Lease]:
        with self.lock:
            return [l for l in self._live() if l.early <= now]

    def still_held(self, group: list[_Lease]) -> bool:
        with self.lock:
            return any(self.held.get(l.job.id) is l for l in group)

    def give_up_unrenewed(self, now: float) -> bool:
        """Gives up the leases whose `stop_at` has come; True if there were any."""
        with self.lock:
            ended = [l for l in self._live() if l.stop_at <= now]
            for lease in ended:
                self._lose(lease)
        for lease in ended:
            log.warning(
                "leaseq worker: job %s lost its lease (attempt %s): no renewal answered before its end",
                lease.job.id, lease.job.attempt, extra=job_fields(lease.job),
            )
        return bool(ended)

    def renewed(self, lease: _Lease, sent: float, left: float | None) -> None:
        """A renewal sent at `sent` answered `left` for `lease` (None: refused)."""
        with self.lock:
            if self.held.get(lease.job.id) is not lease or lease.job.lost.is_set():
                return  # released or given up meanwhile: nothing to tell its job
            if left is not None:
                lease.granted(sent, left)
                return
            self._lose(lease)
        log.warning(
            "leaseq worker: job %s lost its lease (attempt %s): renewal refused (expired, reclaimed or cancelled)",
            lease.job.id, lease.job.attempt, extra=job_fields(lease.job),
        )

    def retry(self, group: list[_Lease], at: float) -> None:
        """A renewal failed: the group's leases are renewed again at `at`, or given up first."""
        with self.lock:
            for lease in group:
                lease.early, lease.due = at, min(at, lease.stop_at)

    def _lose(self, lease: _Lease) -> None:
        # Under the lock.
        del self.held[lease.job.id]
        lease.job.lost.set()
        if lease.tx is not None:
            lease.tx.cut_locked()


class _Transaction:
    """A transactional job's connection while its transaction is open. Cut (its socket shut
    down) when the job's lease is given up, or when the completion and commit outlive the lease:
    a handler's thread waiting on a silent connection is freed, and a commit not yet sent by
    then never goes, so a job told it is lost is never completed by us."""

    def __init__(
        self,
        job: Job,
        conn: psycopg.BaseConnection[Any],
        lock: threading.Lock,
        loop: asyncio.AbstractEventLoop,
    ):
        self.job = job
        self.conn = conn
        self._lock = lock
        self._loop = loop
        self._open = True
        self._timer: asyncio.TimerHandle | None = None

    def cut_locked(self) -> None:
        """Cuts the connection unless it went back to its pool (the caller holds the lock)."""
        if self._open:
            _cut(self.conn)

    def finish_within(self, seconds: float) -> None:
        """From any thread: the completion and commit, from now, answer within `seconds` or the
        job is given up (`lost`) and the connection cut."""
        self._loop.call_soon_threadsafe(self._arm, seconds)

    def _arm(self, seconds: float) -> None:
        with self._lock:
            if self._open:
                self._timer = self._loop.call_later(seconds, self._late)

    def _late(self) -> None:
        with self._lock:
            if not self._open:
                return
            self.job.lost.set()
            self.cut_locked()
        log.warning(
            "leaseq worker: job %s: no answer to its completion before its lease's end: "
            "connection dropped, the outcome left to the lease (attempt %s)",
            self.job.id, self.job.attempt, extra=job_fields(self.job),
        )

    def close(self) -> None:
        """The transaction has ended: no cut from now on (its connection returns to the pool)."""
        with self._lock:
            self._open = False
            timer = self._timer
        if timer is not None:
            try:
                self._loop.call_soon_threadsafe(timer.cancel)
            except RuntimeError:
                pass  # the loop is closed (a thread that outlived the run): no timer left to run


#: A transactional job's end: what to do (completed, fenced, lost, fail, dead, snooze), the
#: error document, the snooze, the lease's end when the completion released it, and the
#: exception it came from.
_TxOutcome = tuple[str, Any, timedelta | None, float | None, BaseException | None]


class _Lost(Exception):
    """The lease was given up before the completion: roll the handler's writes back."""


class _Fenced(Exception):
    """The completion was refused: roll the handler's writes back."""


class _TimedOut(Exception):
    """The handler ran past the Worker's `timeout`; `ends`: when the job's lease ends (None: it
    was lost already)."""

    def __init__(self, timeout: float, ends: float | None):
        super().__init__(f"the handler ran past its timeout of {timeout:g} s")
        self.ends = ends
        self.document = {"error": "timeout", "message": str(self)}


class _Poison(Exception):
    """The completion cannot be sent (its result does not encode, or the server refuses it for
    its document): roll the handler's writes back, and the job goes dead with the reason."""

    def __init__(self, why: BaseException):
        super().__init__(why)
        self.why = why


@contextlib.contextmanager
def _poisoned_if_refused() -> Iterator[None]:
    """Runs a transactional completion: a result JSON cannot encode, or one the server refuses
    for its document, is a `_Poison`."""
    try:
        yield
    except UNENCODABLE as error:
        raise _Poison(error) from error
    except (LeaseqError, psycopg.Error) as refused:
        if _sqlstate(refused)[:2] in POISON_CLASSES:
            raise _Poison(refused) from refused
        raise


def _outcome_of(error: BaseException) -> tuple[str, Any, timedelta | None]:
    """What a transactional handler's exception (its transaction rolled back) does to the job."""
    if isinstance(error, _Fenced):
        return ("fenced", None, None)
    if isinstance(error, _Lost):
        return ("lost", None, None)
    if isinstance(error, _Poison):
        return ("dead", Json(document(refusal("complete", error.why))), None)
    if isinstance(error, Exception):
        return _verdict(error)
    raise error


__all__ = ["Dead", "Retry", "Snooze", "Summary", "Worker", "error_document", "seconds_of"]

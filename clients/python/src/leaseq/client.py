"""Blocking calls: `enqueue` and `enqueue_batch` on the caller's own connection (so the job
commits or rolls back with the caller's rows), and `Client`, every other call of the extension
on a connection of its own, each call its own transaction."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

import psycopg
import psycopg.errors
from psycopg.pq import TransactionStatus

from . import _calls
from ._calls import Call, OnDuplicate
from .errors import LeaseLost, connect_options, connection_failed, translated
from .types import (
    Attempt,
    Awaited,
    FlowNode,
    FlowStatus,
    Job,
    JobDetail,
    JobStatus,
    JobSummary,
    OnParentFailure,
    Parent,
    QueueAccess,
    QueueGrant,
    QueuePrivilege,
    QueueStats,
    Schedule,
    Step,
    document,
)

T = TypeVar("T")


#: Per connection: whether its database keeps trace contexts (`_calls.KEEPS_TRACES`).
_KEEPS_TRACES: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def run(conn: psycopg.Connection[Any], call: Call[T]) -> T:
    """Runs `call` on `conn`, in whatever transaction `conn` is in."""
    if call.untraced is not None:
        if conn not in _KEEPS_TRACES:
            _KEEPS_TRACES[conn] = run(conn, _calls.KEEPS_TRACES)
        if not _KEEPS_TRACES[conn]:
            call = call.untraced
    with translated(), conn.cursor() as cur:
        cur.execute(call.sql, call.params, prepare=True)
        return call.decode(cur.fetchall())


def enqueue(
    conn: psycopg.Connection[Any],
    queue: str,
    payload: Any,
    *,
    run_at: datetime | None = None,
    priority: int | None = None,
    dedupe_key: str | None = None,
    max_attempts: int | None = None,
    dedupe_for: timedelta | None = None,
    on_duplicate: OnDuplicate | None = None,
    group_key: str | None = None,
    depends_on: Sequence[int] | None = None,
    on_parent_failure: OnParentFailure | None = None,
    trace_context: str | None = None,
) -> int:
    """Adds a job to `queue` in `conn`'s transaction and returns its id: a transaction that rolls
    back leaves no job. `payload` is any JSON-serialisable value, or `leaseq.Json(text)`.
    `depends_on`: ids of jobs (any queue) it waits for, `blocked` until every one succeeded
    (not with `dedupe_key` or `group_key`); `on_parent_failure`: what it does if one does not."""
    return run(
        conn,
        _calls.enqueue(
            queue,
            payload,
            run_at=run_at,
            priority=priority,
            dedupe_key=dedupe_key,
            max_attempts=max_attempts,
            dedupe_for=dedupe_for,
            on_duplicate=on_duplicate,
            group_key=group_key,
            depends_on=depends_on,
            on_parent_failure=on_parent_failure,
            trace_context=trace_context,
        ),
    )


def enqueue_batch(
    conn: psycopg.Connection[Any],
    queue: str,
    payloads: Sequence[Any],
    *,
    run_at: datetime | None = None,
    priority: int | None = None,
    group_keys: Sequence[str | None] | None = None,
    depends_on: Sequence[int] | None = None,
    on_parent_failure: OnParentFailure | None = None,
    depends_on_each: Sequence[Sequence[int]] | None = None,
    trace_context: str | None = None,
) -> list[int]:
    """Adds one job per payload in one statement, in `conn`'s transaction; ids in payload order.
    With `depends_on`, every job of the batch waits for the same parents (a fan-out); with
    `depends_on_each`, one list of parents per payload, each job waits for its own (an empty
    list: none, pending at once). Neither with `group_keys`, nor the two together."""
    return run(
        conn,
        _calls.enqueue_batch(
            queue,
            payloads,
            run_at=run_at,
            priority=priority,
            group_keys=group_keys,
            depends_on=depends_on,
            on_parent_failure=on_parent_failure,
            depends_on_each=depends_on_each,
            trace_context=trace_context,
        ),
    )


def step(conn: psycopg.Connection[Any], job: Job, name: str, output: Any = None) -> bool:
    """Records, under `job`'s lease, that its handler did step `name` (1–512 bytes) with
    `output` (any JSON-serialisable value, `Json(text)`, or None), in `conn`'s transaction: call
    it in the transaction that made the step's effect, so the two commit or roll back together
    (READ COMMITTED; until that transaction ends nobody can take the job over, and its lease
    can still be renewed).
    False, changing nothing: the lease token is stale, or the step was recorded already (the
    first record stands)."""
    return run(conn, _calls.step(job.id, job.lease_token, name, output))


def progress(conn: psycopg.Connection[Any], job: Job, progress: Any) -> bool:
    """Reports, under `job`'s lease, how far its handler got (`progress`: any JSON-serialisable
    value or `Json(text)` — a fraction, counts, a message), replacing its last report, in
    `conn`'s transaction (READ COMMITTED). False, changing nothing: the lease token is stale.
    Others see a report once its transaction commits, and until then the job's row stays locked,
    so the worker's heartbeat (one renewal of all its leases) waits for that transaction: in a
    long transaction, report with a `Client` (a short transaction of its own) instead."""
    return run(conn, _calls.progress(job.id, job.lease_token, progress))


def report_progress(target: Client | psycopg.Connection[Any], job: Job, progress: Any) -> None:
    """What a handler calls to say how far it got: `progress` as `Client.progress` (`target` a
    `Client`: a short transaction of its own, seen at once) or `leaseq.progress` (a psycopg
    connection: in its transaction). Raises `LeaseLost` (and sets `job.lost`) when the lease
    token is stale: nothing was stored — stop working on the job."""
    conn = target.conn if isinstance(target, Client) else target
    if not run(conn, _calls.progress(job.id, job.lease_token, progress)):
        job.lost.set()
        raise LeaseLost(f"progress of job {job.id} not stored: its lease is lost")


def run_step(
    target: Client | psycopg.Connection[Any], job: Job, name: str, fn: Callable[[], Any]
) -> Any:
    """Runs `fn()` once across the job's attempts: when an earlier attempt recorded step `name`,
    returns its recorded output (decoded JSON) without calling `fn`; otherwise calls `fn`,
    records what it returned as the step's output and returns it. The job's recorded steps are
    read once per claimed job (`queue_steps`) and kept.

    `target`: a `psycopg.Connection` records the step in its transaction (a transactional
    handler's `conn`: the step commits with `fn`'s writes and the job's completion); a `Client`
    records it in a short transaction of its own, right after `fn` returns. Raises `LeaseLost`
    (and sets `job.lost`) when the lease token is stale: the step was not recorded."""
    conn = target.conn if isinstance(target, Client) else target
    known = _calls.recorded(job)
    if known is None:
        known = _calls.remember(job, run(conn, _calls.steps(job.id)))
    if name in known:
        return _calls.decoded(known[name])
    output = fn()
    if not run(conn, _calls.step(job.id, job.lease_token, name, output)):
        job.lost.set()
        raise LeaseLost(f"step {name!r} of job {job.id} not recorded: its lease is lost")
    known[name] = None if output is None else document(output)
    return output


def connect(conninfo: str, prepared_statements: bool = True) -> psycopg.Connection[Any]:
    """A connection in autocommit (each call its own transaction); a failure says where and why.
    `prepared_statements=False`: none (for a pooler in transaction mode, docs in the README)."""
    try:
        return psycopg.connect(
            conninfo, autocommit=True, **connect_options(conninfo, prepared_statements)
        )
    except psycopg.OperationalError as error:
        raise connection_failed(conninfo, error) from error


class Client:
    """Every call of the extension on a connection of its own (`conninfo`: a libpq URL or
    `key=value` string). Refusals raise the `leaseq` exception of their SQLSTATE.
    `prepared_statements=False`: no prepared statements (a pooler in transaction mode)."""

    def __init__(self, conninfo: str, *, prepared_statements: bool = True):
        self.conn = connect(conninfo, prepared_statements)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def _run(self, call: Call[T]) -> T:
        return run(self.conn, call)

    def queue_create(self, queue: str, **settings: Any) -> None:
        """Creates `queue` or replaces its settings: `lease`, `backoff_base`, `backoff_cap`,
        `retain` (timedeltas), `max_attempts`, `max_snoozes`, `group_concurrency` (ints); those
        left out take the SQL function's defaults."""
        self._run(_calls.queue_create(queue, settings))

    def enqueue(
        self,
        queue: str,
        payload: Any,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        dedupe_key: str | None = None,
        max_attempts: int | None = None,
        dedupe_for: timedelta | None = None,
        on_duplicate: OnDuplicate | None = None,
        group_key: str | None = None,
        depends_on: Sequence[int] | None = None,
        on_parent_failure: OnParentFailure | None = None,
        trace_context: str | None = None,
    ) -> int:
        """`enqueue` in a transaction of its own."""
        return self._run(
            _calls.enqueue(
                queue,
                payload,
                run_at=run_at,
                priority=priority,
                dedupe_key=dedupe_key,
                max_attempts=max_attempts,
                dedupe_for=dedupe_for,
                on_duplicate=on_duplicate,
                group_key=group_key,
                depends_on=depends_on,
                on_parent_failure=on_parent_failure,
                trace_context=trace_context,
            )
        )

    def enqueue_batch(
        self,
        queue: str,
        payloads: Sequence[Any],
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        group_keys: Sequence[str | None] | None = None,
        depends_on: Sequence[int] | None = None,
        on_parent_failure: OnParentFailure | None = None,
        depends_on_each: Sequence[Sequence[int]] | None = None,
        trace_context: str | None = None,
    ) -> list[int]:
        return self._run(
            _calls.enqueue_batch(
                queue,
                payloads,
                run_at=run_at,
                priority=priority,
                group_keys=group_keys,
                depends_on=depends_on,
                on_parent_failure=on_parent_failure,
                depends_on_each=depends_on_each,
                trace_context=trace_context,
            )
        )

    def claim(
        self, queue: str, worker: str, batch: int = 1, lease: timedelta | None = None
    ) -> list[Job]:
        try:
            return self._run(_calls.claim(queue, worker, batch, lease))
        except psycopg.errors.UndefinedColumn:
            # A database not yet updated to 0.3.0: its claim returns no trace context.
            if self.conn.info.transaction_status != TransactionStatus.IDLE:
                raise
            return self._run(_calls.claim(queue, worker, batch, lease, traced=False))

    def renew(self, job: Job, lease: timedelta | None = None) -> datetime | None:
        """The new expiry, or None: the lease is lost — stop working on the job."""
        return self._run(_calls.renew(job.id, job.lease_token, lease))

    def renew_batch(
        self, jobs: Sequence[Job], lease: timedelta | None = None
    ) -> list[datetime | None]:
        return self._run(_calls.renew_batch([(j.id, j.lease_token) for j in jobs], lease))

    def complete(self, job: Job, result: Any = None) -> bool:
        return self._run(_calls.complete(job.id, job.lease_token, result))

    def complete_batch(self, jobs: Sequence[tuple[Job, Any]]) -> list[bool]:
        return self._run(_calls.complete_batch([(j.id, j.lease_token, r) for j, r in jobs]))

    def step(self, job: Job, name: str, output: Any = None) -> bool:
        """`step` in a transaction of its own: records that `job`'s handler did step `name`
        with `output`; False, changing nothing, when the lease token is stale or the step was
        recorded already (the first record stands)."""
        return self._run(_calls.step(job.id, job.lease_token, name, output))

    def steps(self, job_id: int) -> list[Step]:
        """The steps recorded for `job_id` by any of its attempts, in order (`output` as JSON
        text)."""
        return self._run(_calls.steps(job_id))

    def progress(self, job: Job, progress: Any) -> bool:
        """`progress` in a transaction of its own: reports how far `job`'s handler got (any
        JSON-serialisable value or `Json(text)`), replacing its last report, shown by `job()`;
        False, changing nothing, when the lease token is stale."""
        return self._run(_calls.progress(job.id, job.lease_token, progress))

    def fail(
        self,
        job: Job,
        error: Any = None,
        *,
        retry: bool = True,
        retry_in: timedelta | None = None,
    ) -> JobStatus | None:
        return self._run(_calls.fail(job.id, job.lease_token, error, retry, retry_in))

    def fail_batch(
        self, jobs: Sequence[tuple[Job, Any]], *, retry: bool = True
    ) -> list[JobStatus | None]:
        return self._run(_calls.fail_batch([(j.id, j.lease_token, e) for j, e in jobs], retry))

    def snooze(self, job: Job, delay: timedelta) -> JobStatus | None:
        return self._run(_calls.snooze(job.id, job.lease_token, delay))

    def hand_back(self, jobs: Sequence[Job]) -> list[bool]:
        """Jobs claimed and never started, `pending` again at once with their budget kept
        (`queue_hand_back`): one answer per job, False where its lease was lost."""
        return self._run(_calls.hand_back([(j.id, j.lease_token) for j in jobs]))

    def redrive(self, job_id: int) -> bool:
        return self._run(_calls.redrive(job_id))

    def redrive_all(self, queue: str, max_jobs: int | None = None) -> int:
        return self._run(_calls.redrive_all(queue, max_jobs))

    def redrive_many(self, job_ids: Sequence[int]) -> list[bool]:
        """`queue_redrive_batch`: `redrive` of each job in one call, one answer per id in input
        order; an unknown id refuses the whole call (`NotFound`)."""
        return self._run(_calls.redrive_many(job_ids))

    def cancel(self, job_id: int) -> bool:
        return self._run(_calls.cancel(job_id))

    def cancel_many(self, job_ids: Sequence[int]) -> list[bool]:
        """`queue_cancel_batch`: `cancel` of each job in one call, one answer per id in input
        order; an unknown id refuses the whole call (`NotFound`)."""
        return self._run(_calls.cancel_many(job_ids))

    def pause(self, queue: str) -> bool:
        """Claims on `queue` return no jobs until `resume`; False: it was already paused."""
        return self._run(_calls.pause(queue))

    def resume(self, queue: str) -> bool:
        """False: `queue` was not paused."""
        return self._run(_calls.resume(queue))

    def purge(self, queue: str, older_than: timedelta, max_jobs: int = 10000) -> int:
        return self._run(_calls.purge(queue, older_than, max_jobs))

    def stats(self) -> list[QueueStats]:
        return self._run(_calls.stats())

    def jobs(
        self,
        queue: str | None = None,
        status: JobStatus | None = None,
        max_rows: int = 100,
        *,
        group_key: str | None = None,
        dedupe_key: str | None = None,
        worker: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        payload_contains: Any = None,
        before_id: int | None = None,
        after_id: int | None = None,
    ) -> list[JobSummary]:
        """Jobs newest first, of `queue` or (None) of every queue the role may observe, narrowed
        by the filters given (`created_after` <= created_at < `created_before`;
        `payload_contains`: JSON containment, any JSON-serialisable value or `Json`). The next
        page: the same call with `before_id` the last row's `job_id`; the jobs newer than one
        seen: `after_id` its `job_id`."""
        return self._run(
            _calls.jobs(
                queue,
                status,
                max_rows,
                group_key=group_key,
                dedupe_key=dedupe_key,
                worker=worker,
                created_after=created_after,
                created_before=created_before,
                payload_contains=payload_contains,
                before_id=before_id,
                after_id=after_id,
            )
        )

    def job(self, job_id: int) -> JobDetail:
        """The job's row, with what its handler last reported (`progress`, `progress_at`)."""
        try:
            return self._run(_calls.job(job_id))
        except psycopg.errors.UndefinedColumn:
            # A database not yet updated to 0.3.0: its `queue_job` has no progress columns. Read
            # again without them, unless the refusal aborted a transaction the call was in.
            if self.conn.info.transaction_status != TransactionStatus.IDLE:
                raise
            return self._run(_calls.job_before_progress(job_id))

    def await_jobs(self, job_ids: Sequence[int], timeout: timedelta) -> Awaited:
        """`CALL queue_await`: returns once every job of `job_ids` (at most 10000, none twice) is
        final — succeeded, dead or cancelled — or when `timeout` (0 to 1 day) has passed on the
        server's clock, woken by the commits that finish them. `Awaited(all_final, unfinished)`:
        `unfinished` the ids not final yet, ascending. It holds this client's connection for the
        wait; the server commits between its looks and sleeps holding no snapshot, so it refuses
        to run inside a transaction block (`NeedsOwnTransactions`, SQLSTATE 25001)."""
        return self._run(_calls.await_jobs(job_ids, timeout))

    def attempts(self, job_id: int) -> list[Attempt]:
        return self._run(_calls.attempts(job_id))

    def result(self, job_id: int) -> str | None:
        """What the job returned when it succeeded, as JSON text; None until then."""
        return self._run(_calls.result(job_id))

    def parents(self, job_id: int) -> list[Parent]:
        """The jobs `job_id` depends on, oldest first, each one's result once it succeeded: what a
        child's handler reads its inputs from (and, with `on_parent_failure="run"`, which of its
        parents failed)."""
        return self._run(_calls.parents(job_id))

    def flow(
        self, nodes: Sequence[FlowNode | Mapping[str, Any]], trace_context: str | None = None
    ) -> dict[str, int]:
        """Enqueues a graph of jobs at once (`queue_flow`): `FlowNode`s or dicts of the same
        fields, `depends_on` naming keys of the same flow. The server checks the whole graph
        (keys, parents, cycles, queues) before the first insert, so a refused flow leaves no job.
        Returns each key's job id, in the order the nodes were given."""
        return self._run(_calls.flow(nodes, trace_context))

    def flow_status(self, root: int) -> FlowStatus:
        """How far the flow from `root` got: it and every job depending on it, counted by status."""
        return self._run(_calls.flow_status(root))

    def grant(self, queue: str, role: str, privilege: QueuePrivilege) -> bool:
        return self._run(_calls.grant(queue, role, privilege))

    def revoke(self, queue: str, role: str, privilege: QueuePrivilege) -> bool:
        return self._run(_calls.revoke(queue, role, privilege))

    def grants(self) -> list[QueueGrant]:
        return self._run(_calls.grants())

    def privileges(self) -> list[QueueAccess]:
        """`queue_privileges`: what the connecting role may do on each queue."""
        return self._run(_calls.privileges())

    def schedule(
        self,
        name: str,
        queue: str,
        every: str,
        payload: Any,
        *,
        timezone: str = "UTC",
        catch_up: bool = False,
        trace_context: str | None = None,
    ) -> datetime:
        return self._run(_calls.schedule(name, queue, every, payload, timezone, catch_up, trace_context))

    def unschedule(self, name: str) -> bool:
        return self._run(_calls.unschedule(name))

    def schedules(self) -> list[Schedule]:
        return self._run(_calls.schedules())

    def metrics(self) -> str:
        return self._run(_calls.metrics())


__all__ = [
    "Client",
    "connect",
    "enqueue",
    "enqueue_batch",
    "progress",
    "report_progress",
    "run_step",
    "step",
]

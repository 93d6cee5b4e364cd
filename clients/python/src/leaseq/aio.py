"""Asyncio twins of `leaseq.client`: `enqueue` and `enqueue_batch` on the caller's own
`psycopg.AsyncConnection` (sharing its transaction), and `AsyncClient`. The statements are the
same (`leaseq._calls`); only the waiting differs."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
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


async def run(conn: psycopg.AsyncConnection[Any], call: Call[T]) -> T:
    """Runs `call` on `conn`, in whatever transaction `conn` is in."""
    if call.untraced is not None:
        if conn not in _KEEPS_TRACES:
            _KEEPS_TRACES[conn] = await run(conn, _calls.KEEPS_TRACES)
        if not _KEEPS_TRACES[conn]:
            call = call.untraced
    with translated():
        async with conn.cursor() as cur:
            await cur.execute(call.sql, call.params, prepare=True)
            return call.decode(await cur.fetchall())


async def enqueue(
    conn: psycopg.AsyncConnection[Any],
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
    return await run(
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


async def enqueue_batch(
    conn: psycopg.AsyncConnection[Any],
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
    return await run(
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


async def step(
    conn: psycopg.AsyncConnection[Any], job: Job, name: str, output: Any = None
) -> bool:
    """`leaseq.step`: records step `name` of `job` with `output` in `conn`'s transaction; False,
    changing nothing, when the lease token is stale or the step was recorded already."""
    return await run(conn, _calls.step(job.id, job.lease_token, name, output))


async def progress(conn: psycopg.AsyncConnection[Any], job: Job, progress: Any) -> bool:
    """`leaseq.progress`: reports how far `job`'s handler got in `conn`'s transaction; False,
    changing nothing, when the lease token is stale."""
    return await run(conn, _calls.progress(job.id, job.lease_token, progress))


async def report_progress(
    target: AsyncClient | psycopg.AsyncConnection[Any], job: Job, progress: Any
) -> None:
    """`leaseq.report_progress` for asyncio: raises `LeaseLost` (and sets `job.lost`) when the
    lease token is stale."""
    conn = target.conn if isinstance(target, AsyncClient) else target
    if not await run(conn, _calls.progress(job.id, job.lease_token, progress)):
        job.lost.set()
        raise LeaseLost(f"progress of job {job.id} not stored: its lease is lost")


async def run_step(
    target: AsyncClient | psycopg.AsyncConnection[Any],
    job: Job,
    name: str,
    fn: Callable[[], Any],
) -> Any:
    """`leaseq.run_step` for asyncio: `fn` may be a plain function or return an awaitable (an
    `async def`), awaited before its output is recorded."""
    conn = target.conn if isinstance(target, AsyncClient) else target
    known = _calls.recorded(job)
    if known is None:
        known = _calls.remember(job, await run(conn, _calls.steps(job.id)))
    if name in known:
        return _calls.decoded(known[name])
    output = fn()
    if inspect.isawaitable(output):
        output = await output
    if not await run(conn, _calls.step(job.id, job.lease_token, name, output)):
        job.lost.set()
        raise LeaseLost(f"step {name!r} of job {job.id} not recorded: its lease is lost")
    known[name] = None if output is None else document(output)
    return output


async def connect(conninfo: str, prepared_statements: bool = True) -> psycopg.AsyncConnection[Any]:
    """A connection in autocommit (each call its own transaction); a failure says where and why.
    `prepared_statements=False`: none (for a pooler in transaction mode)."""
    try:
        return await psycopg.AsyncConnection.connect(
            conninfo, autocommit=True, **connect_options(conninfo, prepared_statements)
        )
    except psycopg.OperationalError as error:
        raise connection_failed(conninfo, error) from error


class AsyncClient:
    """`leaseq.Client` for asyncio: `await AsyncClient.connect(conninfo)`."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]):
        self.conn = conn

    @classmethod
    async def connect(cls, conninfo: str, *, prepared_statements: bool = True) -> AsyncClient:
        return cls(await connect(conninfo, prepared_statements))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.conn.close()

    async def _run(self, call: Call[T]) -> T:
        return await run(self.conn, call)

    async def queue_create(self, queue: str, **settings: Any) -> None:
        """Creates `queue` or replaces its settings: `lease`, `backoff_base`, `backoff_cap`,
        `retain` (timedeltas), `max_attempts`, `max_snoozes`, `group_concurrency` (ints); those
        left out take the SQL function's defaults."""
        await self._run(_calls.queue_create(queue, settings))

    async def enqueue(
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
        return await self._run(
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

    async def enqueue_batch(
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
        return await self._run(
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

    async def claim(
        self, queue: str, worker: str, batch: int = 1, lease: timedelta | None = None
    ) -> list[Job]:
        try:
            return await self._run(_calls.claim(queue, worker, batch, lease))
        except psycopg.errors.UndefinedColumn:
            # A database not yet updated to 0.3.0: its claim returns no trace context.
            if self.conn.info.transaction_status != TransactionStatus.IDLE:
                raise
            return await self._run(_calls.claim(queue, worker, batch, lease, traced=False))

    async def renew(self, job: Job, lease: timedelta | None = None) -> datetime | None:
        """The new expiry, or None: the lease is lost — stop working on the job."""
        return await self._run(_calls.renew(job.id, job.lease_token, lease))

    async def renew_batch(
        self, jobs: Sequence[Job], lease: timedelta | None = None
    ) -> list[datetime | None]:
        return await self._run(_calls.renew_batch([(j.id, j.lease_token) for j in jobs], lease))

    async def complete(self, job: Job, result: Any = None) -> bool:
        return await self._run(_calls.complete(job.id, job.lease_token, result))

    async def complete_batch(self, jobs: Sequence[tuple[Job, Any]]) -> list[bool]:
        return await self._run(_calls.complete_batch([(j.id, j.lease_token, r) for j, r in jobs]))

    async def step(self, job: Job, name: str, output: Any = None) -> bool:
        """`Client.step`."""
        return await self._run(_calls.step(job.id, job.lease_token, name, output))

    async def steps(self, job_id: int) -> list[Step]:
        """`Client.steps`."""
        return await self._run(_calls.steps(job_id))

    async def progress(self, job: Job, progress: Any) -> bool:
        """`Client.progress`."""
        return await self._run(_calls.progress(job.id, job.lease_token, progress))

    async def fail(
        self,
        job: Job,
        error: Any = None,
        *,
        retry: bool = True,
        retry_in: timedelta | None = None,
    ) -> JobStatus | None:
        return await self._run(_calls.fail(job.id, job.lease_token, error, retry, retry_in))

    async def fail_batch(
        self, jobs: Sequence[tuple[Job, Any]], *, retry: bool = True
    ) -> list[JobStatus | None]:
        return await self._run(_calls.fail_batch([(j.id, j.lease_token, e) for j, e in jobs], retry))

    async def snooze(self, job: Job, delay: timedelta) -> JobStatus | None:
        return await self._run(_calls.snooze(job.id, job.lease_token, delay))

    async def hand_back(self, jobs: Sequence[Job]) -> list[bool]:
        """`Client.hand_back`."""
        return await self._run(_calls.hand_back([(j.id, j.lease_token) for j in jobs]))

    async def redrive(self, job_id: int) -> bool:
        return await self._run(_calls.redrive(job_id))

    async def redrive_all(self, queue: str, max_jobs: int | None = None) -> int:
        return await self._run(_calls.redrive_all(queue, max_jobs))

    async def redrive_many(self, job_ids: Sequence[int]) -> list[bool]:
        """`queue_redrive_batch`: `redrive` of each job in one call, one answer per id in input
        order; an unknown id refuses the whole call (`NotFound`)."""
        return await self._run(_calls.redrive_many(job_ids))

    async def cancel(self, job_id: int) -> bool:
        return await self._run(_calls.cancel(job_id))

    async def cancel_many(self, job_ids: Sequence[int]) -> list[bool]:
        """`queue_cancel_batch`: `cancel` of each job in one call, one answer per id in input
        order; an unknown id refuses the whole call (`NotFound`)."""
        return await self._run(_calls.cancel_many(job_ids))

    async def pause(self, queue: str) -> bool:
        """Claims on `queue` return no jobs until `resume`; False: it was already paused."""
        return await self._run(_calls.pause(queue))

    async def resume(self, queue: str) -> bool:
        """False: `queue` was not paused."""
        return await self._run(_calls.resume(queue))

    async def purge(self, queue: str, older_than: timedelta, max_jobs: int = 10000) -> int:
        return await self._run(_calls.purge(queue, older_than, max_jobs))

    async def stats(self) -> list[QueueStats]:
        return await self._run(_calls.stats())

    async def jobs(
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
        return await self._run(
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

    async def job(self, job_id: int) -> JobDetail:
        """The job's row, with what its handler last reported (`progress`, `progress_at`)."""
        try:
            return await self._run(_calls.job(job_id))
        except psycopg.errors.UndefinedColumn:
            # A database not yet updated to 0.3.0: its `queue_job` has no progress columns. Read
            # again without them, unless the refusal aborted a transaction the call was in.
            if self.conn.info.transaction_status != TransactionStatus.IDLE:
                raise
            return await self._run(_calls.job_before_progress(job_id))

    async def await_jobs(self, job_ids: Sequence[int], timeout: timedelta) -> Awaited:
        """`Client.await_jobs`: holds this client's connection until every job is final or
        `timeout` passes (the event loop stays free)."""
        return await self._run(_calls.await_jobs(job_ids, timeout))

    async def attempts(self, job_id: int) -> list[Attempt]:
        return await self._run(_calls.attempts(job_id))

    async def result(self, job_id: int) -> str | None:
        """What the job returned when it succeeded, as JSON text; None until then."""
        return await self._run(_calls.result(job_id))

    async def parents(self, job_id: int) -> list[Parent]:
        """The jobs `job_id` depends on, oldest first, each one's result once it succeeded: what a
        child's handler reads its inputs from (and, with `on_parent_failure="run"`, which of its
        parents failed)."""
        return await self._run(_calls.parents(job_id))

    async def flow(
        self, nodes: Sequence[FlowNode | Mapping[str, Any]], trace_context: str | None = None
    ) -> dict[str, int]:
        """Enqueues a graph of jobs at once (`queue_flow`): `FlowNode`s or dicts of the same
        fields, `depends_on` naming keys of the same flow. The server checks the whole graph
        (keys, parents, cycles, queues) before the first insert, so a refused flow leaves no job.
        Returns each key's job id, in the order the nodes were given."""
        return await self._run(_calls.flow(nodes, trace_context))

    async def flow_status(self, root: int) -> FlowStatus:
        """How far the flow from `root` got: it and every job depending on it, counted by status."""
        return await self._run(_calls.flow_status(root))

    async def grant(self, queue: str, role: str, privilege: QueuePrivilege) -> bool:
        return await self._run(_calls.grant(queue, role, privilege))

    async def revoke(self, queue: str, role: str, privilege: QueuePrivilege) -> bool:
        return await self._run(_calls.revoke(queue, role, privilege))

    async def grants(self) -> list[QueueGrant]:
        return await self._run(_calls.grants())

    async def privileges(self) -> list[QueueAccess]:
        """`queue_privileges`: what the connecting role may do on each queue."""
        return await self._run(_calls.privileges())

    async def schedule(
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
        return await self._run(_calls.schedule(name, queue, every, payload, timezone, catch_up, trace_context))

    async def unschedule(self, name: str) -> bool:
        return await self._run(_calls.unschedule(name))

    async def schedules(self) -> list[Schedule]:
        return await self._run(_calls.schedules())

    async def metrics(self) -> str:
        return await self._run(_calls.metrics())


__all__ = [
    "AsyncClient",
    "connect",
    "enqueue",
    "enqueue_batch",
    "progress",
    "report_progress",
    "run_step",
    "step",
]

"""Every call of the extension's SQL functions, written once: its statement, its parameters and
how its rows decode. `leaseq.client` (blocking) and `leaseq.aio` (asyncio) run the same calls.

Statements are static and fully parameterised; JSON crosses as text (`%s::jsonb` in,
`::text` out), so payloads arrive exactly as enqueued. Arguments the caller leaves out take the
values the SQL functions declare as their defaults (a test holds the two to each other). The
statements run on the caller's search_path: an operator whose operand types pg_catalog has no
exact match for (`numeric * integer`) is written `OPERATOR(pg_catalog.*)`, and PostgreSQL's
functions are `pg_catalog.`-qualified, so that nothing planted in public is ever run
(docs/security.md).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, TypeVar
from uuid import UUID

from . import _otel
from .types import (
    Attempt,
    AttemptOutcome,
    Awaited,
    FlowNode,
    FlowStatus,
    Job,
    JobDetail,
    JobStatus,
    JobSummary,
    Json,
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
Row = tuple[Any, ...]


@dataclass(frozen=True)
class Call(Generic[T]):
    sql: str
    params: dict[str, Any]
    decode: Callable[[list[Row]], T]
    #: A call carrying the current span's trace context (`_traced`): what to send instead to a
    #: database that predates trace contexts (0.2.0, not updated yet).
    untraced: Call[T] | None = None


def _one(rows: list[Row]) -> Any:
    return rows[0][0]


def _column(rows: list[Row]) -> list[Any]:
    return [row[0] for row in rows]


def _nothing(rows: list[Row]) -> None:
    return None


OnDuplicate = Literal["ignore", "replace"]

ENQUEUE = """SELECT leaseq.queue_enqueue(
                 queue => %(queue)s::text, payload => %(payload)s::jsonb, run_at => %(run_at)s::timestamptz,
                 priority => %(priority)s::int, dedupe_key => %(dedupe_key)s::text,
                 max_attempts => %(max_attempts)s::int, dedupe_for => %(dedupe_for)s::interval,
                 on_duplicate => %(on_duplicate)s::text, group_key => %(group_key)s::text)"""
ENQUEUE_AFTER = """SELECT leaseq.queue_enqueue(
                       queue => %(queue)s::text, payload => %(payload)s::jsonb,
                       run_at => %(run_at)s::timestamptz, priority => %(priority)s::int,
                       dedupe_key => %(dedupe_key)s::text, max_attempts => %(max_attempts)s::int,
                       dedupe_for => %(dedupe_for)s::interval, on_duplicate => %(on_duplicate)s::text,
                       group_key => %(group_key)s::text, depends_on => %(depends_on)s::bigint[],
                       on_parent_failure => %(on_parent_failure)s::text)"""
ENQUEUE_TRACED = """SELECT leaseq.queue_enqueue(
                        queue => %(queue)s::text, payload => %(payload)s::jsonb,
                        run_at => %(run_at)s::timestamptz, priority => %(priority)s::int,
                        dedupe_key => %(dedupe_key)s::text, max_attempts => %(max_attempts)s::int,
                        dedupe_for => %(dedupe_for)s::interval, on_duplicate => %(on_duplicate)s::text,
                        group_key => %(group_key)s::text, depends_on => %(depends_on)s::bigint[],
                        on_parent_failure => %(on_parent_failure)s::text,
                        trace_context => %(trace_context)s::text)"""
#: The dependency arguments of a traced call that names none.
_NO_PARENTS: dict[str, Any] = {"depends_on": None, "on_parent_failure": "cancel"}


#: Whether the database keeps trace contexts (0.3.0 on): asked once per connection, when a
#: call first carries the current span's.
KEEPS_TRACES: Call[bool] = Call(
    """SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute
                       WHERE attrelid = pg_catalog.to_regclass('leaseq.jobs')
                         AND attname = 'trace_context' AND NOT attisdropped)""",
    {},
    lambda rows: bool(rows[0][0]),
)


def _traced(call: Call[T], sql: str, defaults: dict[str, Any], given: str | None) -> Call[T]:
    """`call` with a trace context: `given`, else the current span's (OpenTelemetry, when its
    API is installed) — then `call` stays what a database without trace contexts gets — sent as
    `sql`, which names every argument (`defaults`: those `call` left out)."""
    trace_context = given if given is not None else _otel.traceparent()
    if trace_context is None:
        return call
    params = {**defaults, **call.params, "trace_context": trace_context}
    return Call(sql, params, call.decode, None if given is not None else call)


def _after(
    plain: str, after: str, depends_on: Sequence[int] | None, on_parent_failure: str | None
) -> tuple[str, dict[str, Any]]:
    """The statement of an enqueue and its dependency parameters: without `depends_on` and
    `on_parent_failure` the one that names neither, which a database still at 0.2.0 (not yet
    updated) answers too."""
    if depends_on is None and on_parent_failure is None:
        return plain, {}
    parents = None if depends_on is None else list(depends_on)
    return after, {"depends_on": parents, "on_parent_failure": on_parent_failure or "cancel"}


def enqueue(
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
) -> Call[int]:
    sql, dependencies = _after(ENQUEUE, ENQUEUE_AFTER, depends_on, on_parent_failure)
    call = Call(
        sql,
        {
            "queue": queue,
            "payload": document(payload),
            "run_at": run_at,
            "priority": 0 if priority is None else priority,
            "dedupe_key": dedupe_key,
            "max_attempts": max_attempts,
            "dedupe_for": dedupe_for,
            "on_duplicate": on_duplicate or "ignore",
            "group_key": group_key,
            **dependencies,
        },
        _one,
    )
    return _traced(call, ENQUEUE_TRACED, _NO_PARENTS, trace_context)


ENQUEUE_BATCH = """SELECT id FROM leaseq.queue_enqueue_batch(
                       queue => %(queue)s::text, payloads => %(payloads)s::text[]::jsonb[],
                       run_at => %(run_at)s::timestamptz, priority => %(priority)s::int,
                       group_keys => %(group_keys)s::text[]) AS id"""
ENQUEUE_BATCH_AFTER = """SELECT id FROM leaseq.queue_enqueue_batch(
                             queue => %(queue)s::text, payloads => %(payloads)s::text[]::jsonb[],
                             run_at => %(run_at)s::timestamptz, priority => %(priority)s::int,
                             group_keys => %(group_keys)s::text[],
                             depends_on => %(depends_on)s::bigint[],
                             on_parent_failure => %(on_parent_failure)s::text) AS id"""
ENQUEUE_BATCH_EACH = """SELECT id FROM leaseq.queue_enqueue_batch(
                            queue => %(queue)s::text, payloads => %(payloads)s::text[]::jsonb[],
                            run_at => %(run_at)s::timestamptz, priority => %(priority)s::int,
                            group_keys => %(group_keys)s::text[],
                            depends_on => %(depends_on)s::bigint[],
                            on_parent_failure => %(on_parent_failure)s::text,
                            depends_on_each => %(depends_on_each)s::jsonb) AS id"""
ENQUEUE_BATCH_TRACED = """SELECT id FROM leaseq.queue_enqueue_batch(
                              queue => %(queue)s::text, payloads => %(payloads)s::text[]::jsonb[],
                              run_at => %(run_at)s::timestamptz, priority => %(priority)s::int,
                              group_keys => %(group_keys)s::text[],
                              depends_on => %(depends_on)s::bigint[],
                              on_parent_failure => %(on_parent_failure)s::text,
                              depends_on_each => %(depends_on_each)s::jsonb,
                              trace_context => %(trace_context)s::text) AS id"""


def enqueue_batch(
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
) -> Call[list[int]]:
    if depends_on_each is None:
        sql, dependencies = _after(
            ENQUEUE_BATCH, ENQUEUE_BATCH_AFTER, depends_on, on_parent_failure
        )
    else:
        # Each job's own parents, as the JSON array of arrays of ids the server takes (only when
        # given: a database at 0.2.0 has no such argument). The server judges it, and refuses
        # it with `depends_on` or `group_keys`.
        sql = ENQUEUE_BATCH_EACH
        dependencies = {
            "depends_on": None if depends_on is None else list(depends_on),
            "on_parent_failure": on_parent_failure or "cancel",
            "depends_on_each": json.dumps([list(parents) for parents in depends_on_each]),
        }
    call = Call(
        sql,
        {
            "queue": queue,
            "payloads": [document(p) for p in payloads],
            "run_at": run_at,
            "priority": 0 if priority is None else priority,
            "group_keys": None if group_keys is None else list(group_keys),
            **dependencies,
        },
        _column,
    )
    return _traced(call, ENQUEUE_BATCH_TRACED, {**_NO_PARENTS, "depends_on_each": None},
                   trace_context)


QUEUE_CREATE = """SELECT leaseq.queue_create(
                      queue => %(queue)s::text, lease => %(lease)s::interval, max_attempts => %(max_attempts)s::int,
                      backoff_base => %(backoff_base)s::interval, backoff_cap => %(backoff_cap)s::interval,
                      retain => %(retain)s::interval, max_snoozes => %(max_snoozes)s::int,
                      group_concurrency => %(group_concurrency)s::int)"""

#: `queue_create`'s defaults, as the SQL function declares them.
QUEUE_DEFAULTS: dict[str, Any] = {
    "lease": timedelta(seconds=30),
    "max_attempts": 5,
    "backoff_base": timedelta(seconds=1),
    "backoff_cap": timedelta(minutes=5),
    "retain": None,
    "max_snoozes": None,
    "group_concurrency": 1,
}


def queue_create(queue: str, settings: dict[str, Any]) -> Call[None]:
    unknown = set(settings) - set(QUEUE_DEFAULTS)
    if unknown:
        raise TypeError(f"queue_create() got unexpected settings: {', '.join(sorted(unknown))}")
    return Call(QUEUE_CREATE, {"queue": queue, **QUEUE_DEFAULTS, **settings}, _nothing)


CLAIM = """SELECT job_id, %(queue)s::text, lease_token, attempt_no, payload::text, priority,
                  lease_expires_at,
                  extract(epoch FROM lease_expires_at - pg_catalog.clock_timestamp())::float8,
                  pg_catalog.concat(job_id, '-', (extract(epoch FROM enqueued_at)
                                                  OPERATOR(pg_catalog.*) 1000000)::bigint),
                  trace_context
             FROM leaseq.queue_claim(queue => %(queue)s::text, worker => %(worker)s::text,
                                     batch => %(batch)s::int, lease => %(lease)s::interval)"""
#: `CLAIM` for a database not yet updated to 0.3.0: its claim returns no trace context.
CLAIM_UNTRACED = """SELECT job_id, %(queue)s::text, lease_token, attempt_no, payload::text,
                           priority, lease_expires_at,
                           extract(epoch FROM lease_expires_at - pg_catalog.clock_timestamp())::float8,
                           pg_catalog.concat(job_id, '-', (extract(epoch FROM enqueued_at)
                                                           OPERATOR(pg_catalog.*) 1000000)::bigint)
                      FROM leaseq.queue_claim(queue => %(queue)s::text, worker => %(worker)s::text,
                                              batch => %(batch)s::int, lease => %(lease)s::interval)"""


def claim(
    queue: str, worker: str, batch: int, lease: timedelta | None, traced: bool = True
) -> Call[list[Job]]:
    return Call(
        CLAIM if traced else CLAIM_UNTRACED,
        {"queue": queue, "worker": worker, "batch": batch, "lease": lease},
        lambda rows: [Job(*row) for row in rows],
    )


RENEW = """SELECT leaseq.queue_renew(job_id => %(job_id)s::bigint, lease_token => %(token)s::uuid,
                                      lease => %(lease)s::interval)"""


def renew(job_id: int, token: UUID, lease: timedelta | None) -> Call[datetime | None]:
    return Call(RENEW, {"job_id": job_id, "token": token, "lease": lease}, _one)


RENEW_BATCH = """SELECT expires
                   FROM leaseq.queue_renew_batch(job_ids => %(ids)s::bigint[], lease_tokens => %(tokens)s::uuid[],
                                                 lease => %(lease)s::interval)
                        WITH ORDINALITY AS answer (expires, position)
                  ORDER BY position"""


def _lease_tokens(tokens: list[UUID]) -> list[UUID]:
    """A batch's lease tokens: one for all when they are one claim's (the server fences each job
    by its id with it, and the token is sent once), one per job otherwise."""
    return tokens[:1] if all(t == tokens[0] for t in tokens) else tokens


def _documents(docs: list[Any]) -> list[str | None] | None:
    """One document per job, or None when none has one (nothing to send)."""
    if all(d is None for d in docs):
        return None
    return [None if d is None else document(d) for d in docs]


def renew_batch(
    jobs: Sequence[tuple[int, UUID]], lease: timedelta | None
) -> Call[list[datetime | None]]:
    ids, tokens = [j for j, _ in jobs], _lease_tokens([t for _, t in jobs])
    return Call(RENEW_BATCH, {"ids": ids, "tokens": tokens, "lease": lease}, _column)


#: The Worker's renewal: each lease's seconds left as the server granted them (its own clock), so
#: that the worker counts the lease's end on its clock, from when it sent the call.
RENEW_BATCH_LEFT = """SELECT extract(epoch FROM expires - pg_catalog.clock_timestamp())::float8
                        FROM leaseq.queue_renew_batch(job_ids => %(ids)s::bigint[], lease_tokens => %(tokens)s::uuid[],
                                                      lease => %(lease)s::interval)
                             WITH ORDINALITY AS answer (expires, position)
                       ORDER BY position"""


def renew_batch_left(
    jobs: Sequence[tuple[int, UUID]], lease: timedelta | None
) -> Call[list[float | None]]:
    ids, tokens = [j for j, _ in jobs], _lease_tokens([t for _, t in jobs])
    return Call(RENEW_BATCH_LEFT, {"ids": ids, "tokens": tokens, "lease": lease}, _column)


COMPLETE = """SELECT leaseq.queue_complete(job_id => %(job_id)s::bigint, lease_token => %(token)s::uuid,
                                            result => %(result)s::jsonb)"""


def complete(job_id: int, token: UUID, result: Any) -> Call[bool]:
    text = None if result is None else document(result)
    return Call(COMPLETE, {"job_id": job_id, "token": token, "result": text}, _one)


COMPLETE_BATCH = """SELECT done
                      FROM leaseq.queue_complete_batch(
                               job_ids => %(ids)s::bigint[], lease_tokens => %(tokens)s::uuid[],
                               results => %(results)s::text[]::jsonb[])
                           WITH ORDINALITY AS answer (done, position)
                     ORDER BY position"""


def complete_batch(jobs: Sequence[tuple[int, UUID, Any]]) -> Call[list[bool]]:
    return Call(
        COMPLETE_BATCH,
        {
            "ids": [j for j, _, _ in jobs],
            "tokens": _lease_tokens([t for _, t, _ in jobs]),
            "results": _documents([r for _, _, r in jobs]),
        },
        _column,
    )


STEP = """SELECT leaseq.queue_step(job_id => %(job_id)s::bigint, lease_token => %(token)s::uuid,
                                    name => %(name)s::text, output => %(output)s::jsonb)"""


def step(job_id: int, token: UUID, name: str, output: Any) -> Call[bool]:
    text = None if output is None else document(output)
    return Call(STEP, {"job_id": job_id, "token": token, "name": name, "output": text}, _one)


STEPS = """SELECT name, attempt_no, output::text, recorded_at
             FROM leaseq.queue_steps(job_id => %(job_id)s::bigint)"""


def steps(job_id: int) -> Call[list[Step]]:
    return Call(STEPS, {"job_id": job_id}, lambda rows: [Step(*row) for row in rows])


#: `run_step`'s cache, per claimed job (one attempt): each recorded step's output as JSON text,
#: read from `queue_steps` once, then kept up to date with the steps this attempt records.
_recorded: weakref.WeakKeyDictionary[Job, dict[str, str | None]] = weakref.WeakKeyDictionary()


def recorded(job: Job) -> dict[str, str | None] | None:
    """The steps known recorded for `job`, None until `queue_steps` was read for it."""
    return _recorded.get(job)


def remember(job: Job, found: list[Step]) -> dict[str, str | None]:
    known = _recorded[job] = {s.name: s.output for s in found}
    return known


def decoded(output: str | None) -> Any:
    return None if output is None else json.loads(output)


PROGRESS = """SELECT leaseq.queue_progress(job_id => %(job_id)s::bigint, lease_token => %(token)s::uuid,
                                            progress => %(progress)s::jsonb)"""


def progress(job_id: int, token: UUID, progress: Any) -> Call[bool]:
    text = None if progress is None else document(progress)
    return Call(PROGRESS, {"job_id": job_id, "token": token, "progress": text}, _one)


FAIL = """SELECT leaseq.queue_fail(job_id => %(job_id)s::bigint, lease_token => %(token)s::uuid,
                                    error => %(error)s::jsonb, retry => %(retry)s::boolean,
                                    retry_in => %(retry_in)s::interval)::text"""


def _status(label: str | None) -> JobStatus | None:
    return None if label is None else JobStatus(label)


def fail(
    job_id: int, token: UUID, error: Any, retry: bool, retry_in: timedelta | None
) -> Call[JobStatus | None]:
    return Call(
        FAIL,
        {
            "job_id": job_id,
            "token": token,
            "error": None if error is None else document(error),
            "retry": retry,
            "retry_in": retry_in,
        },
        lambda rows: _status(rows[0][0]),
    )


FAIL_BATCH = """SELECT status::text
                  FROM leaseq.queue_fail_batch(job_ids => %(ids)s::bigint[], lease_tokens => %(tokens)s::uuid[],
                                               errors => %(errors)s::text[]::jsonb[],
                                               retry => %(retry)s::boolean)
                       WITH ORDINALITY AS answer (status, position)
                 ORDER BY position"""


def fail_batch(jobs: Sequence[tuple[int, UUID, Any]], retry: bool) -> Call[list[JobStatus | None]]:
    return Call(
        FAIL_BATCH,
        {
            "ids": [j for j, _, _ in jobs],
            "tokens": _lease_tokens([t for _, t, _ in jobs]),
            "errors": _documents([e for _, _, e in jobs]),
            "retry": retry,
        },
        lambda rows: [_status(row[0]) for row in rows],
    )


SNOOZE = """SELECT leaseq.queue_snooze(job_id => %(job_id)s::bigint, lease_token => %(token)s::uuid,
                                        delay => %(delay)s::interval)::text"""


def snooze(job_id: int, token: UUID, delay: timedelta) -> Call[JobStatus | None]:
    return Call(
        SNOOZE,
        {"job_id": job_id, "token": token, "delay": delay},
        lambda rows: _status(rows[0][0]),
    )


HAND_BACK = """SELECT handed
                 FROM leaseq.queue_hand_back(job_ids => %(ids)s::bigint[],
                                             lease_tokens => %(tokens)s::uuid[])
                      WITH ORDINALITY AS answer (handed, position)
                ORDER BY position"""


def hand_back(jobs: Sequence[tuple[int, UUID]]) -> Call[list[bool]]:
    ids, tokens = [j for j, _ in jobs], _lease_tokens([t for _, t in jobs])
    return Call(HAND_BACK, {"ids": ids, "tokens": tokens}, _column)


REDRIVE = "SELECT leaseq.queue_redrive(job_id => %(job_id)s::bigint)"
REDRIVE_ALL = "SELECT leaseq.queue_redrive_all(queue => %(queue)s::text, max_jobs => %(max_jobs)s::int)"
REDRIVE_BATCH = """SELECT changed
                     FROM leaseq.queue_redrive_batch(job_ids => %(ids)s::bigint[])
                          WITH ORDINALITY AS answer (changed, position)
                    ORDER BY position"""
CANCEL = "SELECT leaseq.queue_cancel(job_id => %(job_id)s::bigint)"
CANCEL_BATCH = """SELECT changed
                    FROM leaseq.queue_cancel_batch(job_ids => %(ids)s::bigint[])
                         WITH ORDINALITY AS answer (changed, position)
                   ORDER BY position"""
PAUSE = "SELECT leaseq.queue_pause(queue => %(queue)s::text)"
RESUME = "SELECT leaseq.queue_resume(queue => %(queue)s::text)"
PURGE = """SELECT leaseq.queue_purge(queue => %(queue)s::text, older_than => %(older_than)s::interval,
                                      max_jobs => %(max_jobs)s::int)"""
METRICS = "SELECT leaseq.metrics()"


def redrive(job_id: int) -> Call[bool]:
    return Call(REDRIVE, {"job_id": job_id}, _one)


def redrive_all(queue: str, max_jobs: int | None) -> Call[int]:
    return Call(REDRIVE_ALL, {"queue": queue, "max_jobs": max_jobs}, _one)


def redrive_many(job_ids: Sequence[int]) -> Call[list[bool]]:
    return Call(REDRIVE_BATCH, {"ids": list(job_ids)}, _column)


def cancel(job_id: int) -> Call[bool]:
    return Call(CANCEL, {"job_id": job_id}, _one)


def cancel_many(job_ids: Sequence[int]) -> Call[list[bool]]:
    return Call(CANCEL_BATCH, {"ids": list(job_ids)}, _column)


def pause(queue: str) -> Call[bool]:
    return Call(PAUSE, {"queue": queue}, _one)


def resume(queue: str) -> Call[bool]:
    return Call(RESUME, {"queue": queue}, _one)


def purge(queue: str, older_than: timedelta, max_jobs: int) -> Call[int]:
    return Call(PURGE, {"queue": queue, "older_than": older_than, "max_jobs": max_jobs}, _one)


def metrics() -> Call[str]:
    return Call(METRICS, {}, _one)


STATS = """SELECT queue, pending, scheduled, running, expired_leases, succeeded, dead,
                  cancelled, oldest_pending_age, most_snoozes, waiting
             FROM leaseq.queue_stats()"""


def stats() -> Call[list[QueueStats]]:
    return Call(STATS, {}, lambda rows: [QueueStats(*row) for row in rows])


JOBS = """SELECT job_id, status::text, priority, run_at, attempts, max_attempts, worker,
                 lease_expires_at, last_error::text, created_at, finished_at, queue, group_key,
                 dedupe_key
            FROM leaseq.queue_jobs(queue => %(queue)s::text,
                                   status => %(status)s::text::leaseq.job_status,
                                   max_rows => %(max_rows)s::int, group_key => %(group_key)s::text,
                                   dedupe_key => %(dedupe_key)s::text, worker => %(worker)s::text,
                                   created_after => %(created_after)s::timestamptz,
                                   created_before => %(created_before)s::timestamptz,
                                   payload_contains => %(payload_contains)s::jsonb,
                                   before_id => %(before_id)s::bigint,
                                   after_id => %(after_id)s::bigint)"""


def jobs(
    queue: str | None,
    status: JobStatus | None,
    max_rows: int,
    *,
    group_key: str | None = None,
    dedupe_key: str | None = None,
    worker: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    payload_contains: Any = None,
    before_id: int | None = None,
    after_id: int | None = None,
) -> Call[list[JobSummary]]:
    return Call(
        JOBS,
        {
            "queue": queue,
            "status": None if status is None else status.value,
            "max_rows": max_rows,
            "group_key": group_key,
            "dedupe_key": dedupe_key,
            "worker": worker,
            "created_after": created_after,
            "created_before": created_before,
            "payload_contains": None if payload_contains is None else document(payload_contains),
            "before_id": before_id,
            "after_id": after_id,
        },
        lambda rows: [JobSummary(r[0], JobStatus(r[1]), *r[2:]) for r in rows],
    )


JOB_COLUMNS = """job_id, queue, status::text, priority, run_at, attempts, max_attempts, worker,
                 lease_expires_at, dedupe_key, payload::text, result::text, last_error::text,
                 created_at, updated_at, finished_at, snoozes, group_key"""
JOB = f"""SELECT {JOB_COLUMNS}, progress::text, progress_at
            FROM leaseq.queue_job(job_id => %(job_id)s::bigint)"""
JOB_BEFORE_PROGRESS = f"SELECT {JOB_COLUMNS} FROM leaseq.queue_job(job_id => %(job_id)s::bigint)"


def _job_detail(row: Row) -> JobDetail:
    return JobDetail(row[0], row[1], JobStatus(row[2]), *row[3:])


def job(job_id: int) -> Call[JobDetail]:
    return Call(JOB, {"job_id": job_id}, lambda rows: _job_detail(rows[0]))


def job_before_progress(job_id: int) -> Call[JobDetail]:
    """`job` on a database not yet updated to 0.3.0, whose `queue_job` has no progress columns
    (`job` fails there with 42703, undefined column): progress and progress_at None, as its jobs
    can report none."""
    return Call(
        JOB_BEFORE_PROGRESS, {"job_id": job_id}, lambda rows: _job_detail((*rows[0], None, None))
    )


ATTEMPTS = """SELECT attempt_no, worker, started_at, ended_at, outcome::text, error::text
                FROM leaseq.queue_attempts(job_id => %(job_id)s::bigint)"""


def attempts(job_id: int) -> Call[list[Attempt]]:
    return Call(
        ATTEMPTS,
        {"job_id": job_id},
        lambda rows: [Attempt(r[0], r[1], r[2], r[3], AttemptOutcome(r[4]), r[5]) for r in rows],
    )


#: A procedure, not a function: it commits between its looks at the jobs, so it runs only as a
#: statement of its own in autocommit (in a transaction block the server refuses it, 25001).
AWAIT = "CALL leaseq.queue_await(job_ids => %(job_ids)s::bigint[], timeout => %(timeout)s::interval)"


def await_jobs(job_ids: Sequence[int], timeout: timedelta) -> Call[Awaited]:
    return Call(
        AWAIT,
        {"job_ids": list(job_ids), "timeout": timeout},
        lambda rows: Awaited(rows[0][0], list(rows[0][1])),
    )


RESULT = "SELECT leaseq.queue_result(job_id => %(job_id)s::bigint)::text"


def result(job_id: int) -> Call[str | None]:
    return Call(RESULT, {"job_id": job_id}, _one)


PARENTS = """SELECT parent_id, queue, status::text, result::text
               FROM leaseq.queue_parents(job_id => %(job_id)s::bigint)"""


def parents(job_id: int) -> Call[list[Parent]]:
    return Call(
        PARENTS,
        {"job_id": job_id},
        lambda rows: [Parent(r[0], r[1], _status(r[2]), r[3]) for r in rows],
    )


FLOW = """SELECT key, job_id
            FROM leaseq.queue_flow(jobs => %(jobs)s::jsonb)
                 WITH ORDINALITY AS answer (key, job_id, position)
           ORDER BY position"""
FLOW_TRACED = """SELECT key, job_id
                   FROM leaseq.queue_flow(jobs => %(jobs)s::jsonb,
                                          trace_context => %(trace_context)s::text)
                        WITH ORDINALITY AS answer (key, job_id, position)
                  ORDER BY position"""


def _node_fields(node: FlowNode | Mapping[str, Any]) -> Mapping[str, Any]:
    """A node's fields as `queue_flow` reads them: a dict as given (the server names a field it
    does not know), a `FlowNode` without the fields left None (the server's defaults)."""
    if not isinstance(node, FlowNode):
        return node
    fields: dict[str, Any] = {
        "key": node.key,
        "queue": node.queue,
        "payload": node.payload,
        "depends_on": list(node.depends_on),
    }
    optional = {
        "on_parent_failure": node.on_parent_failure,
        "priority": node.priority,
        "max_attempts": node.max_attempts,
    }
    fields.update((name, value) for name, value in optional.items() if value is not None)
    return fields


def _flow_document(nodes: Sequence[FlowNode | Mapping[str, Any]]) -> str:
    """The flow's JSON text, each payload spliced in as `document` writes it (so `Json` text
    reaches the server as it is, every digit kept) rather than re-serialised with the rest.

    A `Json` text is spliced only when it is exactly one JSON value: `{}, "queue": "billing"`
    would add members to its node, and jsonb keeps a repeated key's last value, so the job
    would go to another queue or lose its edges."""

    def payload(value: Any) -> str:
        if isinstance(value, Json):
            try:
                # Numbers stay text: validating must not go through floats nor Python's cap on
                # an int's digits.
                json.loads(value.text, parse_int=str, parse_float=str)
            except ValueError as error:
                raise ValueError(
                    f"a flow payload's Json text must be exactly one JSON value: {error}"
                ) from None
        return document(value)

    def member(name: str, value: Any) -> str:
        return f"{json.dumps(name)}: {payload(value) if name == 'payload' else json.dumps(value)}"

    objects = (", ".join(member(n, v) for n, v in _node_fields(node).items()) for node in nodes)
    return "[" + ", ".join("{" + fields + "}" for fields in objects) + "]"


def flow(
    nodes: Sequence[FlowNode | Mapping[str, Any]], trace_context: str | None = None
) -> Call[dict[str, int]]:
    call = Call(FLOW, {"jobs": _flow_document(nodes)}, lambda rows: {k: j for k, j in rows})
    return _traced(call, FLOW_TRACED, {}, trace_context)


FLOW_STATUS = """SELECT jobs, blocked, pending, running, succeeded, dead, cancelled, finished
                   FROM leaseq.queue_flow_status(root => %(root)s::bigint)"""


def flow_status(root: int) -> Call[FlowStatus]:
    return Call(FLOW_STATUS, {"root": root}, lambda rows: FlowStatus(*rows[0]))


GRANT = """SELECT leaseq.queue_grant(queue => %(queue)s::text, role => %(role)s::text::regrole,
                                      privilege => %(privilege)s::text)"""
REVOKE = """SELECT leaseq.queue_revoke(queue => %(queue)s::text, role => %(role)s::text::regrole,
                                        privilege => %(privilege)s::text)"""
GRANTS = """SELECT queue, role::text, privilege::text, granted_at FROM leaseq.queue_grants()"""
PRIVILEGES = "SELECT queue, produce, work, observe, admin FROM leaseq.queue_privileges()"


def grant(queue: str, role: str, privilege: QueuePrivilege) -> Call[bool]:
    return Call(GRANT, {"queue": queue, "role": role, "privilege": privilege.value}, _one)


def revoke(queue: str, role: str, privilege: QueuePrivilege) -> Call[bool]:
    return Call(REVOKE, {"queue": queue, "role": role, "privilege": privilege.value}, _one)


def grants() -> Call[list[QueueGrant]]:
    return Call(
        GRANTS, {}, lambda rows: [QueueGrant(r[0], r[1], QueuePrivilege(r[2]), r[3]) for r in rows]
    )


def privileges() -> Call[list[QueueAccess]]:
    return Call(PRIVILEGES, {}, lambda rows: [QueueAccess(*row) for row in rows])


SCHEDULE = """SELECT leaseq.queue_schedule(name => %(name)s::text, queue => %(queue)s::text,
                                            every => %(every)s::text, payload => %(payload)s::jsonb,
                                            timezone => %(timezone)s::text, catch_up => %(catch_up)s::boolean)"""
SCHEDULE_TRACED = """SELECT leaseq.queue_schedule(name => %(name)s::text, queue => %(queue)s::text,
                                                   every => %(every)s::text, payload => %(payload)s::jsonb,
                                                   timezone => %(timezone)s::text,
                                                   catch_up => %(catch_up)s::boolean,
                                                   trace_context => %(trace_context)s::text)"""
UNSCHEDULE = "SELECT leaseq.queue_unschedule(name => %(name)s::text)"
SCHEDULES = """SELECT name, queue, every, timezone, catch_up, payload::text, next_at, last_job_id
                 FROM leaseq.queue_schedules()"""


def schedule(
    name: str,
    queue: str,
    every: str,
    payload: Any,
    timezone: str,
    catch_up: bool,
    trace_context: str | None = None,
) -> Call[datetime]:
    call = Call(
        SCHEDULE,
        {
            "name": name,
            "queue": queue,
            "every": every,
            "payload": document(payload),
            "timezone": timezone,
            "catch_up": catch_up,
        },
        _one,
    )
    return _traced(call, SCHEDULE_TRACED, {}, trace_context)


def unschedule(name: str) -> Call[bool]:
    return Call(UNSCHEDULE, {"name": name}, _one)


def schedules() -> Call[list[Schedule]]:
    return Call(SCHEDULES, {}, lambda rows: [Schedule(*row) for row in rows])

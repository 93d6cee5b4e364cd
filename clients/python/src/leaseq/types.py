"""The rows the extension's functions return, as typed Python values."""

from __future__ import annotations

import enum
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID


class JobStatus(enum.Enum):
    """`leaseq.job_status`, in the SQL enum's order."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"
    WAITING = "waiting"
    #: Waiting for its parents (`depends_on`): `pending` once the last of them succeeded.
    BLOCKED = "blocked"


class AttemptOutcome(enum.Enum):
    """`leaseq.attempt_outcome`, in the SQL enum's order."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LEASE_EXPIRED = "lease_expired"
    CANCELLED = "cancelled"
    SNOOZED = "snoozed"
    HANDED_BACK = "handed_back"


#: What a blocked job does when a parent goes dead or is cancelled: `cancel` (the default: it and
#: its own descendants are cancelled), `dead`, or `run` anyway once every parent is final (its
#: handler reads which of them failed with `parents`).
OnParentFailure = Literal["cancel", "dead", "run"]


class QueuePrivilege(enum.Enum):
    """`leaseq.queue_privilege`: `work` covers `produce`, `admin` covers all."""

    PRODUCE = "produce"
    WORK = "work"
    OBSERVE = "observe"
    ADMIN = "admin"


@dataclass(frozen=True)
class Json:
    """A JSON document given as its text, passed to the server as it is (a payload whose numbers
    must not go through Python floats). Any other value is serialised with `json.dumps`."""

    text: str


def document(value: Any) -> str:
    """The JSON text of a payload, result or error."""
    return value.text if isinstance(value, Json) else json.dumps(value)


#: Makes a `_Lost`'s condition, once.
_MAKING = threading.Lock()


class _Lost(threading.Event):
    """A `threading.Event` whose condition is made when first needed: a Worker makes one per job
    (2.4 µs each, 7 % of a prefetching Worker's whole job), and most are only asked `is_set()`,
    which reads the flag alone."""

    def __init__(self) -> None:
        self._flag = False
        self._made: threading.Condition | None = None

    @property
    def _cond(self) -> threading.Condition:
        made = self._made
        if made is None:
            with _MAKING:
                made = self._made
                if made is None:
                    made = self._made = threading.Condition(threading.Lock())
        return made


@dataclass(frozen=True)
class Job:
    """A claimed job: what a handler gets, and what its worker needs to renew and finish it."""

    id: int
    queue: str
    lease_token: UUID
    #: Strictly increasing per job for ever: the fencing generation to pass downstream.
    attempt: int
    #: The payload's JSON text, exactly as stored.
    payload_text: str
    priority: int
    lease_expires_at: datetime
    #: How long the lease had left when the server granted it (the server's clock).
    lease_seconds: float
    #: The job's key, `<id>-<the microsecond it was enqueued>`: unlike the id, no other job has
    #: it, even after a failover to an asynchronous standby that lost acknowledged jobs and then
    #: issued their ids again. Key idempotency downstream on it.
    key: str
    #: The W3C traceparent its producer enqueued it with (the current span's, with
    #: OpenTelemetry), or None: the Worker's span for the attempt is its child.
    trace_context: str | None = None
    #: Set when the lease is lost (expired, reclaimed, cancelled), the handler ran past the
    #: Worker's `timeout`, or the worker shut down past its grace: stop working on the job —
    #: whatever the handler returns then is not sent.
    lost: threading.Event = field(default_factory=_Lost, compare=False, repr=False)

    @property
    def payload(self) -> Any:
        """The payload, parsed (`payload_text` keeps every digit of its numbers)."""
        return json.loads(self.payload_text)


@dataclass(frozen=True)
class QueueStats:
    queue: str
    pending: int
    scheduled: int
    running: int
    expired_leases: int
    succeeded: int
    dead: int
    cancelled: int
    oldest_pending_age: timedelta | None
    most_snoozes: int
    waiting: int


@dataclass(frozen=True)
class JobSummary:
    """A row of `queue_jobs`: JSON documents as the server's text."""

    job_id: int
    status: JobStatus
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    worker: str | None
    lease_expires_at: datetime | None
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None
    queue: str
    group_key: str | None
    dedupe_key: str | None


@dataclass(frozen=True)
class JobDetail:
    """`queue_job`: the whole job; JSON documents as the server's text."""

    job_id: int
    queue: str
    status: JobStatus
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    worker: str | None
    lease_expires_at: datetime | None
    dedupe_key: str | None
    payload: str
    result: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    snoozes: int
    group_key: str | None
    #: What the running (or last) attempt last reported (`Client.progress`), as the server's
    #: JSON text; None until an attempt reported.
    progress: str | None
    #: When it reported it (the server's clock).
    progress_at: datetime | None


@dataclass(frozen=True)
class Awaited:
    """What `Client.await_jobs` saw last."""

    #: Every job is final (succeeded, dead or cancelled).
    all_final: bool
    #: The ids of the jobs not final yet, ascending; empty when all are.
    unfinished: list[int]


@dataclass(frozen=True)
class Attempt:
    attempt_no: int
    worker: str
    started_at: datetime
    ended_at: datetime | None
    outcome: AttemptOutcome
    error: str | None


@dataclass(frozen=True)
class QueueGrant:
    queue: str
    role: str
    privilege: QueuePrivilege
    granted_at: datetime


@dataclass(frozen=True)
class QueueAccess:
    """A row of `queue_privileges`: what the connecting role may do on a queue (its group roles
    and the queue's grants together)."""

    queue: str
    produce: bool
    work: bool
    observe: bool
    admin: bool


@dataclass(frozen=True)
class Schedule:
    name: str
    queue: str
    every: str
    timezone: str
    catch_up: bool
    payload: str
    next_at: datetime
    #: The job its last tick enqueued; None before its first tick.
    last_job_id: int | None


@dataclass(frozen=True)
class Parent:
    """A row of `queue_parents`: a job the child waits (or waited) for."""

    parent_id: int
    #: None, as `status`: the parent was purged since (by its queue's retention, once final).
    queue: str | None
    status: JobStatus | None
    #: What the parent returned, as the server's JSON text; None until it succeeded.
    result: str | None


@dataclass(frozen=True)
class Step:
    """A row of `queue_steps`: a step a handler recorded (`queue_step`) under a job's lease."""

    name: str
    #: The attempt that recorded it (the first record of a name stands).
    attempt_no: int
    #: What the step recorded, as the server's JSON text; None when it recorded no output.
    output: str | None
    recorded_at: datetime


@dataclass(frozen=True)
class FlowNode:
    """One job of a flow (`Client.flow`): `key` names it within the flow, `depends_on` names the
    keys of its parents in the same flow. Fields left None take `queue_flow`'s defaults; a plain
    dict with the same fields is taken as well."""

    key: str
    queue: str
    #: Any JSON-serialisable value, or `Json(text)`; `{}` as the server's default.
    payload: Any = field(default_factory=dict)
    depends_on: Sequence[str] = ()
    on_parent_failure: OnParentFailure | None = None
    priority: int | None = None
    max_attempts: int | None = None


@dataclass(frozen=True)
class FlowStatus:
    """`queue_flow_status`: a job and every job that depends on it, directly or not, counted by
    status (`pending` counts jobs waiting for their group too; purged jobs are not counted)."""

    jobs: int
    blocked: int
    pending: int
    running: int
    succeeded: int
    dead: int
    cancelled: int
    #: Every job counted is final (succeeded, dead or cancelled): nothing more will run.
    finished: bool

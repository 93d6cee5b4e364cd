"""The rows the extension's functions return, as typed Python values."""

from __future__ import annotations

import enum
import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID


class JobStatus(enum.Enum):
    """`leaseq.job_status`, in the SQL enum's order."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"
    WAITING = "waiting"


class AttemptOutcome(enum.Enum):
    """`leaseq.attempt_outcome`, in the SQL enum's order."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LEASE_EXPIRED = "lease_expired"
    CANCELLED = "cancelled"
    SNOOZED = "snoozed"
    HANDED_BACK = "handed_back"


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
    #: Set when the lease is lost (expired, reclaimed, cancelled) or the worker shuts down past
    #: its grace: stop working on the job — whatever the handler returns then is not sent.
    lost: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

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

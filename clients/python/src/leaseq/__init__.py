"""leaseq for Python: the job queue inside PostgreSQL.

- `leaseq.enqueue(conn, queue, payload)` / `leaseq.enqueue_batch(...)` on your own psycopg
  connection: the job commits or rolls back with your rows (`leaseq.aio` has the asyncio twins);
  `leaseq.step(conn, job, name, output)` / `leaseq.run_step(...)`: durable steps, the same way;
  `leaseq.report_progress(client, job, progress)`: how far a handler got.
- `leaseq.Client(conninfo)` / `leaseq.aio.AsyncClient`: every other call of the extension, with
  typed rows and one exception per SQLSTATE the extension raises.
- `leaseq.Worker(conninfo, queue=..., handler=...)`: the worker loop — claims into free slots,
  one heartbeat, batched finishes, `Dead`/`Snooze`, transactional handlers.
"""

from .client import Client, enqueue, enqueue_batch, progress, report_progress, run_step, step
from .errors import (
    ConnectionFailed,
    DuplicateKey,
    ExtensionMissing,
    InternalError,
    InvalidArgument,
    LeaseLost,
    LeaseqError,
    NeedsOwnTransactions,
    NeedsReadCommitted,
    NeedsUpdate,
    NotFound,
    NullArgument,
    PayloadTooLarge,
    PermissionDenied,
)
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
)
from .worker import Dead, Retry, Snooze, Summary, Worker

__all__ = [
    "Attempt",
    "AttemptOutcome",
    "Awaited",
    "Client",
    "Dead",
    "ConnectionFailed",
    "DuplicateKey",
    "ExtensionMissing",
    "FlowNode",
    "FlowStatus",
    "InternalError",
    "InvalidArgument",
    "Job",
    "JobDetail",
    "JobStatus",
    "JobSummary",
    "Json",
    "LeaseLost",
    "LeaseqError",
    "NeedsOwnTransactions",
    "NeedsReadCommitted",
    "NeedsUpdate",
    "NotFound",
    "NullArgument",
    "OnParentFailure",
    "Parent",
    "PayloadTooLarge",
    "PermissionDenied",
    "QueueAccess",
    "QueueGrant",
    "QueuePrivilege",
    "QueueStats",
    "Schedule",
    "Snooze",
    "Step",
    "Retry",
    "Summary",
    "Worker",
    "enqueue",
    "enqueue_batch",
    "progress",
    "report_progress",
    "run_step",
    "step",
]

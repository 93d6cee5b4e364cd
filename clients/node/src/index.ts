// leaseq for Node: the job queue inside PostgreSQL.
//
// - `enqueue(clientOrPool, queue, payload)` / `enqueueBatch(...)` on your own pg client or pool:
//   inside your transaction, the job commits or rolls back with your rows.
// - `Client`: every other call of the extension, with typed rows and one error class per
//   SQLSTATE the extension raises.
// - `step(clientOrPool, job, name, output)`: a durable step recorded in your transaction;
//   `progress(clientOrPool, job, value)`: a progress report under the lease.
// - `awaitJobs(connection, ids, timeoutMs)` / `client.awaitJobs(ids, timeoutMs)`: waits until
//   jobs are final, on a connection of its own.
// - `Worker`: the worker loop, with AbortSignals on lease loss, transactional handlers,
//   `context.step(name, fn)`, a step a retry skips, and `context.progress(value)`.

export {
  Client,
  awaitJobs,
  enqueue,
  enqueueBatch,
  progress,
  run,
  step,
  withoutPreparedStatements,
} from "./client.js";
export type { ClientOptions, Queryable } from "./client.js";
export {
  ATTEMPT_OUTCOMES,
  JOB_STATUSES,
  Json,
  PARENT_FAILURES,
  QUEUE_DEFAULTS,
  QUEUE_PRIVILEGES,
} from "./calls.js";
export type {
  Attempt,
  AttemptOutcome,
  Awaited,
  EnqueueBatchOptions,
  EnqueueOptions,
  FlowNode,
  FlowStatus,
  Job,
  JobDetail,
  JobStatus,
  JobSummary,
  JobsOptions,
  Parent,
  ParentFailure,
  QueueAccess,
  QueueGrant,
  QueuePrivilege,
  QueueSettings,
  QueueStats,
  Schedule,
  Step,
} from "./calls.js";
export {
  ConnectionFailed,
  DuplicateKey,
  ExtensionMissing,
  InternalError,
  InvalidArgument,
  LeaseqError,
  NeedsOwnTransactions,
  NeedsReadCommitted,
  NeedsUpdate,
  NotFound,
  NullArgument,
  PayloadTooLarge,
  PermissionDenied,
  sqlstateOf,
} from "./errors.js";
export { Dead, Retry, Snooze, TimedOut, Worker, errorDocument } from "./worker.js";
// The constants the three Workers share (clients/api.toml, `[worker]`); durations in milliseconds.
export {
  FIRST_CLAIM_WAIT,
  MIN_FINISH_WAIT,
  POISON_CLASSES,
  REFUSED_CLASSES,
  STOP_MARGIN_CAP,
  STOP_MARGIN_FRACTION,
} from "./worker.js";
export type {
  Handler,
  HandlerContext,
  Logger,
  Summary,
  WorkerEvents,
  WorkerMetrics,
  WorkerOptions,
} from "./worker.js";

// Every refusal of the extension as its own error class, carrying the server's message; the
// pg error stays attached as `cause`.

/** A call the server refused: its SQLSTATE, message and hint, as the server said them. */
export class LeaseqError extends Error {
  readonly sqlstate: string | undefined;
  readonly hint: string | undefined;
  readonly serverMessage: string;

  constructor(message: string, sqlstate?: string, hint?: string, options?: { cause?: unknown }) {
    const said = sqlstate ? `${message} (SQLSTATE ${sqlstate})` : message;
    super(hint ? `${said}; ${hint}` : said, options);
    this.name = new.target.name;
    this.serverMessage = message;
    this.sqlstate = sqlstate;
    this.hint = hint;
  }
}

/** 22004: a required argument was NULL. */
export class NullArgument extends LeaseqError {}
/** 22023: an argument outside its allowed range; the message names the argument and range. */
export class InvalidArgument extends LeaseqError {}
/** 42704: an unknown queue, job id or role. */
export class NotFound extends LeaseqError {}
/** 42501: the role may not call the function, or the queue's grants do not cover the call. */
export class PermissionDenied extends LeaseqError {}
/** 54000: a payload, result or error larger than `leaseq.max_payload_bytes`. */
export class PayloadTooLarge extends LeaseqError {}
/** 0A000: a lease operation inside a REPEATABLE READ or SERIALIZABLE transaction. */
export class NeedsReadCommitted extends LeaseqError {}
/** 25001: `queue_await` called inside a transaction block (or from a function): it commits
 * between its looks, so it must be called on its own, in autocommit. */
export class NeedsOwnTransactions extends LeaseqError {}
/** 23505: a redriven job's dedupe key is held by another live job. */
export class DuplicateKey extends LeaseqError {}
/** 55000: the database runs a release of leaseq the installed library does not serve. */
export class NeedsUpdate extends LeaseqError {}
/** XX000: an invariant of leaseq's own tables did not hold (a bug: please report it). */
export class InternalError extends LeaseqError {}
/** 3F000: the database has no schema `leaseq`: the extension is not installed there. */
export class ExtensionMissing extends LeaseqError {}
/** The database could not be reached: where it was tried, and why. */
export class ConnectionFailed extends LeaseqError {}

const BY_SQLSTATE: Record<string, typeof LeaseqError> = {
  "22004": NullArgument,
  "22023": InvalidArgument,
  "42704": NotFound,
  "42501": PermissionDenied,
  "54000": PayloadTooLarge,
  "0A000": NeedsReadCommitted,
  "25001": NeedsOwnTransactions,
  "23505": DuplicateKey,
  "55000": NeedsUpdate,
  XX000: InternalError,
  "3F000": ExtensionMissing,
};

const INSTALL_HINT =
  "leaseq is not installed in this database: run CREATE EXTENSION leaseq in it (as a superuser)";

interface PgError {
  code?: string;
  message: string;
  hint?: string;
  severity?: string;
  address?: string;
  port?: number;
}

function isPgError(e: unknown): e is PgError {
  return typeof e === "object" && e !== null && "message" in e;
}

/** Whether `e` came from the server (it has a SQLSTATE and a severity), not the socket. */
function fromServer(e: PgError): boolean {
  return typeof e.code === "string" && e.code.length === 5 && typeof e.severity === "string";
}

/** The leaseq error for `e` when it is one of leaseq's refusals; `e` itself otherwise — a
 * serialization failure, a deadlock, a statement timeout, a lost connection reach the caller as
 * pg raised them, for its retry loop to recognise (`e.code`). */
export function translate(e: unknown): unknown {
  if (!isPgError(e) || !fromServer(e)) {
    return e;
  }
  const code = e.code as string;
  const Class = BY_SQLSTATE[code];
  if (Class === undefined) {
    return e;
  }
  let hint = e.hint;
  if (code === "3F000" && e.message.includes('"leaseq"')) {
    hint = INSTALL_HINT;
  }
  return new Class(e.message, code, hint, { cause: e });
}

/** The SQLSTATE of a server's error, translated or not; undefined for any other error. */
export function sqlstateOf(e: unknown): string | undefined {
  if (e instanceof LeaseqError) return e.sqlstate;
  return isPgError(e) && fromServer(e) ? e.code : undefined;
}

/** Runs `f`, leaseq's refusals surfacing as leaseq errors. */
export async function translated<T>(f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    throw translate(e);
  }
}

/** Where `config` connects, for messages: `host:port/database as user`. */
export function target(config: {
  host?: string | undefined;
  port?: number | undefined;
  database?: string | undefined;
  user?: string | undefined;
}): string {
  const where = `${config.host ?? "localhost"}:${config.port ?? 5432}`;
  const db = config.database ? `/${config.database}` : "";
  return `${where}${db} as ${config.user ?? "the default user"}`;
}

/** A failed connection, named with its target and its cause (refused, timed out, an unknown
 * database or role, authentication). */
export function connectionFailed(where: string, e: unknown, secrets: string[] = []): ConnectionFailed {
  const masked = (text: string) => secrets.reduce((t, secret) => t.split(secret).join("***"), text);
  const said = e instanceof Error ? e.message : String(e);
  // The cause is kept as it came unless it quotes a secret: then only its masked message.
  const cause = masked(said) === said ? e : new Error(masked(said));
  if (isPgError(e) && fromServer(e)) {
    return new ConnectionFailed(masked(`cannot connect to ${where}: ${said}`), e.code, e.hint, {
      cause,
    });
  }
  return new ConnectionFailed(masked(`cannot connect to ${where}: ${said}`), undefined, undefined, {
    cause,
  });
}

//! Runs any program as a job handler: the payload on stdin, the job in the environment, and the
//! exit code as the outcome.
//!
//! | exit | outcome |
//! |---|---|
//! | 0 | `queue_complete`, with stdout as the result when it is JSON |
//! | 65 (EX_DATAERR) | `queue_fail(retry => false)`: straight to dead |
//! | 75 (EX_TEMPFAIL), any other code, killed by a signal | `queue_fail`: retried per the queue's policy |
//!
//! A failure's error is `{"exit_code": …, "signal": …, "stderr": "<last lines>"}`.
//!
//! The program gets the worker's environment but for the secrets the `leaseq` binary reads
//! (`WITHHELD_ENV`: the database URL, password and all, and the console's and the metrics'
//! credentials), unless `leaseq work --pass-env NAME` gives one back: a program a hostile payload
//! takes over then holds no database credentials of the worker's.
//! When the job's lease is lost (or the shutdown grace runs out) the program's process group gets
//! SIGTERM, then SIGKILL after `kill_grace`: the program runs in a group of its own, so the
//! processes it started stop with it. It also dies with its worker (`PR_SET_PDEATHSIG`), so a
//! worker killed with SIGKILL leaves no program running on a job that will be reclaimed (its own
//! children should exit with it, or be `exec`ed).
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use leaseq_client::{CancellationToken, Job, Outcome};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// EX_DATAERR: the input is wrong; retrying cannot help.
pub const EXIT_PERMANENT: i32 = 65;
/// The exit status that snoozes the job: not ready yet, back after the duration on the last line
/// of stdout (`30s`, `5m`), or `DEFAULT_SNOOZE`, its attempt budget kept.
pub const EXIT_SNOOZE: i32 = 76;
pub const DEFAULT_SNOOZE: Duration = Duration::from_secs(60);
/// The largest stdout kept as a result (the extension's own limit applies too).
const MAX_STDOUT: usize = 1 << 20;
/// How much of stderr's end goes into a failure's error.
const STDERR_TAIL_LINES: usize = 20;
const STDERR_TAIL_BYTES: usize = 4096;

/// The variables holding secrets of the `leaseq` binary's own, removed from the program's
/// environment.
pub const WITHHELD_ENV: [&str; 3] = ["DATABASE_URL", "LEASEQ_UI_AUTH", "LEASEQ_METRICS_AUTH"];

#[derive(Clone, Debug)]
pub struct CommandHandler {
    pub program: String,
    pub args: Vec<String>,
    /// Between SIGTERM and SIGKILL when the program must stop.
    pub kill_grace: Duration,
    /// Names of `WITHHELD_ENV` the program gets all the same (`--pass-env`).
    pub pass_env: Vec<String>,
    /// How long the program may run (`--timeout`): past it, it is stopped as at a lost lease and
    /// the job fails with `{"error": "timeout"}`, retried by the queue's policy.
    pub timeout: Option<Duration>,
}

impl CommandHandler {
    pub async fn run(&self, job: Job, stop: CancellationToken) -> Outcome {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .env("LEASEQ_JOB_ID", job.id.to_string())
            .env("LEASEQ_JOB_KEY", &job.key)
            .env("LEASEQ_ATTEMPT", job.attempt_no.to_string())
            .env("LEASEQ_QUEUE", &job.queue)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for name in WITHHELD_ENV {
            if !self.pass_env.iter().any(|passed| passed == name) {
                command.env_remove(name);
            }
        }
        // SAFETY: setpgid and prctl are async-signal-safe and change only the child's own state.
        unsafe {
            command.pre_exec(|| {
                if libc::setpgid(0, 0) != 0
                    || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                return failure(
                    serde_json::json!({"error": format!("could not start {}: {e}", self.program)}),
                    true,
                );
            }
        };
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let payload = job.payload.clone();
        let feed = tokio::spawn(async move {
            // A program that does not read its input closes the pipe: not an error of ours.
            let _ = stdin.write_all(payload.as_bytes()).await;
        });
        let stdout = tokio::spawn(read_capped(
            child.stdout.take().expect("stdout is piped"),
            MAX_STDOUT,
        ));
        let stderr = tokio::spawn(read_capped(
            child.stderr.take().expect("stderr is piped"),
            usize::MAX,
        ));

        let ran_out = async {
            match self.timeout {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        let (status, timed_out) = tokio::select! {
            status = child.wait() => (status, None),
            _ = stop.cancelled() => (self.stop(&mut child).await, None),
            _ = ran_out => (self.stop(&mut child).await, self.timeout),
        };
        feed.abort();
        // A process the program left behind may hold its pipes open: don't wait for it.
        let collect = Duration::from_secs(1);
        let stdout = tokio::time::timeout(collect, stdout)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let stderr = tokio::time::timeout(collect, stderr)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        if let Some(limit) = timed_out {
            let error = serde_json::json!({
                "error": "timeout",
                "message": format!("the program ran past its timeout of {:.3} s", limit.as_secs_f64()),
                "signal": status.as_ref().ok().and_then(|s| s.signal()),
                "stderr": tail(&stderr),
            });
            return failure(error, true);
        }
        let status = match status {
            Ok(status) => status,
            Err(e) => {
                return failure(
                    serde_json::json!({"error": format!("waiting for the program: {e}")}),
                    true,
                );
            }
        };

        match status.code() {
            Some(0) => {
                let text = String::from_utf8_lossy(&stdout);
                let text = text.trim();
                let is_json =
                    !text.is_empty() && serde_json::from_str::<serde_json::Value>(text).is_ok();
                Outcome::Complete {
                    result: is_json.then(|| text.to_string()),
                }
            }
            Some(EXIT_SNOOZE) => {
                let text = String::from_utf8_lossy(&stdout);
                let last = text.lines().rev().find(|l| !l.trim().is_empty());
                Outcome::Snooze {
                    delay: last
                        .and_then(|l| parse_duration(l).ok())
                        .unwrap_or(DEFAULT_SNOOZE),
                }
            }
            code => {
                let error = serde_json::json!({
                    "exit_code": code,
                    "signal": status.signal(),
                    "stderr": tail(&stderr),
                });
                failure(error, code != Some(EXIT_PERMANENT))
            }
        }
    }
}

impl CommandHandler {
    /// Stops the program's process group: SIGTERM, SIGKILL after `kill_grace`, then SIGKILL again
    /// for whatever the program started.
    async fn stop(&self, child: &mut tokio::process::Child) -> std::io::Result<ExitStatus> {
        let group = child.id().map(|pid| pid as i32);
        signal_group(group, libc::SIGTERM);
        let status = match tokio::time::timeout(self.kill_grace, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                signal_group(group, libc::SIGKILL);
                child.wait().await
            }
        };
        signal_group(group, libc::SIGKILL);
        status
    }
}

/// Signals the process group the program leads (`None`: it already exited and was reaped).
fn signal_group(group: Option<i32>, signal: i32) {
    if let Some(pgid) = group {
        // SAFETY: kill(2) on the group our own child created with setpgid(0, 0).
        unsafe { libc::kill(-pgid, signal) };
    }
}

fn failure(error: serde_json::Value, retry: bool) -> Outcome {
    Outcome::Fail {
        error: Some(error.to_string()),
        retry,
        retry_in: None,
    }
}

/// Reads a pipe to its end, keeping at most `cap` bytes (the rest is drained, so the program
/// never blocks on a full pipe).
async fn read_capped(mut pipe: impl AsyncRead + Unpin, cap: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = cap.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
        if cap == usize::MAX && kept.len() > 4 * STDERR_TAIL_BYTES {
            // Only the tail of stderr is reported: keep memory bounded.
            kept.drain(..kept.len() - STDERR_TAIL_BYTES);
        }
    }
    kept
}

/// The last lines of stderr, at most `STDERR_TAIL_LINES` lines and about 4 KiB.
fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let mut tail = lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..].join("\n");
    if tail.len() > STDERR_TAIL_BYTES {
        let mut cut = tail.len() - STDERR_TAIL_BYTES;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail = tail[cut..].to_string();
    }
    tail
}

/// `500ms`, `30s`, `5m`, `2h`, `1d`, or plain seconds (`2.5`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 30s or 500ms"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        other => {
            return Err(format!(
                "unknown duration unit {other:?}: use ms, s, m, h or d"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_take_common_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("5 fortnights").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    use super::tail;

    #[test]
    fn the_error_keeps_only_the_last_lines_of_stderr() {
        let stderr: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let t = tail(stderr.as_bytes());
        assert!(t.starts_with("line 11\n") && t.ends_with("line 30"), "{t}");
    }

    #[test]
    fn the_error_keeps_at_most_4_kib_of_one_long_line() {
        let t = tail("é".repeat(10_000).as_bytes());
        assert!(t.len() <= 4096 && t.chars().all(|c| c == 'é'));
    }
}

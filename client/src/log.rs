//! One line per job transition, on stderr: `claimed`, `renewed`, `completed`, `failed`,
//! `lease_lost`, `abandoned` (and the worker's own `started`, `draining`, `stopped`, `db_error`).
//! Each names the queue, job, attempt and worker — never the payload, which may hold secrets.
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug)]
pub struct Log {
    pub json: bool,
    pub queue: String,
    pub worker: String,
    /// Only trouble: `lease_lost`, `abandoned`, `db_error`, `refused`.
    pub quiet: bool,
}

/// The routine events that `quiet` leaves out.
const ROUTINE: [&str; 8] = [
    "started",
    "claimed",
    "renewed",
    "completed",
    "failed",
    "finished",
    "draining",
    "stopped",
];

impl Log {
    /// `fields` are extra `key=value` pairs (values are logged as strings).
    /// Whether `event` is logged (callers skip formatting the fields of one that is not).
    pub fn wants(&self, event: &str) -> bool {
        !(self.quiet && ROUTINE.contains(&event))
    }

    pub fn event(&self, event: &str, job: Option<(i64, i32)>, fields: &[(&str, String)]) {
        if !self.wants(event) {
            return;
        }
        let line = if self.json {
            let mut doc = serde_json::Map::new();
            doc.insert("ts".into(), now_rfc3339().into());
            doc.insert("event".into(), event.into());
            doc.insert("queue".into(), self.queue.clone().into());
            if let Some((id, attempt)) = job {
                doc.insert("job_id".into(), id.into());
                doc.insert("attempt".into(), attempt.into());
            }
            doc.insert("worker".into(), self.worker.clone().into());
            for (k, v) in fields {
                doc.insert((*k).into(), v.clone().into());
            }
            serde_json::Value::Object(doc).to_string()
        } else {
            let mut line = format!(
                "{} {event:<10} queue={}",
                now_rfc3339(),
                text_value(&self.queue)
            );
            if let Some((id, attempt)) = job {
                line.push_str(&format!(" job={id} attempt={attempt}"));
            }
            line.push_str(&format!(" worker={}", text_value(&self.worker)));
            for (k, v) in fields {
                line.push_str(&format!(" {k}={}", text_value(v)));
            }
            line
        };
        eprintln!("{line}");
    }
}

/// A value of a text-mode line: as it is when it is one plain word, else quoted with Rust's
/// escapes — so that a space, a quote, a newline or a terminal escape in a worker name, a queue
/// name or a server's message can neither split the line nor forge another.
fn text_value(value: &str) -> std::borrow::Cow<'_, str> {
    let plain = !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\');
    if plain {
        value.into()
    } else {
        format!("{value:?}").into()
    }
}

/// UTC now as `2026-11-29T07:45:01.123Z` (the worker host's clock: for reading logs only;
/// leases never use it).
pub fn now_rfc3339() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let (secs, millis) = (now.as_secs() as i64, now.subsec_millis());
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::{civil_from_days, text_value};

    #[test]
    fn text_values_with_spaces_quotes_or_control_characters_are_escaped() {
        assert_eq!(text_value("w-1"), "w-1");
        assert_eq!(text_value(""), "\"\"");
        assert_eq!(text_value("a b"), "\"a b\"");
        assert_eq!(
            text_value("w\n2026-11-29T07:45:01.123Z completed"),
            "\"w\\n2026-11-29T07:45:01.123Z completed\""
        );
        assert_eq!(text_value("x\u{1b}[2J"), "\"x\\u{1b}[2J\"");
        assert_eq!(text_value("say\"hi\""), "\"say\\\"hi\\\"\"");
    }

    #[test]
    fn civil_dates_match_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}

//! The page frame (head, nav, flash and error boxes), the compiled-in assets, and the small
//! formatting helpers every page shares. maud escapes every interpolated value.
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};

use super::app::UiError;
use super::auth::{CSRF_FIELD, Session};
use super::pages::Privileges;

pub const CSS: &str = include_str!("assets/leaseq.css");
pub const JS: &str = include_str!("assets/leaseq.js");

/// FNV-1a of the assets, in their URLs: a new build's assets are new URLs, so they can be cached
/// for ever.
pub const ASSET_VERSION: u64 = fnv1a(CSS.as_bytes()) ^ fnv1a(JS.as_bytes()).rotate_left(1);

const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

pub fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        body,
    )
        .into_response()
}

/// Which nav entry is current.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Jobs,
    Enqueue,
    Schedules,
    Groups,
    Workers,
    Queues,
    None,
}

/// A whole page: frame, nav (the enqueue entry only for a role that may produce somewhere),
/// the flash left by the last action, and `body`; with the session's cookies.
pub fn page(
    session: &Session,
    privileges: &Privileges,
    title: &str,
    nav: Nav,
    body: Markup,
) -> Response {
    let markup = frame(
        title,
        nav,
        privileges.any_produce(),
        session.flash.as_deref(),
        body,
    );
    let mut response = markup.into_response();
    for cookie in session.cookies() {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

fn frame(title: &str, nav: Nav, can_enqueue: bool, flash: Option<&str>, body: Markup) -> Markup {
    let entry = |which: Nav, href: &str, label: &str| {
        html! {
            a href=(href) class=[(nav == which).then_some("current")] data-testid={"nav-" (label.to_lowercase())} { (label) }
        }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · leaseq" }
                link rel="stylesheet" href={"/assets/leaseq.css?v=" (format!("{ASSET_VERSION:x}"))};
                script src={"/assets/leaseq.js?v=" (format!("{ASSET_VERSION:x}"))} defer {}
            }
            body {
                header {
                    a.brand href="/" { "leaseq" }
                    nav {
                        (entry(Nav::Overview, "/", "Overview"))
                        (entry(Nav::Jobs, "/jobs", "Jobs"))
                        @if can_enqueue { (entry(Nav::Enqueue, "/enqueue", "Enqueue")) }
                        (entry(Nav::Schedules, "/schedules", "Schedules"))
                        (entry(Nav::Groups, "/groups", "Groups"))
                        (entry(Nav::Workers, "/workers", "Workers"))
                    }
                }
                main {
                    @if let Some(message) = flash {
                        p.flash data-testid="flash" role="status" { (message) }
                    }
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// A refusal or failure, with the database's message and SQLSTATE as it said them.
pub fn error_page(status: StatusCode, message: &str, hint: Option<&str>) -> Markup {
    let body = html! {
        p.error data-testid="error" role="alert" { (message) }
        @if let Some(hint) = hint { p.hint data-testid="error-hint" { "Hint: " (hint) } }
        p { a href="javascript:history.back()" { "← Back" } " · " a href="/" { "Overview" } }
    };
    frame(
        &format!(
            "{} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        ),
        Nav::None,
        false,
        None,
        body,
    )
}

/// A failed request answers with its status and the error page; the server's own failures are
/// also logged on stderr.
impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            eprintln!("leaseq ui: {}", self.message());
        }
        (status, error_page(status, &self.message(), self.hint())).into_response()
    }
}

/// The hidden CSRF field of every POST form.
pub fn csrf(session: &Session) -> Markup {
    html! { input type="hidden" name=(CSRF_FIELD) value=(session.csrf); }
}

/// A one-button POST form (with CSRF field and optional extra hidden fields).
pub fn button(
    session: &Session,
    action: &str,
    label: &str,
    testid: &str,
    class: &str,
    hidden: &[(&str, &str)],
) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            (csrf(session))
            @for (name, value) in hidden { input type="hidden" name=(name) value=(value); }
            button type="submit" class=(class) data-testid=(testid) id=(testid) { (label) }
        }
    }
}

/// Server-side confirmation of a destructive action: the same POST again with `confirm=yes`,
/// so that it works without JavaScript.
pub fn confirm_page(
    session: &Session,
    privileges: &Privileges,
    action: &str,
    what: &str,
    fields: &[(String, String)],
) -> Response {
    let body = html! {
        p.warning data-testid="confirm-question" { (what) }
        form method="post" action=(action) data-testid="confirm-form" {
            (csrf(session))
            @for (name, value) in fields {
                @if name != CSRF_FIELD && name != "confirm" {
                    input type="hidden" name=(name) value=(value);
                }
            }
            input type="hidden" name="confirm" value="yes";
            button type="submit" class="danger" id="confirm" data-testid="confirm" { "Yes, do it" }
            " "
            a href="javascript:history.back()" data-testid="confirm-cancel" { "No, go back" }
        }
    };
    page(session, privileges, "Confirm", Nav::None, body)
}

/// 303 to `to`, leaving `message` for the next page.
pub fn redirect(to: &str, message: &str) -> Response {
    let mut response = (
        StatusCode::SEE_OTHER,
        [(
            header::LOCATION,
            HeaderValue::from_str(to).unwrap_or(HeaderValue::from_static("/")),
        )],
    )
        .into_response();
    response
        .headers_mut()
        .append(header::SET_COOKIE, super::auth::flash_cookie(message));
    response
}

pub fn time(t: Option<DateTime<Utc>>) -> Markup {
    match t {
        Some(t) => html! { time datetime=(t.to_rfc3339()) { (t.format("%Y-%m-%d %H:%M:%S")) } },
        None => html! { span.none { "—" } },
    }
}

/// Seconds as the largest two units (`3m 05s`, `2h 10m`).
pub fn age(seconds: Option<f64>) -> String {
    let Some(s) = seconds else {
        return "—".into();
    };
    let s = s.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// A JSON document as the server pretty-printed it, or the mask of `--hide-payloads`.
pub fn json_block(text: Option<&str>, hidden: bool, testid: &str) -> Markup {
    match (text, hidden) {
        (_, true) => html! { p.masked data-testid=(testid) { "hidden (--hide-payloads)" } },
        (Some(text), false) => html! { pre.json data-testid=(testid) { (text) } },
        (None, false) => html! { p.none data-testid=(testid) { "—" } },
    }
}

/// `text` percent-encoded for a URL's path segment or query value (every byte but the
/// unreserved ones), so a name with `&`, `/` or spaces stays one value.
pub fn enc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_use_the_two_largest_units() {
        assert_eq!(age(None), "—");
        assert_eq!(age(Some(59.4)), "59s");
        assert_eq!(age(Some(185.0)), "3m 05s");
        assert_eq!(age(Some(7800.0)), "2h 10m");
        assert_eq!(age(Some(90000.0)), "1d 01h");
    }
}

//! Who may reach the console and how a POST proves it came from the console's own page.
//!
//! - The listen rule: loopback only, unless `--auth` guards the console.
//! - The host rule: every request's `Host` names the console — its listen address, `localhost`,
//!   `127.0.0.1`, `[::1]` or a name given with `--allowed-host` — or is answered 421 before
//!   anything else runs. A page of another site whose name was rebound to the console's address
//!   (DNS rebinding) sends its own name, so it reads nothing and posts nothing.
//! - `--auth basic:USER:PASSWORD | bearer:TOKEN`: checked on every request, as SHA-256 digests
//!   compared in constant time (so neither the secret's bytes nor its length show in the timing);
//!   a peer's wrong guesses are throttled; a malformed value is never echoed (`crate::credentials`,
//!   which `leaseq metrics` shares).
//! - CSRF (double submit): a random cookie (`SameSite=Strict`, `HttpOnly`) that every form
//!   repeats in a hidden field; a POST whose field and cookie differ is refused.
//! - Same origin: a POST's `Origin` (or, without one, its `Referer`) must name one of those hosts
//!   and be the very `Host` (port included) it was sent to.
//! - Every response refuses to be framed and, but for the assets, to be cached.
//! - `--role-header`: the operator's role, from a header a trusted proxy sets: only with
//!   `--trusted-proxy`, whose networks alone may then reach the console, and never a value that
//!   would reset the role to the console's own (`none`, `default`).
//!
//! Privileges are not here: the database decides them (see `db`).
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use subtle::ConstantTimeEq;

use super::app::{App, Hosts, UiError};
use super::form::Form;
use crate::credentials::Auth;

pub const CSRF_COOKIE: &str = "leaseq_csrf";
pub const FLASH_COOKIE: &str = "leaseq_flash";
/// The hidden field every POST form carries.
pub const CSRF_FIELD: &str = "csrf";

/// Middleware, before any other: the host rule.
pub async fn check_host(State(app): State<App>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if app.hosts.admit(host) {
        return next.run(request).await;
    }
    (
        StatusCode::MISDIRECTED_REQUEST,
        format!(
            "leaseq ui: this console answers to {} and names given with --allowed-host, \
             not to Host {host:?}\n",
            app.hosts.list()
        ),
    )
        .into_response()
}

/// `--trusted-proxy`: an address, or a network as `ADDR/BITS`.
pub fn trusted_proxy(text: &str) -> Result<ipnet::IpNet, String> {
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{text:?} is not an address or a network (ADDR or ADDR/BITS)"))
}

/// The role header's rule at start: it needs the proxies it comes from, and they need it.
pub fn check_role_header(
    role_header: Option<&str>,
    proxies: &[ipnet::IpNet],
) -> Result<(), String> {
    match (role_header, proxies.is_empty()) {
        (Some(name), true) => Err(format!(
            "--role-header {name} needs --trusted-proxy ADDR[/BITS]: the proxy that sets it; \
             anyone else who reaches the console could name any role its own may become"
        )),
        (None, false) => Err("--trusted-proxy is for --role-header: give both or neither".into()),
        _ => Ok(()),
    }
}

/// Middleware, with `--role-header`: only the trusted proxies reach the console (they are the
/// ones that strip a client's own copy of the header and set it).
pub async fn require_proxy(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let peer = peer.ip().to_canonical();
    if app.options.role_header.is_none()
        || app
            .options
            .trusted_proxies
            .iter()
            .any(|net| net.contains(&peer))
    {
        return next.run(request).await;
    }
    (
        StatusCode::FORBIDDEN,
        format!(
            "leaseq ui: {peer} is not a trusted proxy (--trusted-proxy): go through the proxy\n"
        ),
    )
        .into_response()
}

/// Middleware: no framing anywhere (clickjacking), no caching but for the assets (pages show
/// payloads), and no sniffing or cross-origin embedding of any response.
pub async fn harden(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// The listen rule: anyone who reaches the console acts as its database role, so an address
/// other hosts can reach needs `--auth`.
pub fn check_listen(address: SocketAddr, auth: Option<&Auth>) -> Result<(), String> {
    if address.ip().is_loopback() || auth.is_some() {
        return Ok(());
    }
    Err(format!(
        "refusing to listen on {address} without --auth: anyone who can reach it would act as \
         the console's database role. Pass --auth basic:USER:PASSWORD or --auth bearer:TOKEN \
         (or set LEASEQ_UI_AUTH), or listen on a loopback address such as 127.0.0.1:9188"
    ))
}

/// Middleware: `--auth`, when given, on every request.
pub async fn require_auth(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    match &app.options.auth {
        Some(auth) => match auth.check(peer.ip(), request.headers(), "leaseq ui") {
            Ok(()) => next.run(request).await,
            Err(refusal) => *refusal,
        },
        None => next.run(request).await,
    }
}

/// A visitor's CSRF token (from its cookie, or new) and the flash message left for it.
pub struct Session {
    pub csrf: String,
    /// The cookie had no token: the response sets it.
    pub new_token: bool,
    pub flash: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for Session {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Session, Self::Rejection> {
        let token = cookie(&parts.headers, CSRF_COOKIE).filter(|t| t.len() >= 32);
        let flash = cookie(&parts.headers, FLASH_COOKIE).map(|raw| {
            form_urlencoded::parse(format!("m={raw}").as_bytes())
                .next()
                .map(|(_, m)| m.into_owned())
                .unwrap_or_default()
        });
        Ok(Session {
            new_token: token.is_none(),
            csrf: token.unwrap_or_else(new_token),
            flash: flash.filter(|m| !m.is_empty()),
        })
    }
}

impl Session {
    /// The cookies this response must set: a new token, and the flash cleared once shown.
    pub fn cookies(&self) -> Vec<HeaderValue> {
        let mut cookies = Vec::new();
        if self.new_token {
            cookies.push(
                HeaderValue::from_str(&format!(
                    "{CSRF_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
                    self.csrf
                ))
                .expect("a base64url token is a valid header value"),
            );
        }
        if self.flash.is_some() {
            cookies.push(HeaderValue::from_static(
                "leaseq_flash=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict",
            ));
        }
        cookies
    }
}

/// A flash message for the next page, as a short-lived cookie (not a query parameter: a link
/// could then make the console say anything).
pub fn flash_cookie(message: &str) -> HeaderValue {
    let encoded: String = form_urlencoded::byte_serialize(message.as_bytes()).collect();
    HeaderValue::from_str(&format!(
        "{FLASH_COOKIE}={encoded}; Path=/; Max-Age=60; HttpOnly; SameSite=Strict"
    ))
    .expect("a percent-encoded message is a valid header value")
}

fn new_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}

/// A POST's two checks: same origin, then the CSRF token.
pub fn check_post(hosts: &Hosts, headers: &HeaderMap, form: &Form) -> Result<(), UiError> {
    check_origin(hosts, headers)?;
    let cookie = cookie(headers, CSRF_COOKIE).unwrap_or_default();
    let field = form.get(CSRF_FIELD).unwrap_or_default();
    if cookie.is_empty() || field.is_empty() {
        return Err(UiError::Forbidden(
            "CSRF token missing: reload the page and submit its form again".into(),
        ));
    }
    if !bool::from(cookie.as_bytes().ct_eq(field.as_bytes())) {
        return Err(UiError::Forbidden(
            "CSRF token mismatch: reload the page and submit its form again".into(),
        ));
    }
    Ok(())
}

fn check_origin(hosts: &Hosts, headers: &HeaderMap) -> Result<(), UiError> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| UiError::Forbidden("a POST without a Host header".into()))?;
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let (said, what) = match (text(header::ORIGIN), text(header::REFERER)) {
        (Some(origin), _) => (origin, "Origin"),
        (None, Some(referer)) => (referer, "Referer"),
        (None, None) => {
            return Err(UiError::Forbidden(
                "cross-origin check: a POST needs an Origin or Referer header".into(),
            ));
        }
    };
    // check_host admitted `host` already; the Origin must also be one of the console's names
    // in its own right, not merely the name the request was sent to.
    if same_origin(said, host) && hosts.admit(host) {
        Ok(())
    } else {
        Err(UiError::Forbidden(format!(
            "cross-origin POST refused: {what} {said:?} is not this console ({host})"
        )))
    }
}

/// Whether `url` (an Origin or a Referer) is `http(s)://host` exactly, with any path.
fn same_origin(url: &str, host: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority.eq_ignore_ascii_case(host)
}

/// The operator's role from `--role-header`; without the option, the connection's own role.
pub fn role(app: &App, headers: &HeaderMap) -> Result<Option<String>, UiError> {
    let Some(name) = &app.options.role_header else {
        return Ok(None);
    };
    // A request without the header did not come through the trusted proxy: refuse rather than
    // act as the (usually more privileged) connection role — which `none` and `default` would
    // also make it (`SET ROLE NONE`).
    match headers.get(name).map(|v| v.to_str()) {
        Some(Ok(role))
            if role.eq_ignore_ascii_case("none") || role.eq_ignore_ascii_case("default") =>
        {
            Err(UiError::Forbidden(format!(
                "{name} names no role: {role:?} would act as the console's own role"
            )))
        }
        Some(Ok(role)) if !role.is_empty() => Ok(Some(role.to_string())),
        _ => Err(UiError::Forbidden(format!(
            "missing {name} header: the console runs each request as the role it names"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_listens_without_auth() {
        let bearer = Auth::Bearer("t".into());
        assert!(check_listen("127.0.0.1:9188".parse().unwrap(), None).is_ok());
        assert!(check_listen("[::1]:9188".parse().unwrap(), None).is_ok());
        assert!(check_listen("0.0.0.0:9188".parse().unwrap(), None).is_err());
        assert!(check_listen("192.168.1.5:9188".parse().unwrap(), None).is_err());
        assert!(check_listen("0.0.0.0:9188".parse().unwrap(), Some(&bearer)).is_ok());
    }

    #[test]
    fn same_origin_means_scheme_and_exact_host() {
        assert!(same_origin("http://127.0.0.1:9188", "127.0.0.1:9188"));
        assert!(same_origin(
            "http://127.0.0.1:9188/jobs?x=1",
            "127.0.0.1:9188"
        ));
        assert!(!same_origin("http://127.0.0.1:9189", "127.0.0.1:9188"));
        assert!(!same_origin(
            "http://127.0.0.1:9188.evil.example",
            "127.0.0.1:9188"
        ));
        assert!(!same_origin("null", "127.0.0.1:9188"));
    }
}

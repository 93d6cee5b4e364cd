//! Who may reach the console and how a POST proves it came from the console's own page.
//!
//! - The listen rule: loopback only, unless `--auth` guards the console.
//! - The host rule: every request's `Host` names the console — its listen address, `localhost`,
//!   `127.0.0.1`, `[::1]` or a name given with `--allowed-host` — or is answered 421 before
//!   anything else runs. A page of another site whose name was rebound to the console's address
//!   (DNS rebinding) sends its own name, so it reads nothing and posts nothing.
//! - `--auth basic:USER:PASSWORD | bearer:TOKEN`: checked on every request, as SHA-256 digests
//!   compared in constant time (so neither the secret's bytes nor its length show in the timing);
//!   a peer's wrong guesses are throttled (`Guesses`); a malformed value is never echoed.
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
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use subtle::ConstantTimeEq;

use super::App;
use super::db::UiError;
use super::form::Form;

pub const CSRF_COOKIE: &str = "leaseq_csrf";
pub const FLASH_COOKIE: &str = "leaseq_flash";
/// The hidden field every POST form carries.
pub const CSRF_FIELD: &str = "csrf";

/// `--auth`: what every request must present.
#[derive(Clone)]
pub enum Auth {
    /// The `user:password` of HTTP Basic.
    Basic(String),
    Bearer(String),
}

impl std::str::FromStr for Auth {
    type Err = String;

    fn from_str(text: &str) -> Result<Auth, String> {
        match text.split_once(':') {
            Some(("basic", credentials)) => match credentials.split_once(':') {
                Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                    Ok(Auth::Basic(credentials.to_string()))
                }
                _ => Err("basic needs a user and a password: basic:USER:PASSWORD".into()),
            },
            Some(("bearer", token)) if !token.is_empty() => Ok(Auth::Bearer(token.to_string())),
            Some(("bearer", _)) => Err("bearer needs a token: bearer:TOKEN".into()),
            _ => Err("expected basic:USER:PASSWORD or bearer:TOKEN".into()),
        }
    }
}

/// clap's parser for `Auth`: its error says what is wrong but, unlike clap's own for a `FromStr`
/// type, never repeats the value (a token or a password, on a terminal or in a service's log).
#[derive(Clone)]
pub struct AuthParser;

impl clap::builder::ValueParserFactory for Auth {
    type Parser = AuthParser;

    fn value_parser() -> AuthParser {
        AuthParser
    }
}

impl clap::builder::TypedValueParser for AuthParser {
    type Value = Auth;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Auth, clap::Error> {
        let parsed = value
            .to_str()
            .ok_or_else(|| "it is not UTF-8".to_string())
            .and_then(str::parse);
        parsed.map_err(|why| {
            let name = arg.map_or_else(|| "--auth".to_string(), ToString::to_string);
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value for '{name}' (not shown: it holds a secret): {why}\n"),
            )
            .with_cmd(cmd)
        })
    }
}

/// SHA-256 (aws-lc-rs through rustls, the binary's one cryptography library): credentials are
/// compared as digests, whose length is the same whatever was sent.
fn digest(bytes: &[u8]) -> impl AsRef<[u8]> {
    rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .expect("a TLS 1.3 suite")
        .common
        .hash_provider
        .hash(bytes)
}

fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    bool::from(digest(given).as_ref().ct_eq(digest(expected).as_ref()))
}

impl Auth {
    fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(given) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let Some((scheme, value)) = given.split_once(' ') else {
            return false;
        };
        match self {
            Auth::Basic(expected) => {
                if !scheme.eq_ignore_ascii_case("basic") {
                    return false;
                }
                let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(value.trim())
                else {
                    return false;
                };
                same_secret(&decoded, expected.as_bytes())
            }
            Auth::Bearer(expected) => {
                scheme.eq_ignore_ascii_case("bearer")
                    && same_secret(value.trim().as_bytes(), expected.as_bytes())
            }
        }
    }

    fn challenge(&self) -> &'static str {
        match self {
            Auth::Basic(_) => "Basic realm=\"leaseq\", charset=\"UTF-8\"",
            Auth::Bearer(_) => "Bearer realm=\"leaseq\"",
        }
    }
}

/// The names the console answers to (the host rule above), lowercase, without a port.
pub struct Hosts(Vec<String>);

impl Hosts {
    /// `localhost`, `127.0.0.1`, `::1`, the listen address when it is one host's, and `allowed`.
    pub fn new(listen: SocketAddr, allowed: &[AllowedHost]) -> Hosts {
        let mut names: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).into();
        if !listen.ip().is_unspecified() {
            names.push(listen.ip().to_string());
        }
        names.extend(allowed.iter().map(|a| a.0.clone()));
        Hosts(names)
    }

    /// Whether `authority` (a `Host` header's `name[:port]`, or `[v6]:port`) names the console.
    fn admit(&self, authority: &str) -> bool {
        let name = match authority.strip_prefix('[') {
            Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
            None => authority.split(':').next().unwrap_or_default(),
        };
        self.0
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(name))
    }

    fn list(&self) -> String {
        self.0.join(", ")
    }
}

/// `--allowed-host`: a name (or address) the console answers to besides the defaults: the one
/// in the URL its users open, e.g. behind a reverse proxy.
#[derive(Clone)]
pub struct AllowedHost(String);

impl std::str::FromStr for AllowedHost {
    type Err = String;

    fn from_str(text: &str) -> Result<AllowedHost, String> {
        let bracketed = text.strip_prefix('[').and_then(|t| t.strip_suffix(']'));
        let name = bracketed.unwrap_or(text);
        let valid = match bracketed {
            Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
            None => {
                !name.is_empty()
                    && name.len() <= 253
                    && (name.parse::<std::net::IpAddr>().is_ok()
                        || name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'))
            }
        };
        if valid {
            Ok(AllowedHost(name.to_ascii_lowercase()))
        } else {
            Err(format!(
                "{text:?} is not a host name or an IP address: give the name users open the \
                 console with, without a scheme, a port or a path (e.g. console.example.com)"
            ))
        }
    }
}

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

/// A peer's allowance of wrong guesses at `--auth`: `GUESSES` at once, then one more every
/// `GUESS_EVERY`. An online search of the 2·10¹¹ eight-letter lowercase passwords then takes
/// 13 000 years, where 5 000 requests a second would take five days; an operator who mistypes
/// gets ten tries before waiting two seconds.
const GUESSES: f64 = 10.0;
const GUESS_EVERY: Duration = Duration::from_secs(2);
/// Peers remembered at most: past it, those whose allowance is full again are forgotten, and if
/// that is not enough, all (a flood of addresses then costs its sender more than the console).
const PEERS_KEPT: usize = 10_000;

/// Each guessing peer's allowance and when it was last counted. IPv6 peers count per /64 (one
/// host's whole subnet), so that a host cannot multiply its allowance by changing addresses.
static GUESSED: LazyLock<Mutex<HashMap<IpAddr, (f64, Instant)>>> = LazyLock::new(Mutex::default);

fn guesser(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 => v4,
    }
}

impl Auth {
    /// These credentials on a request from `peer` (`who` answers: `leaseq ui`, `leaseq
    /// metrics`): `Ok` when they are right, else the response — 401 with the challenge, or 429
    /// while the peer has no guess left (then its credentials are not even looked at, so a
    /// search learns nothing from a throttled guess).
    pub fn check(&self, peer: IpAddr, headers: &HeaderMap, who: &str) -> Result<(), Box<Response>> {
        let peer = guesser(peer);
        let now = Instant::now();
        let mut guessed = GUESSED
            .lock()
            .expect("the guess counts' lock is never poisoned");
        let left = guessed.get(&peer).map_or(GUESSES, |&(left, at)| {
            (left + now.duration_since(at).as_secs_f64() / GUESS_EVERY.as_secs_f64()).min(GUESSES)
        });
        if left < 1.0 {
            let wait = ((1.0 - left) * GUESS_EVERY.as_secs_f64()).ceil().max(1.0) as u64;
            return Err(Box::new(
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [(header::RETRY_AFTER, wait.to_string())],
                    format!("{who}: too many failed logins from this address: retry in {wait} s\n"),
                )
                    .into_response(),
            ));
        }
        if self.admits(headers) {
            return Ok(());
        }
        if guessed.len() >= PEERS_KEPT && !guessed.contains_key(&peer) {
            let full = |&(left, at): &(f64, Instant)| {
                left + now.duration_since(at).as_secs_f64() / GUESS_EVERY.as_secs_f64() >= GUESSES
            };
            guessed.retain(|_, count| !full(count));
            if guessed.len() >= PEERS_KEPT {
                guessed.clear();
            }
        }
        guessed.insert(peer, (left - 1.0, now));
        Err(Box::new(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, self.challenge().to_string())],
                format!("{who}: authentication required\n"),
            )
                .into_response(),
        ))
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
    fn auth_options_parse_and_refuse_empty_parts() {
        assert!(matches!("basic:ada:pw:x".parse(), Ok(Auth::Basic(c)) if c == "ada:pw:x"));
        assert!(matches!("bearer:abc".parse(), Ok(Auth::Bearer(t)) if t == "abc"));
        assert!("basic:ada".parse::<Auth>().is_err());
        assert!("basic::pw".parse::<Auth>().is_err());
        assert!("bearer:".parse::<Auth>().is_err());
        assert!("token:abc".parse::<Auth>().is_err());
    }

    #[test]
    fn basic_and_bearer_admit_only_their_credentials() {
        let mut headers = HeaderMap::new();
        let basic: Auth = "basic:ada:secret".parse().unwrap();
        assert!(!basic.admits(&headers));
        let good = base64::engine::general_purpose::STANDARD.encode("ada:secret");
        headers.insert(
            header::AUTHORIZATION,
            format!("Basic {good}").parse().unwrap(),
        );
        assert!(basic.admits(&headers));
        let bad = base64::engine::general_purpose::STANDARD.encode("ada:secreT");
        headers.insert(
            header::AUTHORIZATION,
            format!("Basic {bad}").parse().unwrap(),
        );
        assert!(!basic.admits(&headers));
        let bearer: Auth = "bearer:tok".parse().unwrap();
        headers.insert(header::AUTHORIZATION, "Bearer tok".parse().unwrap());
        assert!(bearer.admits(&headers));
        headers.insert(header::AUTHORIZATION, "Bearer to".parse().unwrap());
        assert!(!bearer.admits(&headers));
    }

    #[test]
    fn the_console_answers_to_its_own_names_only() {
        let allowed = ["Queues.Example.com".parse().unwrap()];
        let hosts = Hosts::new("127.0.0.1:9188".parse().unwrap(), &allowed);
        for ok in [
            "127.0.0.1:9188",
            "localhost:9188",
            "LOCALHOST",
            "[::1]:9188",
            "queues.example.com",
            "queues.example.com:443",
        ] {
            assert!(hosts.admit(ok), "{ok}");
        }
        for refused in [
            "evil.example:9188",
            "127.0.0.1.evil.example:9188",
            "queues.example.com.evil.example",
            "localhost.:9188",
            "[::2]:9188",
            "",
        ] {
            assert!(!hosts.admit(refused), "{refused}");
        }
        let every_address = Hosts::new("0.0.0.0:9188".parse().unwrap(), &[]);
        assert!(!every_address.admit("0.0.0.0:9188"));
        let one_address = Hosts::new("192.168.1.5:9188".parse().unwrap(), &[]);
        assert!(one_address.admit("192.168.1.5:9188"));
        let v6 = Hosts::new("[fd00::7]:9188".parse().unwrap(), &[]);
        assert!(v6.admit("[fd00::7]:9188"));
    }

    #[test]
    fn allowed_hosts_are_names_or_addresses_without_scheme_port_or_path() {
        for ok in [
            "console.example.com",
            "10.0.0.7",
            "[fd00::1]",
            "fd00::1",
            "my-host",
        ] {
            assert!(ok.parse::<AllowedHost>().is_ok(), "{ok}");
        }
        for refused in ["", "http://x", "x:9188", "x/jobs", "a b", "[x]"] {
            let error = refused.parse::<AllowedHost>().err().unwrap();
            assert!(
                error.contains("without a scheme, a port or a path"),
                "{error}"
            );
        }
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

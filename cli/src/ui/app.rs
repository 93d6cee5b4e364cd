//! The console's ground: what every request shares — the options `leaseq ui` was started with,
//! the names it answers to, the pool, the events' channel — and `UiError`, why a request failed.
//! Every other module of the console imports it; it imports none of them.
//!
//! Errors map to HTTP by SQLSTATE: the database decides who may do what and which inputs are
//! valid, and its message is shown as it said it (`layout` renders the error page).
use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::StatusCode;

use crate::credentials::Auth;

/// What `leaseq ui` was started with.
pub struct Options {
    pub listen: SocketAddr,
    pub auth: Option<Auth>,
    /// Names the console answers to besides its address, `localhost` and the loopback addresses.
    pub allowed_hosts: Vec<AllowedHost>,
    /// The header naming the operator's role, set by a trusted proxy.
    pub role_header: Option<String>,
    /// Where that proxy connects from: with `role_header`, nobody else reaches the console.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Mask payloads, results and errors everywhere.
    pub hide_payloads: bool,
    /// Serve HTTPS with this configuration (`--tls-cert`, `--tls-key`); every cookie is then
    /// `Secure`.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// Shared by every request.
#[derive(Clone)]
pub struct App {
    inner: Arc<Shared>,
}

pub struct Shared {
    pub options: Options,
    pub hosts: Hosts,
    pub pool: deadpool_postgres::Pool,
    pub events: tokio::sync::broadcast::Sender<()>,
}

impl App {
    pub fn new(shared: Shared) -> App {
        App {
            inner: Arc::new(shared),
        }
    }
}

impl std::ops::Deref for App {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.inner
    }
}

/// The names the console answers to (`auth`'s host rule), lowercase, without a port.
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
    pub fn admit(&self, authority: &str) -> bool {
        let name = match authority.strip_prefix('[') {
            Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
            None => authority.split(':').next().unwrap_or_default(),
        };
        self.0
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(name))
    }

    pub fn list(&self) -> String {
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

/// Why a request failed; each kind is a status and a message on the error page.
#[derive(Debug)]
pub enum UiError {
    /// The database refused: its SQLSTATE decides the status.
    Db(tokio_postgres::Error),
    /// A parse-level check of a field (not JSON, not an integer).
    Input {
        field: String,
        message: String,
    },
    /// CSRF, origin or role-header refusal (never a privilege decision: the database makes those).
    Forbidden(String),
    NotFound(String),
    Unavailable(String),
    Internal(String),
}

impl From<tokio_postgres::Error> for UiError {
    fn from(e: tokio_postgres::Error) -> UiError {
        UiError::Db(e)
    }
}

impl UiError {
    pub fn input(field: &str, message: impl Into<String>) -> UiError {
        UiError::Input {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            UiError::Db(e) => match e.as_db_error() {
                Some(db) => status_of(db.code().code()),
                None => StatusCode::SERVICE_UNAVAILABLE,
            },
            UiError::Input { .. } => StatusCode::BAD_REQUEST,
            UiError::Forbidden(_) => StatusCode::FORBIDDEN,
            UiError::NotFound(_) => StatusCode::NOT_FOUND,
            UiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            UiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// What the error box says: the server's message with its SQLSTATE, as the CLI prints it.
    pub fn message(&self) -> String {
        match self {
            UiError::Db(e) => leaseq_client::describe(e),
            UiError::Input { field, message } => format!("{field}: {message}"),
            UiError::Forbidden(m)
            | UiError::NotFound(m)
            | UiError::Unavailable(m)
            | UiError::Internal(m) => m.clone(),
        }
    }

    /// The database's hint, when it gave one (what to run instead, who may grant it).
    pub fn hint(&self) -> Option<&str> {
        match self {
            UiError::Db(e) => e.as_db_error().and_then(|db| db.hint()),
            _ => None,
        }
    }
}

/// The HTTP status of a SQLSTATE: refusals are the client's (4xx), the rest the server's.
pub fn status_of(sqlstate: &str) -> StatusCode {
    match sqlstate {
        "42501" => StatusCode::FORBIDDEN,
        "42704" => StatusCode::NOT_FOUND,
        s if s.starts_with("23") => StatusCode::CONFLICT,
        s if s.starts_with("22") => StatusCode::BAD_REQUEST,
        // Undefined function or column: an extension older than this console.
        "42883" | "42703" => StatusCode::NOT_IMPLEMENTED,
        s if s.starts_with("28") => StatusCode::FORBIDDEN,
        s if s.starts_with("08") || s.starts_with("57") => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn refusals_and_bad_values_are_client_errors() {
        assert_eq!(status_of("42501"), StatusCode::FORBIDDEN);
        assert_eq!(status_of("42704"), StatusCode::NOT_FOUND);
        assert_eq!(status_of("22023"), StatusCode::BAD_REQUEST);
        assert_eq!(status_of("22004"), StatusCode::BAD_REQUEST);
        assert_eq!(status_of("22007"), StatusCode::BAD_REQUEST);
        assert_eq!(status_of("23505"), StatusCode::CONFLICT);
        assert_eq!(status_of("XX000"), StatusCode::INTERNAL_SERVER_ERROR);
    }
}

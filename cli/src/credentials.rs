//! `--auth basic:USER:PASSWORD | bearer:TOKEN`: the credentials every request to `leaseq ui` or
//! to `leaseq metrics --listen` must present. They are compared as SHA-256 digests in constant
//! time (so neither the secret's bytes nor its length show in the timing); a peer's wrong
//! guesses are throttled (`GUESSES`); a malformed value is never echoed.
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use subtle::ConstantTimeEq;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}

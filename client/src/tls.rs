//! TLS to PostgreSQL as libpq's `sslmode` and `sslrootcert` ask, over rustls.
//!
//! tokio-postgres reads `sslmode` `disable`, `prefer` and `require` only, and refuses
//! `sslrootcert` as an unknown option: both are taken out of the connection string here (its
//! URL and its `key=value` form), and become tokio-postgres's mode plus the certificate check of
//! the rustls configuration.
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers it | as `require` |
//! | `require` | always | anything, unless root certificates are given: then as `verify-ca` |
//! | `verify-ca` | always | signed by a root certificate |
//! | `verify-full` | always | signed by a root certificate, and naming the host connected to |
//!
//! The root certificates: `sslrootcert=FILE` (PEM), `sslrootcert=system` (the operating system's
//! store; only with `verify-full`, as libpq 16), or else `~/.postgresql/root.crt` when it exists
//! (as libpq). Where libpq differs and we do not follow it, it is the safer way:
//! - a `sslrootcert` that cannot be read is refused in every mode (libpq skips the check under
//!   `require`), so a typo never turns verification off;
//! - `prefer` never falls back to plain text after a failed handshake (libpq retries without
//!   TLS), so a certificate that fails its check is a refusal, not a cleartext session.
//!
//! Unix-domain sockets carry no TLS (the server never offers it there): as libpq, the mode is
//! ignored when every host is a socket directory.
use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::config::{Config, Host, SslMode as DriverMode};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode` values that leaseq supports (`allow`, "plain text first", is refused: it
/// protects nothing `prefer` does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    const ALLOWED: &str = "disable, prefer, require, verify-ca, verify-full";

    fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

/// TLS parameters of a connection string that cannot be honoured.
#[derive(Debug)]
pub enum SettingsError {
    /// `sslmode` is none of [`SslMode`]'s values.
    UnknownMode(String),
    /// `sslrootcert` names a file that cannot be read, or that holds no certificate.
    RootCert { path: PathBuf, problem: String },
    /// `verify-ca` or `verify-full` with no root certificate to verify against.
    NoRootCert(SslMode),
    /// `sslrootcert=system` with a mode weaker than `verify-full`.
    SystemNeedsVerifyFull(SslMode),
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsError::UnknownMode(value) => write!(
                f,
                "invalid sslmode \"{value}\": the allowed values are {}",
                SslMode::ALLOWED
            ),
            SettingsError::RootCert { path, problem } => write!(
                f,
                "sslrootcert \"{}\": {problem} (sslrootcert is a PEM file of the certificate \
                 authorities to trust, or system)",
                path.display()
            ),
            SettingsError::NoRootCert(mode) => write!(
                f,
                "sslmode={mode} checks the server's certificate, but no sslrootcert is given \
                 and ~/.postgresql/root.crt does not exist: set sslrootcert to a PEM file of \
                 the certificate authorities to trust, or to system"
            ),
            SettingsError::SystemNeedsVerifyFull(mode) => write!(
                f,
                "sslrootcert=system needs sslmode=verify-full: with sslmode={mode}, any \
                 certificate a public authority issued, for any name, would be accepted"
            ),
        }
    }
}

impl std::error::Error for SettingsError {}

/// Refuses the TLS parameters of `url` that [`configure`] could only refuse when connecting
/// (an unknown `sslmode`, an unreadable `sslrootcert`): the CLI checks them once, at start.
pub fn check(url: &str) -> Result<(), SettingsError> {
    let (mode, roots) = settings(&split(url).taken, default_root_cert())?;
    client_config(mode, &roots).map(drop)
}

/// The connection `url` describes, without its TLS parameters (for messages naming it).
pub fn parse_config(url: &str) -> Result<Config, tokio_postgres::Error> {
    split(url).rest.parse()
}

/// The connection `url` describes and the TLS connector its `sslmode` and `sslrootcert` ask for.
/// A string tokio-postgres cannot read is its error; TLS parameters that cannot be honoured are
/// the connector's, returned by every connection it makes (see [`check`] to refuse them first).
pub fn configure(url: &str) -> Result<(Config, Connector), tokio_postgres::Error> {
    let Split { rest, taken } = split(url);
    let mut config: Config = rest.parse()?;
    let made = settings(&taken, default_root_cert()).and_then(|(mode, roots)| {
        let only_sockets = config.get_hostaddrs().is_empty()
            && !config.get_hosts().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|host| matches!(host, Host::Unix(_)));
        config.ssl_mode(match mode {
            _ if only_sockets => DriverMode::Disable,
            SslMode::Disable => DriverMode::Disable,
            SslMode::Prefer => DriverMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => DriverMode::Require,
        });
        client_config(mode, &roots)
    });
    // tokio-postgres asks the connector before every connection, whatever the mode: a refusal
    // is never skipped.
    Ok((
        config,
        Connector(made.map(MakeRustlsConnect::new).map_err(Arc::new)),
    ))
}

/// tokio-postgres's TLS connector for one connection string: rustls configured as its
/// parameters ask, or why they cannot be honoured.
#[derive(Clone)]
pub struct Connector(Result<MakeRustlsConnect, Arc<SettingsError>>);

impl<S> MakeTlsConnect<S> for Connector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = <MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = <MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect;
    type Error = Arc<SettingsError>;

    fn make_tls_connect(&mut self, hostname: &str) -> Result<Self::TlsConnect, Self::Error> {
        match &mut self.0 {
            Ok(rustls) => match MakeTlsConnect::<S>::make_tls_connect(rustls, hostname) {
                Ok(connect) => Ok(connect),
                Err(never) => match never {},
            },
            Err(refused) => Err(refused.clone()),
        }
    }
}

/// Where the server's certificate must lead.
#[derive(Debug, Clone, PartialEq)]
enum Roots {
    /// Nowhere: any certificate is accepted (`prefer`, `require`, `disable`).
    Any,
    File(PathBuf),
    /// The operating system's store.
    System,
}

/// The mode and roots that the TLS parameters taken out of a connection string ask for (the last
/// value of each, as libpq reads a repeated one). `default_root` is `~/.postgresql/root.crt`
/// when it exists.
fn settings(
    taken: &[(String, String)],
    default_root: Option<PathBuf>,
) -> Result<(SslMode, Roots), SettingsError> {
    let value = |key: &str| {
        taken
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let root_cert = value("sslrootcert").filter(|v| !v.is_empty());
    let mode = match value("sslmode") {
        Some(value) => {
            SslMode::parse(value).ok_or_else(|| SettingsError::UnknownMode(value.to_string()))?
        }
        // libpq 16: the system's roots are for public names, so they turn on the name check.
        None if root_cert == Some("system") => SslMode::VerifyFull,
        None => SslMode::Prefer,
    };
    let roots = match root_cert {
        Some("system") if mode != SslMode::VerifyFull => {
            return Err(SettingsError::SystemNeedsVerifyFull(mode));
        }
        Some("system") => Roots::System,
        Some(path) => Roots::File(PathBuf::from(path)),
        None => match default_root {
            Some(path) => Roots::File(path),
            None if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) => {
                return Err(SettingsError::NoRootCert(mode));
            }
            None => Roots::Any,
        },
    };
    Ok((mode, roots))
}

/// `~/.postgresql/root.crt`, which libpq reads when no `sslrootcert` is given, if it exists.
fn default_root_cert() -> Option<PathBuf> {
    let path = Path::new(&std::env::var_os("HOME")?).join(".postgresql/root.crt");
    path.exists().then_some(path)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The rustls configuration for `mode` and `roots`, the root certificates read now.
fn client_config(mode: SslMode, roots: &Roots) -> Result<ClientConfig, SettingsError> {
    let provider = provider();
    let store = match roots {
        Roots::Any => None,
        Roots::File(path) => Some(read_roots(path)?),
        Roots::System => Some(system_roots()?),
    };
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("aws-lc-rs supports rustls's default protocol versions");
    let config = match (mode, store) {
        // verify-full is rustls's own check (WebPkiServerVerifier): chain and name.
        (SslMode::VerifyFull, Some(store)) => {
            builder.with_root_certificates(store).with_no_client_auth()
        }
        (SslMode::VerifyFull | SslMode::VerifyCa, None) => {
            unreachable!("settings() gives verify-ca and verify-full roots")
        }
        (_, roots) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly { roots, provider }))
            .with_no_client_auth(),
    };
    Ok(config)
}

fn read_roots(path: &Path) -> Result<RootCertStore, SettingsError> {
    let refused = |problem: String| SettingsError::RootCert {
        path: path.to_path_buf(),
        problem,
    };
    // Read first: pem_file_iter's error for a missing file does not say which.
    let pem = std::fs::read(path).map_err(|e| refused(format!("cannot read it: {e}")))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| refused(format!("not a PEM file of certificates: {e}")))?;
    let mut store = RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(refused("holds no usable certificate".into()));
    }
    Ok(store)
}

fn system_roots() -> Result<RootCertStore, SettingsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        let problem = match found.errors.first() {
            Some(e) => format!("the operating system's store holds no certificate ({e})"),
            None => "the operating system's store holds no certificate".into(),
        };
        return Err(SettingsError::RootCert {
            path: PathBuf::from("system"),
            problem,
        });
    }
    Ok(store)
}

/// `verify-ca`, and `prefer`/`require`: the chain up to `roots` when there are roots, never the
/// name (so without roots any certificate passes, which is what libpq's `require` means: the
/// session is encrypted against a listener, not against someone in the middle). The handshake's
/// signatures are checked in every case.
#[derive(Debug)]
struct ChainOnly {
    roots: Option<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let certificate = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &certificate,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The parameters libpq reads for TLS that tokio-postgres does not.
const TAKEN: [&str; 2] = ["sslmode", "sslrootcert"];

/// A connection string with its TLS parameters taken out.
struct Split<'a> {
    /// The rest, for tokio-postgres.
    rest: Cow<'a, str>,
    /// `sslmode` and `sslrootcert` as `(key, value)`, decoded, in the order given.
    taken: Vec<(String, String)>,
}

impl<'a> Split<'a> {
    fn whole(url: &'a str) -> Split<'a> {
        Split {
            rest: Cow::Borrowed(url),
            taken: Vec::new(),
        }
    }
}

/// `url` split; a string that neither form reads is left whole, for tokio-postgres to refuse
/// with its own message.
fn split(url: &str) -> Split<'_> {
    let parsed = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_url(url)
    } else {
        split_key_values(url)
    };
    parsed.unwrap_or_else(|| Split::whole(url))
}

/// A URL's query parameters, read as tokio-postgres reads them: credentials end at the first
/// `@`, the query starts at the first `?` after them, `&` separates parameters and each has a
/// `=`, keys and values percent-encoded.
fn split_url(url: &str) -> Option<Split<'_>> {
    let after_credentials = url.find('@').map_or(0, |at| at + 1);
    let Some(question) = url[after_credentials..].find('?') else {
        return Some(Split::whole(url));
    };
    let question = after_credentials + question;
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for parameter in url[question + 1..].split('&') {
        let (key, value) = parameter.split_once('=')?;
        let key = decode(key)?;
        if TAKEN.contains(&key.as_str()) {
            taken.push((key, decode(value)?));
        } else {
            kept.push(parameter);
        }
    }
    if taken.is_empty() {
        return Some(Split::whole(url));
    }
    let mut rest = url[..question].to_string();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Some(Split {
        rest: Cow::Owned(rest),
        taken,
    })
}

fn decode(s: &str) -> Option<String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(Cow::into_owned)
}

/// A `key=value` string's parameters, read as tokio-postgres reads them: whitespace between
/// pairs and around `=`, values bare or in single quotes, `\` escaping the next character.
fn split_key_values(s: &str) -> Option<Split<'_>> {
    let mut taken = Vec::new();
    let mut cut: Vec<Range<usize>> = Vec::new();
    let mut chars = s.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        chars.next_if(|(_, c)| *c == '=')?;
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let quoted = chars.next_if(|(_, c)| *c == '\'').is_some();
        let mut value = String::new();
        let mut closed = !quoted;
        while let Some(&(_, c)) = chars.peek() {
            if (quoted && c == '\'') || (!quoted && c.is_whitespace()) {
                break;
            }
            chars.next();
            if c == '\\' {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            } else {
                value.push(c);
            }
        }
        if quoted {
            closed = chars.next_if(|(_, c)| *c == '\'').is_some();
        }
        if !closed || (!quoted && value.is_empty()) {
            return None;
        }
        let end = chars.peek().map_or(s.len(), |&(i, _)| i);
        if TAKEN.contains(&key.as_str()) {
            taken.push((key, value));
            cut.push(start..end);
        }
    }
    if cut.is_empty() {
        return Some(Split::whole(s));
    }
    let mut rest = String::with_capacity(s.len());
    let mut from = 0;
    for range in cut {
        rest.push_str(&s[from..range.start]);
        from = range.end;
    }
    rest.push_str(&s[from..]);
    Some(Split {
        rest: Cow::Owned(rest),
        taken,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(key, value)` pairs as a table row writes them.
    type Pairs = &'static [(&'static str, &'static str)];

    fn pairs(list: Pairs) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn split_takes_the_tls_parameters_out_of_either_form_and_keeps_the_rest() {
        let cases: &[(&str, &str, Pairs)] = &[
            (
                "postgres://u:p@h:5/db?sslmode=verify-full&application_name=x&sslrootcert=%2Ftmp%2Fca.pem",
                "postgres://u:p@h:5/db?application_name=x",
                &[("sslmode", "verify-full"), ("sslrootcert", "/tmp/ca.pem")],
            ),
            (
                "postgresql://h/db?sslrootcert=/ca.pem",
                "postgresql://h/db",
                &[("sslrootcert", "/ca.pem")],
            ),
            // A `?` in the password is the password's.
            (
                "postgres://u:p?x@h/db?sslmode=require",
                "postgres://u:p?x@h/db",
                &[("sslmode", "require")],
            ),
            (
                "postgres://h/db?connect_timeout=3",
                "postgres://h/db?connect_timeout=3",
                &[],
            ),
            (
                "host=h sslmode = verify-ca user=u sslrootcert='/my certs/ca.pem' dbname=d",
                "host=h  user=u  dbname=d",
                &[
                    ("sslmode", "verify-ca"),
                    ("sslrootcert", "/my certs/ca.pem"),
                ],
            ),
            (
                r"sslrootcert=/a\ b.pem host=h",
                " host=h",
                &[("sslrootcert", "/a b.pem")],
            ),
            ("host=h password='it''", "host=h password='it''", &[]),
        ];
        for (url, rest, taken) in cases {
            let got = split(url);
            assert_eq!(
                (got.rest.as_ref(), got.taken),
                (*rest, pairs(taken)),
                "{url}"
            );
        }
    }

    #[test]
    fn every_mode_maps_as_libpq_and_a_named_root_certificate_turns_the_check_on() {
        let ca = Some(PathBuf::from("/home/u/.postgresql/root.crt"));
        let file = |p: &str| Roots::File(PathBuf::from(p));
        let cases: &[(Pairs, Option<PathBuf>, SslMode, Roots)] = &[
            (&[], None, SslMode::Prefer, Roots::Any),
            (
                &[("sslmode", "disable")],
                None,
                SslMode::Disable,
                Roots::Any,
            ),
            (
                &[("sslmode", "require")],
                None,
                SslMode::Require,
                Roots::Any,
            ),
            (
                &[("sslmode", "require")],
                ca.clone(),
                SslMode::Require,
                file("/home/u/.postgresql/root.crt"),
            ),
            (
                &[("sslmode", "require"), ("sslrootcert", "/ca.pem")],
                None,
                SslMode::Require,
                file("/ca.pem"),
            ),
            (
                &[("sslmode", "verify-ca"), ("sslrootcert", "/ca.pem")],
                ca.clone(),
                SslMode::VerifyCa,
                file("/ca.pem"),
            ),
            (
                &[("sslmode", "verify-full")],
                ca.clone(),
                SslMode::VerifyFull,
                file("/home/u/.postgresql/root.crt"),
            ),
            (
                &[("sslrootcert", "system")],
                None,
                SslMode::VerifyFull,
                Roots::System,
            ),
            // The last value counts, as in libpq.
            (
                &[("sslmode", "disable"), ("sslmode", "require")],
                None,
                SslMode::Require,
                Roots::Any,
            ),
        ];
        for (taken, default_root, mode, roots) in cases {
            let got = settings(&pairs(taken), default_root.clone()).unwrap();
            assert_eq!(got, (*mode, roots.clone()), "{taken:?}");
        }
    }

    #[test]
    fn refusals_name_the_parameter_and_what_it_accepts() {
        let cases: &[(Pairs, &str)] = &[
            (
                &[("sslmode", "verify_full")],
                "invalid sslmode \"verify_full\": the allowed values are disable, prefer, require, verify-ca, verify-full",
            ),
            (&[("sslmode", "allow")], "invalid sslmode \"allow\""),
            (
                &[("sslmode", "verify-ca")],
                "sslmode=verify-ca checks the server's certificate, but no sslrootcert is given",
            ),
            (
                &[("sslmode", "require"), ("sslrootcert", "system")],
                "sslrootcert=system needs sslmode=verify-full",
            ),
        ];
        for (taken, said) in cases {
            let refused = settings(&pairs(taken), None).unwrap_err().to_string();
            assert!(refused.starts_with(said), "{taken:?}: {refused}");
        }
        let missing = check("host=h sslmode=require sslrootcert=/nonexistent/ca.pem").unwrap_err();
        assert!(
            missing.to_string().starts_with(
                "sslrootcert \"/nonexistent/ca.pem\": cannot read it: No such file or directory"
            ),
            "{missing}"
        );
    }

    #[test]
    fn unix_sockets_carry_no_tls_whatever_the_mode() {
        let (config, _) = configure("host=/run/postgresql sslmode=require").unwrap();
        assert_eq!(config.get_ssl_mode(), DriverMode::Disable);
        let (config, _) = configure("host=localhost sslmode=require").unwrap();
        assert_eq!(config.get_ssl_mode(), DriverMode::Require);
        let (config, _) = configure("host=localhost").unwrap();
        assert_eq!(config.get_ssl_mode(), DriverMode::Prefer);
    }
}

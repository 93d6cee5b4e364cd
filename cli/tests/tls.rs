//! TLS end to end. Each test that needs a database starts a PostgreSQL server of its own with
//! `ssl = on`, a certificate issued at test time by a certificate authority of the test's
//! (rcgen), and a pg_hba.conf that accepts TCP connections over TLS only (`hostssl`, SCRAM
//! passwords), so that every connection that succeeds is proven encrypted. The `leaseq` binary
//! connects to it with each `sslmode`; `leaseq ui` and `leaseq metrics --listen` serve HTTPS
//! with the same certificate.
//!
//! Needs PostgreSQL 15's programs and the leaseq extension installed under them (scripts/test
//! installs both) and, as root, `LEASEQ_TEST_RUN_AS`: the OS user the server runs as. A test's
//! server is stopped and its directory removed when the test ends, passed or failed.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
const PASSWORD: &str = "tls-test-password";
const QUEUE: &str = "over_tls";

/// A certificate authority made for one test.
struct Authority {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key).unwrap().pem();
        Authority {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `names` (DNS names or IP addresses) and its private key, both PEM.
    fn issue(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, &names[0]);
        let certificate = params.signed_by(&key, &self.issuer).unwrap();
        (certificate.pem(), key.serialize_pem())
    }
}

/// The OS user the server runs as (PostgreSQL refuses root), if not this process's.
fn run_as() -> Option<String> {
    std::env::var("LEASEQ_TEST_RUN_AS")
        .ok()
        .filter(|u| !u.is_empty())
}

/// `program` of PostgreSQL 15, run as the server's OS user (from `/`, which it may enter).
fn as_server_user(program: &str) -> Command {
    let program = format!("{PG_BIN}/{program}");
    let mut command = match run_as() {
        Some(user) => {
            let mut c = Command::new("sudo");
            c.args(["-u", &user, "--", &program]);
            c
        }
        None => Command::new(program),
    };
    command.current_dir("/");
    command
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running PostgreSQL server with TLS only, its files under `dir`.
struct Server {
    dir: PathBuf,
    port: u16,
    /// The authority that issued the server's certificate (localhost, 127.0.0.1).
    ca: PathBuf,
    /// An authority that issued nothing the server shows.
    other_ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Server {
    fn start() -> Server {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "leaseq-tls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("home")).unwrap();
        let authority = Authority::new("leaseq test CA");
        let (cert_pem, key_pem) = authority.issue(&["localhost", "127.0.0.1"]);
        let server = Server {
            port: free_port(),
            ca: dir.join("ca.crt"),
            other_ca: dir.join("other-ca.crt"),
            cert: dir.join("server.crt"),
            key: dir.join("server.key"),
            dir,
        };
        std::fs::write(&server.ca, &authority.pem).unwrap();
        std::fs::write(&server.other_ca, Authority::new("another CA").pem).unwrap();
        std::fs::write(&server.cert, cert_pem).unwrap();
        std::fs::write(&server.key, key_pem).unwrap();
        // The server reads its key only when it alone may (0600, its own user's).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&server.key, std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some(user) = run_as() {
            let status = Command::new("chown")
                .args(["-R", &format!("{user}:")])
                .arg(&server.dir)
                .status()
                .unwrap();
            assert!(status.success(), "chown {}", server.dir.display());
        }
        let data = server.dir.join("data");
        let initdb = as_server_user("initdb")
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(initdb.success(), "initdb {}", data.display());
        // TCP only over TLS, with a password: a session in the clear is refused before it
        // authenticates. Over the socket (the test's own setup) no TLS, as always.
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
        )
        .unwrap();
        let options = format!(
            "-p {} -k {dir} -c listen_addresses=127.0.0.1 -c ssl=on \
             -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key",
            server.port,
            dir = server.dir.display()
        );
        let started = as_server_user("pg_ctl")
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(server.dir.join("server.log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(
            started.success(),
            "pg_ctl start: {}",
            std::fs::read_to_string(server.dir.join("server.log")).unwrap_or_default()
        );
        let mut db = postgres::Config::new()
            .host_path(&server.dir)
            .port(server.port)
            .user("postgres")
            .dbname("postgres")
            .connect(postgres::NoTls)
            .expect("connect over the socket");
        db.batch_execute(&format!(
            "ALTER ROLE postgres PASSWORD '{PASSWORD}';
             CREATE EXTENSION leaseq;
             SELECT leaseq.queue_create('{QUEUE}');"
        ))
        .unwrap();
        server
    }

    /// A URL as `postgres` with its password to `host` (port this server's), then `query`.
    fn url(&self, host: &str, query: &str) -> String {
        format!(
            "postgresql://postgres:{PASSWORD}@{host}:{}/postgres{query}",
            self.port
        )
    }

    /// A HOME with no ~/.postgresql/root.crt, unless a test puts one there.
    fn home(&self) -> PathBuf {
        self.dir.join("home")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = as_server_user("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `leaseq ARGS` with DATABASE_URL `url` and HOME `home`: its exit code, stdout and stderr.
fn leaseq(url: &str, home: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .args(args)
        .env("DATABASE_URL", url)
        .env("HOME", home)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[derive(Debug)]
enum Expect {
    Connects,
    /// Exit 1, the message containing this.
    Refused(&'static str),
}

#[test]
fn the_cli_connects_over_tls_as_each_sslmode_asks_and_refuses_what_it_cannot_verify() {
    let server = Server::start();
    let ca = server.ca.display().to_string();
    let other_ca = server.other_ca.display().to_string();
    let port = server.port;
    // The name the certificate does not carry, reached at 127.0.0.1 all the same (hostaddr).
    let elsewhere = |query: &str| {
        server.url(
            "not-in-the-cert.invalid",
            &format!("?hostaddr=127.0.0.1&{query}"),
        )
    };
    let cases: Vec<(&str, String, Expect)> = vec![
        (
            "require: encrypted, any certificate",
            server.url("127.0.0.1", "?sslmode=require"),
            Expect::Connects,
        ),
        (
            "prefer, the default: TLS when offered",
            server.url("127.0.0.1", ""),
            Expect::Connects,
        ),
        (
            "require with channel binding: SCRAM-SHA-256-PLUS over this TLS",
            server.url("127.0.0.1", "?sslmode=require&channel_binding=require"),
            Expect::Connects,
        ),
        (
            "verify-ca: the chain, not the name",
            elsewhere(&format!("sslmode=verify-ca&sslrootcert={ca}")),
            Expect::Connects,
        ),
        (
            "verify-full by IP address",
            server.url(
                "127.0.0.1",
                &format!("?sslmode=verify-full&sslrootcert={ca}"),
            ),
            Expect::Connects,
        ),
        (
            "verify-full by name, key=value form with a quoted path",
            format!(
                "host=localhost port={port} user=postgres password={PASSWORD} dbname=postgres \
                 sslmode = verify-full sslrootcert='{ca}'"
            ),
            Expect::Connects,
        ),
        (
            "verify-full: a name not in the certificate",
            elsewhere(&format!("sslmode=verify-full&sslrootcert={ca}")),
            Expect::Refused("not valid for name"),
        ),
        (
            "verify-ca: another authority",
            server.url(
                "127.0.0.1",
                &format!("?sslmode=verify-ca&sslrootcert={other_ca}"),
            ),
            Expect::Refused("UnknownIssuer"),
        ),
        (
            "verify-full: another authority",
            server.url(
                "localhost",
                &format!("?sslmode=verify-full&sslrootcert={other_ca}"),
            ),
            Expect::Refused("UnknownIssuer"),
        ),
        (
            "require with a root certificate checks the chain, as libpq",
            server.url(
                "127.0.0.1",
                &format!("?sslmode=require&sslrootcert={other_ca}"),
            ),
            Expect::Refused("UnknownIssuer"),
        ),
        (
            "disable: refused by the server's hostssl-only pg_hba.conf",
            server.url("127.0.0.1", "?sslmode=disable"),
            Expect::Refused("no encryption"),
        ),
    ];
    let mut failed = Vec::new();
    for (what, url, expect) in &cases {
        let (code, out, err) = leaseq(url, &server.home(), &["stats"]);
        let ok = match expect {
            Expect::Connects => code == 0 && out.contains(QUEUE),
            Expect::Refused(said) => code == 1 && err.contains(said),
        };
        println!("{what}: exit {code} {}", err.trim());
        if !ok {
            failed.push(format!(
                "{what} ({url}): expected {expect:?}, got exit {code}\n{out}{err}"
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));

    // The server really refuses a client without TLS: the plain driver, straight to it.
    let plain = postgres::Client::connect(
        &format!("host=127.0.0.1 port={port} user=postgres password={PASSWORD} dbname=postgres"),
        postgres::NoTls,
    );
    let refused = plain.err().expect("a client without TLS is refused");
    let said = refused.as_db_error().map(|e| e.message().to_string());
    assert!(
        said.as_deref().is_some_and(|m| m.contains("no encryption")),
        "{refused:?}"
    );

    // ~/.postgresql/root.crt stands for sslrootcert when none is given, as in libpq: verify-full
    // verifies against it, and with require it turns the chain check on.
    let home = server.home();
    std::fs::create_dir_all(home.join(".postgresql")).unwrap();
    std::fs::copy(&server.ca, home.join(".postgresql/root.crt")).unwrap();
    let (code, out, err) = leaseq(
        &server.url("localhost", "?sslmode=verify-full"),
        &home,
        &["stats"],
    );
    assert!(
        code == 0 && out.contains(QUEUE),
        "verify-full with ~/.postgresql/root.crt: {err}"
    );
    std::fs::copy(&server.other_ca, home.join(".postgresql/root.crt")).unwrap();
    let (code, _, err) = leaseq(
        &server.url("127.0.0.1", "?sslmode=require"),
        &home,
        &["stats"],
    );
    assert!(
        code == 1 && err.contains("UnknownIssuer"),
        "require with another root.crt: {err}"
    );
}

#[test]
fn bad_tls_parameters_are_refused_before_connecting_naming_the_parameter() {
    // Nothing listens on port 1: a refusal here was made before any connection.
    let home = std::env::temp_dir();
    let cases = [
        (
            "postgresql://u@127.0.0.1:1/db?sslmode=verify_full",
            "leaseq: invalid sslmode \"verify_full\": the allowed values are disable, prefer, \
             require, verify-ca, verify-full\n",
        ),
        (
            "host=127.0.0.1 port=1 sslmode=allow",
            "leaseq: invalid sslmode \"allow\": the allowed values are disable, prefer, require, \
             verify-ca, verify-full\n",
        ),
        (
            "postgresql://u@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "leaseq: sslrootcert \"/nonexistent/ca.pem\": cannot read it: No such file or \
             directory (os error 2) (sslrootcert is a PEM file of the certificate authorities \
             to trust, or system)\n",
        ),
        (
            "host=127.0.0.1 port=1 sslmode=require sslrootcert=system",
            "leaseq: sslrootcert=system needs sslmode=verify-full: with sslmode=require, any \
             certificate a public authority issued, for any name, would be accepted\n",
        ),
    ];
    for (url, said) in cases {
        for command in [
            &["stats"][..],
            &["work", "--queue", "q", "--", "true"],
            &["ui"],
        ] {
            let (code, _, err) = leaseq(url, &home, command);
            assert_eq!((code, err.as_str()), (2, said), "{url} {command:?}");
        }
    }
    // verify-ca with nothing to verify against (no sslrootcert, no ~/.postgresql/root.crt).
    let empty_home = std::env::temp_dir().join(format!("leaseq-tls-home-{}", std::process::id()));
    std::fs::create_dir_all(&empty_home).unwrap();
    let (code, _, err) = leaseq(
        "host=127.0.0.1 port=1 sslmode=verify-ca",
        &empty_home,
        &["stats"],
    );
    std::fs::remove_dir_all(&empty_home).unwrap();
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with(
            "leaseq: sslmode=verify-ca checks the server's certificate, but no sslrootcert is given"
        ),
        "{err}"
    );

    // The console's and the metrics' own files.
    let url = "postgresql://u@127.0.0.1:1/db";
    let (code, _, err) = leaseq(
        url,
        &home,
        &[
            "ui",
            "--tls-cert",
            "/nonexistent/c.pem",
            "--tls-key",
            "/nonexistent/k.pem",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("leaseq ui: --tls-cert /nonexistent/c.pem: cannot read it"),
        "{err}"
    );
    let (code, _, err) = leaseq(
        url,
        &home,
        &[
            "metrics",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            "/nonexistent/c.pem",
            "--tls-key",
            "/nonexistent/k.pem",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("leaseq: --tls-cert /nonexistent/c.pem: cannot read it"),
        "{err}"
    );
    let (code, _, err) = leaseq(url, &home, &["ui", "--tls-cert", "/nonexistent/c.pem"]);
    assert_eq!(code, 2, "--tls-cert without --tls-key: {err}");
    assert!(err.contains("--tls-key"), "{err}");
}

/// A `leaseq` server process, killed when dropped.
struct Serving {
    child: Child,
    /// `https://ADDR/…` as it printed.
    address: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `leaseq ARGS`, until it prints the line starting with `prefix` on stdout (or stderr), and the
/// rest of that line.
fn serve(server: &Server, url: &str, args: &[&str], prefix: &str, on_stderr: bool) -> Serving {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leaseq"));
    command
        .args(args)
        .env("DATABASE_URL", url)
        .env("HOME", server.home())
        .env_remove("LEASEQ_UI_AUTH")
        .stdin(Stdio::null());
    if on_stderr {
        command.stderr(Stdio::piped());
    } else {
        command.stdout(Stdio::piped());
    }
    let mut child = command.spawn().unwrap();
    let stream: Box<dyn Read> = if on_stderr {
        Box::new(child.stderr.take().unwrap())
    } else {
        Box::new(child.stdout.take().unwrap())
    };
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    let address = line
        .trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{args:?} printed {line:?}"))
        .to_string();
    Serving { child, address }
}

/// `GET path` over HTTPS to `address` (host:port), trusting only `ca`: the whole response.
fn https_get(address: &str, path: &str, ca: &Path) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(certificate.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let host = address.rsplit_once(':').unwrap().0.to_string();
    let name = ServerName::try_from(host).unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(address).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    match tls.read_to_end(&mut response) {
        Ok(_) => {}
        // A server that closes without close_notify after a whole response.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !response.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    Ok(String::from_utf8_lossy(&response).into_owned())
}

/// `GET path` in plain HTTP to `address`: whatever comes back before the connection ends.
fn http_get(address: &str, path: &str) -> String {
    let mut tcp = TcpStream::connect(address).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    );
    let mut response = Vec::new();
    let _ = tcp.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

#[test]
fn the_console_and_the_metrics_serve_https_and_answer_nothing_in_plain_http() {
    let server = Server::start();
    let url = server.url(
        "localhost",
        &format!("?sslmode=verify-full&sslrootcert={}", server.ca.display()),
    );
    let (cert, key) = (
        server.cert.display().to_string(),
        server.key.display().to_string(),
    );
    let tls = ["--tls-cert", cert.as_str(), "--tls-key", key.as_str()];

    let ui = serve(
        &server,
        &url,
        &[&["ui", "--listen", "127.0.0.1:0"][..], &tls].concat(),
        "leaseq ui: listening on https://",
        false,
    );
    let address = ui.address.trim_end_matches('/');
    let page = https_get(address, "/", &server.ca).expect("the overview over HTTPS");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(
        page.contains(QUEUE),
        "the overview lists the queue, read over TLS: {page}"
    );
    let cookies: Vec<&str> = page
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .collect();
    assert!(
        !cookies.is_empty(),
        "a new visitor gets the CSRF cookie: {page}"
    );
    for cookie in cookies {
        assert!(cookie.ends_with("; Secure"), "{cookie}");
    }
    let plain = http_get(address, "/");
    assert!(
        !plain.contains("HTTP/1.1"),
        "plain HTTP to the console: {plain:?}"
    );
    let refused = https_get(address, "/", &server.other_ca).expect_err("an untrusted certificate");
    assert!(refused.contains("UnknownIssuer"), "{refused}");
    // The console still serves after those failed handshakes.
    let again = https_get(address, "/", &server.ca).expect("the overview again");
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    drop(ui);

    let metrics = serve(
        &server,
        &url,
        &[&["metrics", "--listen", "127.0.0.1:0"][..], &tls].concat(),
        "leaseq: serving metrics on https://",
        true,
    );
    let address = metrics.address.trim_end_matches("/metrics");
    let scrape = https_get(address, "/metrics", &server.ca).expect("a scrape over HTTPS");
    assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
    assert!(scrape.contains(&format!("queue=\"{QUEUE}\"")), "{scrape}");
    let plain = http_get(address, "/metrics");
    assert!(
        !plain.contains("HTTP/1.1"),
        "plain HTTP to the metrics: {plain:?}"
    );
}

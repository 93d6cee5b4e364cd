//! HTTPS for `leaseq ui` and `leaseq metrics --listen` (`--tls-cert FILE --tls-key FILE`):
//! rustls under the same `axum::serve`, so routes, limits, connection info and graceful
//! shutdown are the ones plain HTTP has; only the listener differs.
//!
//! Handshakes run in tasks of their own, each bounded by [`HANDSHAKE_TIMEOUT`]: done in
//! `accept` itself, one client that opens a connection and says nothing would hold every other
//! client out.
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::serve::{Listener, ListenerExt};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client may take over its handshake before its connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// `--tls-cert` and `--tls-key`, shared by the commands that serve HTTP.
#[derive(clap::Args)]
pub struct TlsArgs {
    /// Serve HTTPS with this certificate chain (PEM, the server's certificate first); needs
    /// --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The server configuration the files describe, or None for plain HTTP. A refusal names the
    /// option and the file.
    pub fn server_config(&self) -> Result<Option<Arc<ServerConfig>>, String> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => server_config(cert, key).map(Some),
            _ => Ok(None),
        }
    }
}

fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let read = |option: &str, path: &Path| {
        std::fs::read(path).map_err(|e| format!("{option} {}: cannot read it: {e}", path.display()))
    };
    let chain = CertificateDer::pem_slice_iter(&read("--tls-cert", cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            format!(
                "--tls-cert {}: not a PEM certificate chain: {e}",
                cert.display()
            )
        })?;
    if chain.is_empty() {
        return Err(format!(
            "--tls-cert {}: holds no PEM certificate",
            cert.display()
        ));
    }
    let private = PrivateKeyDer::from_pem_slice(&read("--tls-key", key)?)
        .map_err(|e| format!("--tls-key {}: not a PEM private key: {e}", key.display()))?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("aws-lc-rs supports rustls's default protocol versions")
    .with_no_client_auth()
    .with_single_cert(chain, private)
    .map_err(|e| {
        format!(
            "--tls-cert {} and --tls-key {}: {e}",
            cert.display(),
            key.display()
        )
    })?;
    // The server speaks HTTP/1.1 only (axum's http1 feature).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TCP listener whose connections are handed to axum once their TLS handshake is done.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Option<(TlsStream<TcpStream>, SocketAddr)>>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> TlsListener {
        TlsListener {
            tcp,
            acceptor: TlsAcceptor::from(config),
            handshakes: JoinSet::new(),
        }
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            // Both branches are cancel-safe: axum drops this future at shutdown.
            tokio::select! {
                (tcp, peer) = Listener::accept(&mut self.tcp) => {
                    let acceptor = self.acceptor.clone();
                    self.handshakes.spawn(async move {
                        // A failed handshake (plain HTTP, an untrusted certificate on the
                        // client's side, a timeout) only ends that connection.
                        let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
                        tls.await.ok()?.ok().map(|tls| (tls, peer))
                    });
                }
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(accepted)) = done {
                        return accepted;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// For `ListenerExt::tap_io`, through which axum gives a listener of ours `ConnectInfo`
/// (`--trusted-proxy` reads the peer address): small responses go out at once.
pub fn no_delay(tls: &mut TlsStream<TcpStream>) {
    // Best effort, as for axum's own listener: a socket without TCP_NODELAY still serves.
    tls.get_ref().0.set_nodelay(true).unwrap_or_default();
}

/// Serves `app` on `listener` — over TLS with `tls` — until SIGTERM or Ctrl-C, then finishes the
/// requests under way: the console's and the metrics' one way to serve.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<ServerConfig>>,
) -> io::Result<()> {
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    match tls {
        None => {
            axum::serve(listener, service)
                .with_graceful_shutdown(stopped())
                .await
        }
        Some(config) => {
            let listener = TlsListener::new(listener, config);
            axum::serve(listener.tap_io(no_delay), service)
                .with_graceful_shutdown(stopped())
                .await
        }
    }
}

async fn stopped() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

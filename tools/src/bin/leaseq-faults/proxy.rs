//! A TCP proxy that makes a link slow and lossy on demand (this kernel has no `netem`): every
//! chunk read from one side waits a latency with jitter before it is written to the other, in
//! order (a late chunk holds back those behind it, as TCP would); each direction is throttled;
//! now and then a connection stalls in both directions for longer than a lease, or is reset
//! (RST to both ends). It starts clean — a plain relay — and turns lossy on SIGUSR1, clean
//! again on SIGUSR2; on SIGTERM it prints what it did as one JSON line and exits.
//!
//! Why not a crate: noxious (a Rust Toxiproxy) has latency, bandwidth, slicer, timeout (stop,
//! then close) and slow_close toxics, configured over its REST server — but no reset, and no
//! stall that ends and lets the connection carry on, which is the fault a lease must survive
//! or lose cleanly; the relay below does both, on tokio alone.
//!
//! Stalls and resets strike each connection as Poisson processes in time (a mean interval each),
//! looked at whenever a chunk passes: a connection idle for a while is as likely to find its
//! stall waiting as one that was busy. The random numbers come from `--seed`, printed in the
//! report, though the timing of real sockets makes no two runs the same.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Notify, mpsc};
use tokio::time::{Instant, sleep, sleep_until};

use crate::cluster::Error;

#[derive(Args, Clone, Debug)]
pub struct ProxyArgs {
    /// Where clients connect.
    #[arg(long)]
    listen: SocketAddr,
    /// The server behind it.
    #[arg(long)]
    upstream: SocketAddr,
    /// Latency added to every chunk when lossy, in milliseconds …
    #[arg(long, default_value_t = 10)]
    delay_ms: u64,
    /// … plus a uniform jitter up to this.
    #[arg(long, default_value_t = 40)]
    jitter_ms: u64,
    /// Each direction of each connection throttled to this many KiB/s when lossy.
    #[arg(long, default_value_t = 128)]
    rate_kib: u64,
    /// How long a stall lasts (longer than a lease, to make one end).
    #[arg(long, default_value_t = 10_000)]
    stall_ms: u64,
    /// Mean time between stalls of one connection, in seconds.
    #[arg(long, default_value_t = 30.0)]
    stall_every_s: f64,
    /// Mean time between resets of one connection, in seconds.
    #[arg(long, default_value_t = 20.0)]
    reset_every_s: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// What every connection shares: the mode, the dice, and the counts reported at the end.
struct Proxy {
    args: ProxyArgs,
    lossy: AtomicBool,
    /// When the current lossy period began: no connection's faults are counted from before it.
    lossy_since: Mutex<Instant>,
    rng: Mutex<SplitMix64>,
    connections: AtomicU64,
    stalls: AtomicU64,
    resets: AtomicU64,
    bytes: AtomicU64,
}

pub async fn run(args: ProxyArgs) -> Result<(), Error> {
    let listener = TcpListener::bind(args.listen).await?;
    let mut on = signal(SignalKind::user_defined1())?;
    let mut off = signal(SignalKind::user_defined2())?;
    let mut term = signal(SignalKind::terminate())?;
    let proxy = Arc::new(Proxy {
        rng: Mutex::new(SplitMix64(args.seed)),
        args,
        lossy: AtomicBool::new(false),
        lossy_since: Mutex::new(Instant::now()),
        connections: AtomicU64::new(0),
        stalls: AtomicU64::new(0),
        resets: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    });
    // The driver waits for this line before it lets clients connect.
    println!("listening {}", listener.local_addr()?);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (client, _) = accepted?;
                proxy.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(relay(proxy.clone(), client));
            }
            _ = on.recv() => {
                *proxy.lossy_since.lock().expect("lossy_since") = Instant::now();
                proxy.lossy.store(true, Ordering::SeqCst);
            }
            _ = off.recv() => proxy.lossy.store(false, Ordering::SeqCst),
            _ = term.recv() => break,
        }
    }
    let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "{}",
        json!({
            "seed": proxy.args.seed,
            "connections": count(&proxy.connections),
            "stalls": count(&proxy.stalls),
            "resets": count(&proxy.resets),
            "bytes": count(&proxy.bytes),
        })
    );
    Ok(())
}

/// One connection's fate, shared by its two directions.
struct Link {
    /// No chunk is written before this (a stall).
    stalled_until: Mutex<Instant>,
    /// When the dice were last rolled for this connection.
    rolled_at: Mutex<Instant>,
    reset: Notify,
}

async fn relay(proxy: Arc<Proxy>, client: TcpStream) {
    let Ok(server) = TcpStream::connect(proxy.args.upstream).await else {
        return; // the client sees its connection closed, as with a server that is down
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let link = Link {
        stalled_until: Mutex::new(Instant::now()),
        rolled_at: Mutex::new(Instant::now()),
        reset: Notify::new(),
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let reset = {
        let up = pump(&proxy, &link, &mut client_read, &mut server_write);
        let down = pump(&proxy, &link, &mut server_read, &mut client_write);
        tokio::select! {
            // One direction ended (its end of stream passed on, or a write failed): the
            // connection is over — PostgreSQL closes after its last message, and a client that
            // closed wants no answer.
            () = up => false,
            () = down => false,
            () = link.reset.notified() => true,
        }
    };
    if reset {
        proxy.resets.fetch_add(1, Ordering::Relaxed);
        // Closed with linger zero, a socket sends RST instead of FIN: both ends see a reset.
        let _ = client_read.as_ref().set_zero_linger();
        let _ = server_read.as_ref().set_zero_linger();
    }
}

/// Copies `from` to `to` chunk by chunk, delaying, throttling and stalling while lossy, until
/// end of stream (passed on as a half-close) or an error; a reset the dice decide is told to
/// `relay` through the link.
async fn pump(proxy: &Proxy, link: &Link, from: &mut OwnedReadHalf, to: &mut OwnedWriteHalf) {
    // Reading goes on while chunks wait out their delay, so a delay is a delay, not a window.
    let (chunks, mut waiting) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf).await
            && n > 0
        {
            let due = Instant::now() + proxy.delay();
            if chunks.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
        drop(chunks);
    };
    let write = async {
        while let Some((due, chunk)) = waiting.recv().await {
            sleep_until(due).await;
            if proxy.lossy.load(Ordering::SeqCst) && proxy.strikes(link) {
                link.reset.notify_one();
                // `relay` drops this pump now.
                std::future::pending::<()>().await;
            }
            let until = *link.stalled_until.lock().expect("stalled_until");
            sleep_until(until).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
            proxy.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            if proxy.lossy.load(Ordering::SeqCst) {
                let rate = proxy.args.rate_kib.max(1) * 1024;
                sleep(Duration::from_secs_f64(chunk.len() as f64 / rate as f64)).await;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

impl Proxy {
    /// This chunk's latency: none when clean.
    fn delay(&self) -> Duration {
        if !self.lossy.load(Ordering::SeqCst) {
            return Duration::ZERO;
        }
        let jitter = self.rng.lock().expect("rng").below(self.args.jitter_ms + 1);
        Duration::from_millis(self.args.delay_ms + jitter)
    }

    /// Rolls the dice for the time since the connection's last roll (or since lossy began):
    /// true when it is to be reset now; a stall is started on the link. The chance of an event
    /// of mean interval `m` within `t` is 1 − e^(−t/m).
    fn strikes(&self, link: &Link) -> bool {
        let now = Instant::now();
        let since = {
            let lossy_since = *self.lossy_since.lock().expect("lossy_since");
            let mut rolled_at = link.rolled_at.lock().expect("rolled_at");
            let since = now.duration_since((*rolled_at).max(lossy_since));
            *rolled_at = now;
            since.as_secs_f64()
        };
        let mut rng = self.rng.lock().expect("rng");
        let chance = |every: f64| 1.0 - (-since / every).exp();
        if rng.unit() < chance(self.args.reset_every_s) {
            return true;
        }
        if rng.unit() < chance(self.args.stall_every_s) {
            self.stalls.fetch_add(1, Ordering::Relaxed);
            *link.stalled_until.lock().expect("stalled_until") =
                now + Duration::from_millis(self.args.stall_ms);
        }
        false
    }
}

/// SplitMix64: small, seeded, good enough to pick delays and faults.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

//! Partitions and a bad link under load (issue 25): one PostgreSQL server in network namespace
//! A, the producers and most workers in B, the driver — its admin and check connections — and
//! one worker in C. B reaches A through a proxy in A (proxy.rs), clean until the lossy phase;
//! C reaches the server directly, on a link no fault touches.
//!
//! ```text
//!   B: w1…wN, cmd1, producers ── 10.77.1.0/24 ── A: proxy :6432 → server ── 10.77.2.0/24 ── C: driver, c1
//! ```
//!
//! No packet may leave the machine: every server and client runs in a namespace of the run's,
//! none has a default route (checked before anything connects, the run refuses otherwise), and
//! the only process in our own namespace, `run`, makes no connection at all — it builds the
//! namespaces, starts the scenario in C (`scenario`, `ip netns exec`) and tears everything down
//! after, whatever happened.
//!
//! Per round: B is cut from A for an eighth of a lease (everything carries on: no lease lost),
//! then for longer than a lease (B's leases end, their handlers are stopped first, c1 and B after
//! the heal take the jobs over, the late finishes are refused), then the proxy makes B's link
//! slow and lossy — latency, jitter, throttling, stalls longer than a lease, resets. Then the
//! checks: the common ones (checks.rs) and the partition's — notably that a worker stops its
//! handler before its lease ends on the server's clock, and never finishes a job after.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Args;
use leaseq_client::Client;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use crate::checks::{self, Check};
use crate::cluster::{Error, lookup_user, signal};
use crate::load::{
    self, DATABASE, Handler, Placement, Script, Seen, Workers, connect, in_netns, settle,
};
use crate::ops::{self, OpLog};
use crate::server::{Options, Server};

/// The library queue's lease. A partition shorter than the renewals' slack — a third of the
/// lease, less the stop margin, less TCP's resend of the request the partition ate (0.2, 0.6,
/// 1.4 s after it was sent) — is survived whenever it strikes; `SHORT` is well inside that.
const LEASE: Duration = Duration::from_secs(8);
const SHORT: Duration = Duration::from_secs(1);
/// Longer than a lease, with time for the maintenance worker (a quarter-second tick) to reclaim
/// every lease B held and for c1 to run the jobs again before the heal.
const LONG: Duration = Duration::from_secs(12);
/// A stall of the lossy link: longer than a lease, so that a worker whose connection stalls
/// mid-renewal must give its leases up.
const STALL: Duration = Duration::from_secs(10);

/// The links: A's side and B's of the partitioned one, A's side and C's of the other.
const A_FOR_B: &str = "10.77.1.1";
const B: &str = "10.77.1.2";
const A_FOR_C: &str = "10.77.2.1";
const C: &str = "10.77.2.2";
const PREFIX: u8 = 24;
const PROXY_PORT: u16 = 6432;

#[derive(Args, Clone)]
pub struct PartitionArgs {
    /// Where the server, the logs and report.json go (emptied first).
    #[arg(long, default_value = "target/faults/partition")]
    dir: PathBuf,
    /// The long profile: three rounds, a minute of lossy link each (about five minutes).
    #[arg(long)]
    long: bool,
    /// How many times the three faults are repeated (default 1; 3 with --long).
    #[arg(long)]
    rounds: Option<usize>,
    /// How long the link stays lossy per round (default 25 s; 60 s with --long).
    #[arg(long)]
    lossy_seconds: Option<u64>,
    /// Producers, each enqueueing one job per transaction.
    #[arg(long, default_value_t = 3)]
    producers: usize,
    /// Each producer's pause between transactions, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pace_ms: u64,
    /// Library worker processes in B (c1, in C, comes on top).
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// The proxy's random numbers (default: from the clock; the report names it).
    #[arg(long)]
    seed: Option<u64>,
    /// The `leaseq` CLI, for `leaseq work`.
    #[arg(long)]
    leaseq: PathBuf,
    /// A Python interpreter with the leaseq client installed, for the Python worker in B.
    #[arg(long, default_value = "python3")]
    python: PathBuf,
    /// Node.js, for the Node worker in B (it imports the client built in clients/node/dist).
    #[arg(long, default_value = "node")]
    node: PathBuf,
    /// The OS user that runs the server (when we are root).
    #[arg(long, env = "LEASEQ_RUN_AS")]
    run_as: Option<String>,
}

/// The run's three network namespaces.
#[derive(Args, Clone, Debug)]
pub struct Namespaces {
    /// The server's (and the proxy's).
    #[arg(long)]
    ns_a: String,
    /// The partitioned clients'.
    #[arg(long)]
    ns_b: String,
    /// The driver's and c1's.
    #[arg(long)]
    ns_c: String,
}

// ---------------------------------------------------------------------------------------------
// In our own namespace: the network, the scenario started inside it, the teardown.

/// Builds the namespaces, checks that none can route off the machine, runs `scenario` in C with
/// our own arguments (main.rs parsed them as `PartitionArgs` already: they are valid), and
/// removes every namespace and whatever still runs in them — on success, failure or Ctrl-C.
pub async fn run() -> Result<bool, Error> {
    let network = Network::create(std::process::id())?;
    network.check_isolated()?;
    let ns = &network.names;
    eprintln!(
        "namespaces {} (server, proxy), {} (clients), {} (driver, c1): no default route",
        ns.ns_a, ns.ns_b, ns.ns_c
    );
    // `leaseq-faults partition ARGS…` → `leaseq-faults partition-scenario --ns-… ARGS…`: there
    // is nothing before the subcommand, so our arguments are everything after it.
    let forwarded: Vec<OsString> = std::env::args_os().skip(2).collect();
    let mut scenario = in_netns(Some(&ns.ns_c), &std::env::current_exe()?)
        .arg("partition-scenario")
        .args(["--ns-a", &ns.ns_a, "--ns-b", &ns.ns_b, "--ns-c", &ns.ns_c])
        .args(forwarded)
        .kill_on_drop(true)
        .spawn()?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let status = tokio::select! {
        status = scenario.wait() => status?,
        // The scenario got the terminal's SIGINT too; a SIGTERM is passed on. Either way the
        // teardown below runs once it has ended.
        _ = interrupt.recv() => scenario.wait().await?,
        _ = terminate.recv() => {
            if let Some(pid) = scenario.id() {
                signal(pid, libc::SIGTERM);
            }
            scenario.wait().await?
        }
    };
    drop(network);
    match status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => Err(format!("the scenario ended with {status}").into()),
    }
}

/// Three namespaces joined at A by two veth pairs, made with `ip` inside the namespaces (no
/// device ever exists in ours); dropping it kills what still runs in them and deletes them.
struct Network {
    names: Namespaces,
    /// The namespaces made so far: only these are ours to delete.
    made: Vec<String>,
}

impl Network {
    fn create(id: u32) -> Result<Network, Error> {
        let name = |side: &str| format!("lqf-{id}-{side}");
        let mut network = Network {
            names: Namespaces {
                ns_a: name("a"),
                ns_b: name("b"),
                ns_c: name("c"),
            },
            made: Vec::new(),
        };
        let (a, b, c) = (
            network.names.ns_a.clone(),
            network.names.ns_b.clone(),
            network.names.ns_c.clone(),
        );
        for ns in [&a, &b, &c] {
            ip(&["netns", "add", ns])?;
            network.made.push(ns.clone());
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&[
            "-n", &a, "link", "add", "ab", "type", "veth", "peer", "name", "ba", "netns", &b,
        ])?;
        ip(&[
            "-n", &a, "link", "add", "ac", "type", "veth", "peer", "name", "ca", "netns", &c,
        ])?;
        for (ns, device, address) in [
            (&a, "ab", A_FOR_B),
            (&b, "ba", B),
            (&a, "ac", A_FOR_C),
            (&c, "ca", C),
        ] {
            let cidr = format!("{address}/{PREFIX}");
            ip(&["-n", ns, "addr", "add", &cidr, "dev", device])?;
            ip(&["-n", ns, "link", "set", device, "up"])?;
        }
        Ok(network)
    }

    /// Fails unless every namespace lacks a default route (IPv4 and IPv6) and finds no route to
    /// an address off the machine: a packet for anywhere else has nowhere to go.
    fn check_isolated(&self) -> Result<(), Error> {
        for ns in &self.made {
            for family in ["-4", "-6"] {
                let routes = ip(&["-n", ns, family, "route", "show", "default"])?;
                if !routes.trim().is_empty() {
                    return Err(format!("{ns} has a default route ({family}): {routes}").into());
                }
            }
            if let Ok(route) = ip(&["-n", ns, "route", "get", "203.0.113.1"]) {
                return Err(format!("{ns} routes off the machine: {route}").into());
            }
        }
        Ok(())
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Everything in our namespaces is ours: the scenario normally stops it all itself, this
        // is for a scenario that failed or was interrupted. TERM first (the server shuts down
        // cleanly), KILL what is left after five seconds.
        let running = |made: &[String]| -> Vec<u32> {
            made.iter()
                .filter_map(|ns| ip(&["netns", "pids", ns]).ok())
                .flat_map(|pids| {
                    pids.split_whitespace()
                        .filter_map(|p| p.parse().ok())
                        .collect::<Vec<u32>>()
                })
                .collect()
        };
        for pid in running(&self.made) {
            signal(pid, libc::SIGTERM);
        }
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end && !running(&self.made).is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
        for pid in running(&self.made) {
            signal(pid, libc::SIGKILL);
        }
        // A veth goes with the first of its two namespaces to go.
        for ns in &self.made {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("leaseq-faults: could not delete namespace {ns}: {e}");
            }
        }
    }
}

/// `ip ARGS…`; its stdout, or an error with its stderr.
fn ip(args: &[&str]) -> Result<String, Error> {
    let output = std::process::Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

// ---------------------------------------------------------------------------------------------
// In C: the scenario.

pub async fn scenario(args: PartitionArgs, ns: Namespaces) -> Result<bool, Error> {
    let started = Instant::now();
    let say = |what: &str| eprintln!("[{:6.1}s] {what}", started.elapsed().as_secs_f64());
    let rounds = args.rounds.unwrap_or(if args.long { 3 } else { 1 });
    let lossy_for =
        Duration::from_secs(
            args.lossy_seconds
                .unwrap_or(if args.long { 60 } else { 25 }),
        );
    let seed = args.seed.unwrap_or_else(|| ops::now().to_bits());
    let dir = crate::server::emptied(&args.dir)?;

    say(&format!("starting PostgreSQL in {}", ns.ns_a));
    let server = start_server(&dir.join("server"), &args, &ns).await?;
    let url = server.url(DATABASE);
    load::setup(&server.url("postgres"), &url, LEASE).await?;
    let mut proxy = Proxy::start(&ns.ns_a, server.port, &dir, seed).await?;
    let via_proxy =
        format!("postgres://postgres@{A_FOR_B}:{PROXY_PORT}/{DATABASE}?connect_timeout=2");
    let in_b = |name: String| Placement {
        name,
        url: via_proxy.clone(),
        netns: Some(ns.ns_b.clone()),
    };
    let mut library: Vec<Placement> = (1..=args.workers).map(|n| in_b(format!("w{n}"))).collect();
    library.push(Placement {
        name: "c1".into(),
        url: url.clone(),
        netns: None,
    });
    let mut workers = Workers::spawn(
        &dir,
        &args.leaseq,
        &library,
        &in_b("cmd1".into()),
        Handler::Mixed,
    )?;
    workers.spawn_script(&dir, Script::Python, &args.python, &in_b("py1".into()))?;
    workers.spawn_script(&dir, Script::Node, &args.node, &in_b("nd1".into()))?;
    let mut producers = in_netns(Some(&ns.ns_b), &std::env::current_exe()?)
        .args(["producers", "--dir"])
        .arg(&dir)
        .args(["--count", &args.producers.to_string()])
        .args(["--pace-ms", &args.pace_ms.to_string()])
        // Jobs of 0.1 to 0.5 s, and one in 25 of six seconds — renewed while it runs (two thirds
        // of a lease is 5.3 s): about three quarters of the slots busy, so that a partition finds
        // B's workers holding leases, some of them mid-renewal.
        .args([
            "--short-ms",
            "100",
            "--long-every",
            "25",
            "--long-ms",
            "6000",
        ])
        .env("DATABASE_URL", &via_proxy)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(dir.join("producers.log"))?)
        .kill_on_drop(true)
        .spawn()?;
    let admin = connect(&url, Duration::from_secs(30)).await?;
    tokio::time::sleep(Duration::from_secs(4)).await;

    for round in 1..=rounds {
        say(&format!(
            "round {round}: {} cut from {} for {SHORT:?} (an eighth of a lease)",
            ns.ns_b, ns.ns_a
        ));
        partition(&admin, &ns, "short partition", SHORT).await?;
        // Any lease it broke ends within a lease: before the next fault.
        tokio::time::sleep(LEASE + Duration::from_secs(1)).await;
        say(&format!(
            "cut for {LONG:?} (longer than the {LEASE:?} lease)"
        ));
        partition(&admin, &ns, "long partition", LONG).await?;
        tokio::time::sleep(LEASE).await;
        say(&format!(
            "a slow, lossy link through the proxy for {lossy_for:?} (stalls of {STALL:?}, resets)"
        ));
        lossy(&admin, &proxy, lossy_for).await?;
        // Stalls begun before the link was clean again last this long.
        tokio::time::sleep(STALL + Duration::from_secs(2)).await;
    }

    say("stopping the producers; waiting for every job to be final");
    if let Some(pid) = producers.id() {
        signal(pid, libc::SIGTERM);
    }
    producers.wait().await?;
    settle(&url, Duration::from_secs(180)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut seen = Seen {
        burst_seconds: load::burst(&url, &OpLog::create(&dir.join("ops/burst.jsonl"))?).await?,
        ..Seen::default()
    };
    say(&format!(
        "jobs enqueued to idle workers were final after {:.2}s",
        seen.burst_seconds
    ));
    seen.workers_exited = workers.stop().await?;
    let proxied = proxy.stop().await?;

    say("loading every client's log; checking");
    let loaded = ops::load(&admin, &dir.join("ops")).await?;
    let count = |key: &str| proxied[key].as_i64().unwrap_or(0);
    let proxy_figures = [
        ("proxy: connections", count("connections")),
        ("proxy: stalls longer than a lease", count("stalls")),
        ("proxy: connections reset", count("resets")),
    ];
    let mut report = checks::run(
        &admin,
        &workers.names(),
        &seen,
        &[checks::ACKNOWLEDGED, checks::COMMON, checks::PARTITION],
        &[checks::PARTITION_FIGURES],
    )
    .await?;
    report.extend(proxy_figures.map(|(name, value)| Check::figure(name, value)));
    let ok = checks::print("checked on the server", &report);
    let json = json!({
        "ops_loaded": loaded,
        "rounds": rounds,
        "lease_seconds": LEASE.as_secs_f64(),
        "short_partition_seconds": SHORT.as_secs_f64(),
        "long_partition_seconds": LONG.as_secs_f64(),
        "lossy_seconds": lossy_for.as_secs_f64(),
        "proxy": proxied,
        "burst_seconds": seen.burst_seconds,
    });
    let path = checks::write_report(&dir, json, &report, ok, started.elapsed().as_secs_f64())?;
    say(&format!("report: {}", path.display()));
    server.stop().await?;
    Ok(ok)
}

/// The server in A, listening for C on A's side of their link and for the proxy on A's own
/// loopback — not on the partitioned link: B reaches it through the proxy only.
async fn start_server(dir: &Path, args: &PartitionArgs, ns: &Namespaces) -> Result<Server, Error> {
    std::fs::create_dir_all(dir)?;
    // SAFETY: geteuid cannot fail.
    if let Some(user) = args.run_as.as_deref().filter(|u| !u.is_empty())
        && unsafe { libc::geteuid() } == 0
    {
        let (uid, gid) = lookup_user(user)?;
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    }
    let server = Server::init(
        dir,
        Options {
            run_as: args.run_as.clone(),
            host: Some(A_FOR_C.into()),
            netns: Some(ns.ns_a.clone()),
            also_listen: vec!["127.0.0.1".into()],
            trust: vec![format!("{C}/32")],
            ..Options::default()
        },
    )
    .await?;
    server.start().await?;
    Ok(server)
}

/// The partition's rules: each side drops what arrives from the other, in its input hook. Not in
/// the output hook: there the kernel tells the sender at once (`connect` fails with EPERM),
/// where a real partition says nothing — packets vanish and TCP waits and resends.
fn cut_rules(device: &str) -> String {
    format!(
        "table inet lqf_partition {{
           chain input {{
             type filter hook input priority 0; policy accept;
             iifname \"{device}\" drop
           }}
         }}"
    )
}

/// Cuts B from A for `length`, heals, and records the fault with its window.
async fn partition(
    admin: &Client,
    ns: &Namespaces,
    kind: &str,
    length: Duration,
) -> Result<(), Error> {
    let began = ops::now();
    nft(&ns.ns_a, &["-f", "-"], Some(&cut_rules("ab"))).await?;
    nft(&ns.ns_b, &["-f", "-"], Some(&cut_rules("ba"))).await?;
    tokio::time::sleep(length).await;
    for side in [&ns.ns_b, &ns.ns_a] {
        nft(side, &["delete", "table", "inet", "lqf_partition"], None).await?;
    }
    record(admin, kind, began).await
}

/// The link through the proxy lossy for `length`, then clean again; recorded with its window.
async fn lossy(admin: &Client, proxy: &Proxy, length: Duration) -> Result<(), Error> {
    let began = ops::now();
    signal(proxy.pid, libc::SIGUSR1);
    tokio::time::sleep(length).await;
    signal(proxy.pid, libc::SIGUSR2);
    record(admin, "lossy link", began).await
}

async fn record(admin: &Client, kind: &str, began: f64) -> Result<(), Error> {
    admin
        .raw()
        .execute(
            "INSERT INTO faults.faults (kind, began_at) VALUES ($1, to_timestamp($2))",
            &[&kind, &began],
        )
        .await?;
    Ok(())
}

/// `nft ARGS…` in namespace `ns`, with `input` on its stdin.
async fn nft(ns: &str, args: &[&str], input: Option<&str>) -> Result<(), Error> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped");
    stdin.write_all(input.unwrap_or("").as_bytes()).await?;
    drop(stdin);
    let output = child.wait_with_output().await?;
    if !output.status.success() {
        return Err(format!(
            "nft {} in {ns}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// The proxy process (proxy.rs), in A, between B and the server.
struct Proxy {
    child: Child,
    pid: u32,
    output: Lines<BufReader<ChildStdout>>,
}

impl Proxy {
    /// Starts it on A's side of B's link, in front of the server's `port` on A's loopback, and
    /// waits until it listens.
    async fn start(ns_a: &str, port: u16, dir: &Path, seed: u64) -> Result<Proxy, Error> {
        let mut child = in_netns(Some(ns_a), &std::env::current_exe()?)
            .arg("proxy")
            .args(["--listen", &format!("{A_FOR_B}:{PROXY_PORT}")])
            .args(["--upstream", &format!("127.0.0.1:{port}")])
            .args(["--stall-ms", &STALL.as_millis().to_string()])
            .args(["--seed", &seed.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("proxy.log"))?)
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().ok_or("the proxy exited at once")?;
        let mut output = BufReader::new(child.stdout.take().expect("piped")).lines();
        match tokio::time::timeout(Duration::from_secs(30), output.next_line()).await {
            Ok(Ok(Some(line))) if line.starts_with("listening") => {}
            other => return Err(format!("the proxy did not start: {other:?}").into()),
        }
        Ok(Proxy { child, pid, output })
    }

    /// SIGTERM; what it reports having done.
    async fn stop(&mut self) -> Result<serde_json::Value, Error> {
        signal(self.pid, libc::SIGTERM);
        let report = self
            .output
            .next_line()
            .await?
            .ok_or("the proxy said nothing")?;
        self.child.wait().await?;
        Ok(serde_json::from_str(&report)?)
    }
}

//! A real high-availability cluster on this machine: one etcd member and three PostgreSQL 15 nodes
//! under Patroni (synchronous mode, strict, by default), each node's server preloading leaseq.
//! Three data nodes, not two: with two in strict mode the new primary's first commit waits until
//! the old one rejoins. Everything listens on 127.0.0.1 only.
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::{Child, Command};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Patroni's clock: the leader key lives `TTL` seconds, refreshed every `LOOP_WAIT`; a dead
/// primary is replaced within about `TTL` + `LOOP_WAIT` (ttl ≥ loop_wait + 2 × retry_timeout).
const TTL: u32 = 6;
const LOOP_WAIT: u32 = 1;
const RETRY_TIMEOUT: u32 = 2;

pub struct Node {
    pub name: String,
    pub pg_port: u16,
    api_port: u16,
    data: PathBuf,
    config: PathBuf,
    log: PathBuf,
    patroni: Option<Child>,
}

pub struct Cluster {
    dir: PathBuf,
    /// The unprivileged user the servers run as (uid, gid), when we are root.
    user: Option<(u32, u32)>,
    etcd: Option<Child>,
    pub nodes: Vec<Node>,
    synchronous: bool,
}

/// A member of the cluster as Patroni's REST API describes it.
#[derive(Debug)]
pub struct Member {
    pub name: String,
    pub role: String,
    pub state: String,
}

impl Cluster {
    /// etcd and three Patroni nodes in `dir` (an empty directory), up and replicating.
    pub async fn start(
        dir: &Path,
        run_as: Option<&str>,
        synchronous: bool,
    ) -> Result<Cluster, Error> {
        let user = match run_as.filter(|u| !u.is_empty()) {
            Some(name) if unsafe { libc::geteuid() } == 0 => Some(lookup_user(name)?),
            _ => None,
        };
        let etcd_port = free_port()?;
        let etcd_log = std::fs::File::create(dir.join("etcd.log"))?;
        let etcd = Command::new("etcd")
            .args(["--name", "e1", "--data-dir"])
            .arg(dir.join("etcd"))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"))
            .arg(format!(
                "--advertise-client-urls=http://127.0.0.1:{etcd_port}"
            ))
            .arg(format!(
                "--listen-peer-urls=http://127.0.0.1:{}",
                free_port()?
            ))
            .stdout(Stdio::null())
            .stderr(etcd_log)
            .kill_on_drop(true)
            .spawn()?;
        let mut cluster = Cluster {
            dir: dir.to_path_buf(),
            user,
            etcd: Some(etcd),
            nodes: Vec::new(),
            synchronous,
        };
        for n in 1..=3 {
            let node = Node {
                name: format!("n{n}"),
                pg_port: free_port()?,
                api_port: free_port()?,
                data: dir.join(format!("n{n}")),
                config: dir.join(format!("n{n}.yml")),
                log: dir.join(format!("n{n}.log")),
                patroni: None,
            };
            std::fs::write(
                &node.config,
                patroni_config(&node, etcd_port, dir, synchronous),
            )?;
            cluster.nodes.push(node);
        }
        // The first node bootstraps alone (it takes the leader key), the others clone it.
        cluster.start_node(0)?;
        cluster
            .wait_for_leader(None, Duration::from_secs(90))
            .await?;
        cluster.start_node(1)?;
        cluster.start_node(2)?;
        cluster.wait_healthy(Duration::from_secs(120)).await?;
        Ok(cluster)
    }

    /// A multi-host URL naming every node: a client lands on whichever accepts writes.
    pub fn url(&self, database: &str) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.pg_port))
            .collect();
        format!(
            "postgres://postgres@{}/{database}?target_session_attrs=read-write&connect_timeout=2",
            hosts.join(",")
        )
    }

    /// One node's own URL (whatever its role).
    pub fn node_url(&self, i: usize, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}?connect_timeout=2",
            self.nodes[i].pg_port
        )
    }

    pub fn start_node(&mut self, i: usize) -> Result<(), Error> {
        let node = &mut self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)?;
        let mut command = std::process::Command::new("patroni");
        command
            .arg(&node.config)
            .env("HOME", &self.dir)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some((uid, gid)) = self.user {
            command.uid(uid).gid(gid);
        }
        node.patroni = Some(Command::from(command).kill_on_drop(true).spawn()?);
        Ok(())
    }

    /// The node dies as a machine would: its Patroni, its postmaster and every backend get
    /// SIGKILL at once (Patroni first, or it would start the server again). Its connections
    /// break without a goodbye; whatever its WAL had not sent is gone with it.
    pub async fn kill_node(&mut self, i: usize) -> Result<(), Error> {
        let node = &mut self.nodes[i];
        if let Some(mut patroni) = node.patroni.take() {
            patroni.start_kill()?;
            patroni.wait().await?;
        }
        if let Some(pid) = postmaster_pid(&node.data) {
            let mut doomed = children(pid);
            doomed.push(pid);
            for &p in &doomed {
                signal(p, libc::SIGKILL);
            }
            let end = Instant::now() + Duration::from_secs(30);
            while Instant::now() < end && doomed.iter().any(|&p| alive(p)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    /// SIGSTOP (`stall`) or SIGCONT the leader's WAL senders: while stalled, the primary
    /// commits alone (asynchronous replication), and what it commits reaches no other node — not
    /// even a standby's socket buffer, which a stalled receiver would still read afterwards.
    pub fn stall_replication(&self, leader: usize, stall: bool) {
        let Some(postmaster) = postmaster_pid(&self.nodes[leader].data) else {
            return;
        };
        for child in children(postmaster) {
            let title = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&title).contains("walsender") {
                signal(child, if stall { libc::SIGSTOP } else { libc::SIGCONT });
            }
        }
    }

    /// SIGKILL to the node's postmaster alone: its backends live on until they notice, and
    /// Patroni, still holding the leader key, starts the server again (crash recovery).
    pub fn kill_postmaster(&self, i: usize) {
        if let Some(pid) = postmaster_pid(&self.nodes[i].data) {
            signal(pid, libc::SIGKILL);
        }
    }

    /// Every member Patroni knows, from the first node whose REST API answers.
    pub async fn members(&self) -> Result<Vec<Member>, Error> {
        let mut last: Error = "no node answered".into();
        for node in &self.nodes {
            if node.patroni.is_none() {
                continue;
            }
            match get_json(format!("http://127.0.0.1:{}/cluster", node.api_port)).await {
                Ok(cluster) => {
                    return Ok(cluster["members"]
                        .as_array()
                        .map(|members| {
                            members
                                .iter()
                                .map(|m| Member {
                                    name: m["name"].as_str().unwrap_or("").into(),
                                    role: m["role"].as_str().unwrap_or("").into(),
                                    state: m["state"].as_str().unwrap_or("").into(),
                                })
                                .collect()
                        })
                        .unwrap_or_default());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The index of the running leader, if there is one.
    pub async fn leader(&self) -> Option<usize> {
        let members = self.members().await.ok()?;
        let leader = members
            .iter()
            .find(|m| m.role == "leader" && m.state == "running")?;
        self.nodes.iter().position(|n| n.name == leader.name)
    }

    /// Waits for a running leader other than `not` (a node just killed or stepping down, which
    /// Patroni names until its leader key expires).
    pub async fn wait_for_leader(
        &self,
        not: Option<usize>,
        limit: Duration,
    ) -> Result<usize, Error> {
        let end = Instant::now() + limit;
        loop {
            if let Some(i) = self.leader().await
                && Some(i) != not
            {
                return Ok(i);
            }
            if Instant::now() > end {
                return Err(format!("no leader after {limit:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until a leader runs and every node replicates from it — in synchronous mode, one of
    /// them named the synchronous standby: until then strict mode promotes nobody if the leader
    /// dies, by design (seen here after the leader restarted in place). Returns the leader.
    pub async fn wait_healthy(&self, limit: Duration) -> Result<usize, Error> {
        let end = Instant::now() + limit;
        loop {
            if let Ok(members) = self.members().await {
                let running = |m: &&Member| m.state == "running" || m.state == "streaming";
                let leaders = members
                    .iter()
                    .filter(running)
                    .filter(|m| m.role == "leader")
                    .count();
                let replicas = members
                    .iter()
                    .filter(running)
                    .filter(|m| m.role == "replica" || m.role == "sync_standby")
                    .count();
                let synced = !self.synchronous || members.iter().any(|m| m.role == "sync_standby");
                if leaders == 1
                    && replicas == self.nodes.len() - 1
                    && synced
                    && let Some(i) = self.leader().await
                {
                    return Ok(i);
                }
            }
            if Instant::now() > end {
                return Err(format!(
                    "the cluster was not healthy after {limit:?}: {:?}",
                    self.members().await
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// A planned switchover through Patroni's REST API: the leader steps down, a synchronous
    /// standby takes over.
    pub async fn switchover(&self) -> Result<usize, Error> {
        let leader = self.wait_for_leader(None, Duration::from_secs(30)).await?;
        let node = &self.nodes[leader];
        let url = format!("http://127.0.0.1:{}/switchover", node.api_port);
        let body = format!(r#"{{"leader": "{}"}}"#, node.name);
        tokio::task::spawn_blocking(move || {
            ureq::post(&url)
                .header("Content-Type", "application/json")
                .send(&body)
                .map(|_| ())
        })
        .await??;
        self.wait_for_leader(Some(leader), Duration::from_secs(60))
            .await
    }

    /// Stops every node (Patroni stops its server) and etcd.
    pub async fn stop(&mut self) {
        for node in &mut self.nodes {
            if let Some(patroni) = &node.patroni
                && let Some(pid) = patroni.id()
            {
                signal(pid, libc::SIGTERM);
            }
        }
        for node in &mut self.nodes {
            if let Some(mut patroni) = node.patroni.take() {
                let _ = tokio::time::timeout(Duration::from_secs(30), patroni.wait()).await;
            }
        }
        self.kill_everything();
    }

    fn kill_everything(&mut self) {
        for node in &mut self.nodes {
            if let Some(patroni) = node.patroni.take()
                && let Some(pid) = patroni.id()
            {
                signal(pid, libc::SIGKILL);
            }
            // SIGQUIT: PostgreSQL's immediate shutdown, children included.
            if let Some(pid) = postmaster_pid(&node.data) {
                signal(pid, libc::SIGQUIT);
            }
        }
        if let Some(etcd) = self.etcd.take()
            && let Some(pid) = etcd.id()
        {
            signal(pid, libc::SIGKILL);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_everything();
    }
}

fn patroni_config(node: &Node, etcd_port: u16, dir: &Path, synchronous: bool) -> String {
    let (name, pg, api, data) = (&node.name, node.pg_port, node.api_port, node.data.display());
    let dir = dir.display();
    format!(
        "scope: leaseq-faults
name: {name}
restapi:
  listen: 127.0.0.1:{api}
  connect_address: 127.0.0.1:{api}
etcd3:
  host: 127.0.0.1:{etcd_port}
watchdog:
  mode: off
bootstrap:
  dcs:
    ttl: {TTL}
    loop_wait: {LOOP_WAIT}
    retry_timeout: {RETRY_TIMEOUT}
    maximum_lag_on_failover: 1073741824
    synchronous_mode: {synchronous}
    synchronous_mode_strict: {synchronous}
    postgresql:
      use_pg_rewind: true
      remove_data_directory_on_rewind_failure: true
      parameters:
        wal_log_hints: 'on'
        shared_preload_libraries: leaseq
        leaseq.maintenance_databases: leaseq_faults
        max_connections: 200
        wal_keep_size: 512MB
        fsync: 'on'
  initdb:
  - encoding: UTF8
  - locale: C.UTF-8
  pg_hba:
  - host replication all 127.0.0.1/32 trust
  - host all all 127.0.0.1/32 trust
  - local all all trust
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {data}
  bin_dir: /usr/lib/postgresql/15/bin
  pgpass: {dir}/pgpass-{name}
  authentication:
    replication:
      username: replicator
    superuser:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: '{dir}'
"
    )
}

async fn get_json(url: String) -> Result<Value, Error> {
    let body = tokio::task::spawn_blocking(move || -> Result<String, ureq::Error> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        agent.get(&url).call()?.body_mut().read_to_string()
    })
    .await??;
    Ok(serde_json::from_str(&body)?)
}

pub fn lookup_user(name: &str) -> Result<(u32, u32), Error> {
    let c_name = std::ffi::CString::new(name)?;
    // SAFETY: getpwnam reads the passwd database; the result is copied before any other call.
    let entry = unsafe { libc::getpwnam(c_name.as_ptr()) };
    if entry.is_null() {
        return Err(format!("no OS user {name}").into());
    }
    // SAFETY: checked non-null above.
    Ok(unsafe { ((*entry).pw_uid, (*entry).pw_gid) })
}

pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn postmaster_pid(data: &Path) -> Option<u32> {
    std::fs::read_to_string(data.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// The processes `pid` started (a postmaster's backends and helpers).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `pid` still runs (a zombie waiting for its reaper does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

pub fn signal(pid: u32, signal: i32) {
    // SAFETY: signals a process this run started (or one of its servers).
    unsafe { libc::kill(pid as i32, signal) };
}

//! One PostgreSQL 15 server a scenario owns: its own data directory, preloading leaseq (the
//! maintenance worker on the run's database), started and stopped with pg_ctl as the
//! unprivileged user — optionally inside a network namespace (`ip netns exec`), with pg_wal on
//! a directory of the scenario's choosing, or with extra environment (LD_PRELOAD for
//! libfaketime) — or a streaming standby of another (`pg_basebackup -R`).
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use crate::cluster::{Error, free_port, lookup_user};
use crate::load::DATABASE;

const BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct Server {
    pub data: PathBuf,
    pub host: String,
    pub port: u16,
    also_listen: Vec<String>,
    run_as: Option<String>,
    netns: Option<String>,
    env: Vec<(String, String)>,
    settings: Vec<String>,
    /// The server's log (pg_ctl -l): the scenarios read what it said.
    pub log: PathBuf,
}

/// How a server is made; `Server::init` takes it.
#[derive(Default)]
pub struct Options {
    /// The OS user that runs it (when we are root).
    pub run_as: Option<String>,
    /// Listen here (default 127.0.0.1), inside this network namespace (default: ours).
    pub host: Option<String>,
    pub netns: Option<String>,
    /// More addresses to listen on (`url` names `host`).
    pub also_listen: Vec<String>,
    /// Networks trusted besides 127.0.0.1 (CIDR, one `pg_hba.conf` line each).
    pub trust: Vec<String>,
    /// `initdb --waldir`: pg_wal somewhere else (a small filesystem).
    pub wal_dir: Option<PathBuf>,
    /// `initdb --wal-segsize`, in MB: small segments make a small pg_wal meaningful.
    pub wal_segment_mb: Option<u32>,
    /// Extra environment for the server (LD_PRELOAD, FAKETIME…).
    pub env: Vec<(String, String)>,
    /// Extra `-c name=value` settings.
    pub settings: Vec<String>,
}

impl Server {
    /// initdb under `dir/data` (`dir` must be the run's user's).
    pub async fn init(dir: &Path, options: Options) -> Result<Server, Error> {
        let data = dir.join("data");
        let (wal_dir, wal_segment_mb) = (options.wal_dir.clone(), options.wal_segment_mb);
        let trust = options.trust.clone();
        let server = Server::new(dir, options)?;
        let mut initdb = vec![
            format!("{BIN}/initdb"),
            "-D".into(),
            data.display().to_string(),
            "-U".into(),
            "postgres".into(),
            "--auth=trust".into(),
            "-E".into(),
            "UTF8".into(),
            "--locale=C.UTF-8".into(),
        ];
        if let Some(wal) = wal_dir {
            initdb.push(format!("--waldir={}", wal.display()));
        }
        if let Some(mb) = wal_segment_mb {
            initdb.push(format!("--wal-segsize={mb}"));
        }
        server.run(&initdb, false).await?;
        if !trust.is_empty() {
            let lines: String = trust
                .iter()
                .map(|cidr| format!("host all all {cidr} trust\n"))
                .collect();
            std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("pg_hba.conf"))?
                .write_all(lines.as_bytes())?;
        }
        Ok(server)
    }

    /// A standby of `primary` under `dir/data`: `pg_basebackup -R` (primary_conninfo and
    /// standby.signal written, WAL streamed during the copy). Started, it streams from `primary`
    /// as `cluster_name` (set it in `options.settings` to name it in synchronous_standby_names).
    pub async fn standby(dir: &Path, primary: &Server, options: Options) -> Result<Server, Error> {
        let server = Server::new(dir, options)?;
        let basebackup = [
            format!("{BIN}/pg_basebackup"),
            "-h".into(),
            primary.host.clone(),
            "-p".into(),
            primary.port.to_string(),
            "-U".into(),
            "postgres".into(),
            "-D".into(),
            server.data.display().to_string(),
            "-R".into(),
            "-X".into(),
            "stream".into(),
            "-c".into(),
            "fast".into(),
        ];
        server.run(&basebackup, false).await?;
        Ok(server)
    }

    fn new(dir: &Path, options: Options) -> Result<Server, Error> {
        Ok(Server {
            data: dir.join("data"),
            host: options.host.unwrap_or_else(|| "127.0.0.1".into()),
            port: free_port()?,
            also_listen: options.also_listen,
            run_as: options.run_as.filter(|u| !u.is_empty() && is_root()),
            netns: options.netns,
            env: options.env,
            settings: options.settings,
            log: dir.join("server.log"),
        })
    }

    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@{}:{}/{database}?connect_timeout=2",
            self.host, self.port
        )
    }

    /// pg_ctl start, waiting until it accepts connections.
    pub async fn start(&self) -> Result<(), Error> {
        let listen = std::iter::once(&self.host)
            .chain(&self.also_listen)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(",");
        let mut options = format!(
            "-p {} -c listen_addresses={listen} -k {} -c shared_preload_libraries=leaseq \
             -c leaseq.maintenance_databases={DATABASE} -c max_connections=100 -c fsync=on",
            self.port,
            self.data.parent().expect("data has a parent").display()
        );
        for setting in &self.settings {
            options.push_str(" -c ");
            options.push_str(setting);
        }
        self.pg_ctl(&[
            "-w",
            "-t",
            "120",
            "-o",
            &options,
            "-l",
            &self.log.display().to_string(),
            "start",
        ])
        .await
    }

    /// `pg_ctl stop -m immediate`: a crash without a checkpoint (it recovers at the next start).
    #[allow(
        dead_code,
        reason = "the wal-full scenario's (branch faults-disk), not partition's"
    )]
    pub async fn crash(&self) -> Result<(), Error> {
        self.pg_ctl(&["-m", "immediate", "-w", "stop"]).await
    }

    pub async fn stop(&self) -> Result<(), Error> {
        self.pg_ctl(&["-m", "fast", "-w", "-t", "60", "stop"]).await
    }

    /// `pg_ctl promote`, waiting until the standby accepts writes.
    pub async fn promote(&self) -> Result<(), Error> {
        self.pg_ctl(&["-w", "-t", "60", "promote"]).await
    }

    /// Whether a postmaster runs on the data directory.
    #[allow(
        dead_code,
        reason = "the wal-full scenario's (branch faults-disk), not partition's"
    )]
    pub async fn running(&self) -> bool {
        self.pg_ctl(&["status"]).await.is_ok()
    }

    async fn pg_ctl(&self, args: &[&str]) -> Result<(), Error> {
        let mut argv = vec![
            format!("{BIN}/pg_ctl"),
            "-D".into(),
            self.data.display().to_string(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        self.run(&argv, true).await
    }

    /// `argv` as the server's user, in its namespace, with its environment.
    async fn run(&self, argv: &[String], with_env: bool) -> Result<(), Error> {
        let mut full: Vec<String> = Vec::new();
        if let Some(ns) = &self.netns {
            full.extend(["ip", "netns", "exec", ns].map(String::from));
        }
        if let Some(user) = &self.run_as {
            full.extend(["runuser", "-u", user, "--"].map(String::from));
        }
        if with_env && !self.env.is_empty() {
            full.push("env".into());
            full.extend(self.env.iter().map(|(k, v)| format!("{k}={v}")));
        }
        full.extend(argv.iter().cloned());
        let output = Command::new(&full[0])
            .args(&full[1..])
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .await?;
        if !output.status.success() {
            return Err(format!(
                "{} failed: {}{}",
                argv.join(" "),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGQUIT: immediate shutdown, children included; nothing is left running after a run.
        if let Some(pid) = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse::<u32>().ok())
        {
            crate::cluster::signal(pid, libc::SIGQUIT);
        }
    }
}

/// `dir`, created if need be and emptied of a previous run's servers and logs; its full path.
pub fn emptied(dir: &Path) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(dir)?;
    let dir = std::fs::canonicalize(dir)?;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(dir)
}

/// `dir`, created if need be and handed to the servers' user (`run_as`, when we are root): the
/// run's directory must be theirs to write logs and data in.
pub fn owned_dir(dir: &Path, run_as: Option<&str>) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(dir)?;
    if let Some(user) = run_as.filter(|u| !u.is_empty() && is_root()) {
        let (uid, gid) = lookup_user(user)?;
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    }
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    Ok(std::fs::canonicalize(dir)?)
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

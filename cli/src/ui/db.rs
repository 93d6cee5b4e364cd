//! The console's database side: one pool, and per request one transaction that first takes the
//! operator's role (`--role-header`) so that every function call is checked as that role.
//! A refusal is a `UiError::Db`, its HTTP status the SQLSTATE's (`app`).
use std::cell::Cell;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::app::{App, UiError};
use super::auth;

/// Connections kept: pages are a handful of short function calls, so a few serve many tabs.
const POOL_SIZE: usize = 8;

const SET_ROLE: &str = "SELECT pg_catalog.set_config('role', $1, true)";

tokio::task_local! {
    /// Time spent in the database by the current request, for its `Server-Timing` header.
    pub static DB_TIME: Cell<Duration>;
}

pub fn pool(url: &str) -> Result<Pool, Box<dyn std::error::Error>> {
    // TLS as the URL's sslmode and sslrootcert ask; `leaseq` refused bad ones at start.
    let (mut config, tls) = leaseq_client::tls::configure(url)?;
    if config.get_application_name().is_none() {
        config.application_name("leaseq ui");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    let manager = Manager::from_config(
        config,
        tls,
        // Statements prepared on a connection stay cached on it (`prepare_cached`): a recycle
        // that ran DISCARD ALL would throw them away.
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Ok(Pool::builder(manager)
        .max_size(POOL_SIZE)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(Duration::from_secs(10)))
        .build()?)
}

impl App {
    /// This request's transaction, as the operator's role when `--role-header` is set.
    pub async fn begin(&self, headers: &HeaderMap) -> Result<Db, UiError> {
        let role = auth::role(self, headers)?;
        Db::begin(&self.pool, role.as_deref()).await
    }
}

/// One request's transaction. Dropped without `commit`, it is rolled back before its connection
/// returns to the pool.
pub struct Db {
    client: Option<Object>,
}

impl Db {
    /// Takes a connection and begins; with `role`, the transaction runs as that role
    /// (`set_config(.., true)`: local to the transaction, parameterised, never spliced into SQL).
    pub async fn begin(pool: &Pool, role: Option<&str>) -> Result<Db, UiError> {
        let started = Instant::now();
        let client = pool.get().await.map_err(|e| {
            let said = match &e {
                deadpool_postgres::PoolError::Backend(e) => leaseq_client::describe(e),
                other => other.to_string(),
            };
            UiError::Unavailable(format!("no database connection: {said}"))
        })?;
        let db = Db {
            client: Some(client),
        };
        let result = db.connection().batch_execute("BEGIN").await;
        add_time(started);
        result?;
        if let Some(role) = role {
            db.query(SET_ROLE, &[&role]).await?;
        }
        Ok(db)
    }

    fn connection(&self) -> &Object {
        self.client
            .as_ref()
            .expect("a Db holds its connection until dropped")
    }

    pub async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, UiError> {
        let started = Instant::now();
        let client = self.connection();
        let result = async {
            let statement = client.prepare_cached(sql).await?;
            client.query(&statement, params).await
        }
        .await;
        add_time(started);
        Ok(result?)
    }

    pub async fn query_one(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, UiError> {
        let mut rows = self.query(sql, params).await?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            n => Err(UiError::Internal(format!("expected one row, got {n}"))),
        }
    }

    pub async fn commit(mut self) -> Result<(), UiError> {
        let started = Instant::now();
        let client = self.client.take().expect("committed once");
        let result = client.batch_execute("COMMIT").await;
        add_time(started);
        Ok(result?)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            // A failed call aborted the transaction: end it before another request gets this
            // connection (the pool's fast recycle does not look at transaction state).
            tokio::spawn(async move {
                if client.batch_execute("ROLLBACK").await.is_err() {
                    let _ = Object::take(client);
                }
            });
        }
    }
}

fn add_time(started: Instant) {
    let _ = DB_TIME.try_with(|t| t.set(t.get() + started.elapsed()));
}

//! The console's database side: one pool, and per request one transaction that first takes the
//! operator's role (`--role-header`) so that every function call is checked as that role.
//!
//! Errors map to HTTP by SQLSTATE: the database decides who may do what and which inputs are
//! valid, and its message is shown as it said it.
use std::cell::Cell;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::layout;

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

impl axum::response::IntoResponse for UiError {
    fn into_response(self) -> axum::response::Response {
        let status = self.status();
        if status.is_server_error() {
            eprintln!("leaseq ui: {}", self.message());
        }
        (
            status,
            layout::error_page(status, &self.message(), self.hint()),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

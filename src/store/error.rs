//! What can go wrong in storage, told apart so callers can act on it: a conflict
//! (a unique key or a conditional update found the row taken) is retried or
//! answered with a 409, a missing row is a 404, a database that cannot be reached
//! is worth retrying, and a row that does not read back is a fault to report.

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique key or constraint refused the write: another writer got there first.
    #[error("the write conflicts with another: {0}")]
    Conflict(#[source] sqlx::Error),
    /// The row that had to be there is not.
    #[error("no such row")]
    NotFound,
    /// The database (or this process's writer) cannot be reached now.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// A stored row does not read back (an unknown state, JSON that does not parse).
    #[error("a stored row is corrupt: {0}")]
    Corrupt(String),
    /// The work is no longer this process's: its lease lapsed and another
    /// process claimed it (`ownership`). The work stops; nothing more of it is
    /// written or told.
    #[error("another process took this work over when this one's lease lapsed")]
    TakenOver,
    /// Anything else the database said.
    #[error(transparent)]
    Database(sqlx::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> StoreError {
        match e {
            sqlx::Error::RowNotFound => StoreError::NotFound,
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e.to_string()),
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(e.to_string())
            }
            sqlx::Error::Database(ref db) if db.is_unique_violation() => StoreError::Conflict(e),
            sqlx::Error::Database(ref db) if db.code().as_deref().is_some_and(out_of_reach) => {
                StoreError::Unavailable(e.to_string())
            }
            e => StoreError::Database(e),
        }
    }
}

impl StoreError {
    /// Whether a failed write may succeed if tried again: the database out of
    /// reach, or busy or locked by another writer (SQLite's busy and locked
    /// codes, PostgreSQL's serialization failure, deadlock and lock timeout). A
    /// constraint, a type or a syntax error will not change by waiting.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Unavailable(_) => true,
            StoreError::Database(e) => e
                .as_database_error()
                .and_then(|d| d.code())
                .is_some_and(|code| BUSY.contains(&code.as_ref())),
            _ => false,
        }
    }

    /// Whether `e`, however deep in its chain, says the work was taken over by
    /// another process (`TakenOver`).
    pub fn taken_over(e: &anyhow::Error) -> bool {
        matches!(e.downcast_ref::<StoreError>(), Some(StoreError::TakenOver))
    }
}

/// SQLite's busy and locked codes (5, 6 and their extended forms 261, 262,
/// 517) and PostgreSQL's serialization failure, deadlock and lock timeout.
const BUSY: [&str; 8] = ["5", "6", "261", "262", "517", "40001", "40P01", "55P03"];

/// PostgreSQL's SQLSTATE classes for a server that cannot serve now: 08
/// (connection exception), 53 (insufficient resources, such as too many
/// connections) and 57 (operator intervention: a shutdown or restart ended the
/// session). SQLSTATEs have five characters; SQLite's codes, numbers of up to
/// four digits, never match.
fn out_of_reach(code: &str) -> bool {
    code.len() == 5
        && ["08", "53", "57"]
            .iter()
            .any(|class| code.starts_with(class))
}

impl From<super::stored::StoredError> for StoreError {
    fn from(e: super::stored::StoredError) -> StoreError {
        StoreError::Corrupt(e.to_string())
    }
}

/// The result of a storage call.
pub type StoreResult<T> = Result<T, StoreError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_row_and_a_lost_connection_are_told_apart() {
        assert!(matches!(
            StoreError::from(sqlx::Error::RowNotFound),
            StoreError::NotFound
        ));
        assert!(matches!(
            StoreError::from(sqlx::Error::PoolTimedOut),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            StoreError::from(sqlx::Error::Decode("bad".into())),
            StoreError::Corrupt(_)
        ));
    }

    #[test]
    fn a_restarting_or_full_postgresql_is_unavailable_and_sqlites_codes_are_not() {
        // 57P01: the session was ended by a shutdown; 08006: the connection failed;
        // 53300: too many connections.
        for code in ["57P01", "57P02", "57P03", "08006", "08001", "53300"] {
            assert!(out_of_reach(code), "{code}");
        }
        // A unique violation, a syntax error, a serialization failure, and
        // SQLite's busy, busy-snapshot, constraint and I/O error codes.
        for code in [
            "23505", "42601", "40001", "5", "517", "2067", "5386", "5898",
        ] {
            assert!(!out_of_reach(code), "{code}");
        }
    }
}

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
            e => StoreError::Database(e),
        }
    }
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
}

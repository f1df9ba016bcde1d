//! Operator accounts, API tokens, server-side sessions and failed sign-ins
//! (SPEC §15). Passwords arrive here already hashed; tokens and sessions arrive as
//! hashes of their secret text, which this module never sees.

use sqlx::Row;

use super::error::StoreResult;
use super::{Store, state};
use crate::clock::Millis;
use crate::states::OperatorRole;

#[derive(Debug, Clone)]
pub struct OperatorRow {
    pub email: String,
    pub role: OperatorRole,
    pub password_hash: String,
}

#[derive(Debug, Clone)]
pub struct TokenRow {
    pub id: String,
    pub name: String,
    pub role: OperatorRole,
    pub created_at: Millis,
    pub revoked_at: Option<Millis>,
}

/// A live session: the operator it belongs to and when it was last used.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub email: String,
    pub role: OperatorRole,
    pub last_seen_at: Millis,
}

/// Operators, their API tokens, console sessions and sign-in attempts (SPEC §15).
#[derive(Clone, Copy)]
pub struct Operators<'s>(&'s Store);

impl Store {
    pub fn operators(&self) -> Operators<'_> {
        Operators(self)
    }
}

impl Operators<'_> {
    /// Creates an operator; `false` when the email is already taken.
    pub async fn add(self, operator: &OperatorRow, now: Millis) -> StoreResult<bool> {
        let done = sqlx::query(
            "INSERT INTO operators (email, role, password_hash, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (email) DO NOTHING",
        )
        .bind(&operator.email)
        .bind(operator.role.as_str())
        .bind(&operator.password_hash)
        .bind(now)
        .execute(self.0.writer())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn get(self, email: &str) -> StoreResult<Option<OperatorRow>> {
        let row = sqlx::query("SELECT email, role, password_hash FROM operators WHERE email = $1")
            .bind(email)
            .fetch_optional(self.0.pool())
            .await?;
        Ok(row
            .map(|r| -> Result<_, sqlx::Error> {
                Ok(OperatorRow {
                    email: r.try_get("email")?,
                    role: state(&r, "role", OperatorRole::parse)?,
                    password_hash: r.try_get("password_hash")?,
                })
            })
            .transpose()?)
    }

    /// The name visitors see for an operator, if one was set.
    pub async fn name(self, email: &str) -> StoreResult<Option<String>> {
        let name: Option<Option<String>> =
            sqlx::query_scalar("SELECT name FROM operators WHERE email = $1")
                .bind(email)
                .fetch_optional(self.0.pool())
                .await?;
        Ok(name.flatten())
    }

    /// Sets the name visitors see for an operator; `false` for no such operator.
    pub async fn set_name(self, email: &str, name: &str) -> StoreResult<bool> {
        let done = sqlx::query("UPDATE operators SET name = $1 WHERE email = $2")
            .bind(name)
            .bind(email)
            .execute(self.0.writer())
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// How many operators have a console session used since `since` (API
    /// tokens are scripts, not people, and do not count).
    pub async fn online_since(self, since: Millis) -> StoreResult<i64> {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT COUNT(DISTINCT email) FROM operator_sessions WHERE revoked_at IS NULL AND last_seen_at >= $1",
        )
        .bind(since)
        .fetch_one(self.0.pool())
        .await?;
        Ok(n)
    }

    /// The display names (or none set) of operators whose console was in use
    /// since `since`.
    pub async fn present_since(self, since: Millis) -> StoreResult<Vec<Option<String>>> {
        Ok(sqlx::query_scalar(
            "SELECT o.name FROM operators o WHERE EXISTS (SELECT 1 FROM operator_sessions s \
             WHERE s.email = o.email AND s.revoked_at IS NULL AND s.last_seen_at >= $1) ORDER BY o.email",
        )
        .bind(since)
        .fetch_all(self.0.pool())
        .await?)
    }

    pub async fn count(self) -> StoreResult<i64> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM operators")
            .fetch_one(self.0.pool())
            .await?;
        Ok(n)
    }

    pub async fn add_token(self, token: &TokenRow, hash: &str) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO operator_tokens (id, name, role, hash, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&token.id)
        .bind(&token.name)
        .bind(token.role.as_str())
        .bind(hash)
        .bind(token.created_at)
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    /// The unrevoked token with this hash.
    pub async fn token_by_hash(self, hash: &str) -> StoreResult<Option<TokenRow>> {
        let row = sqlx::query(
            "SELECT id, name, role, created_at, revoked_at FROM operator_tokens \
             WHERE hash = $1 AND revoked_at IS NULL",
        )
        .bind(hash)
        .fetch_optional(self.0.pool())
        .await?;
        Ok(row.as_ref().map(token).transpose()?)
    }

    pub async fn tokens(self) -> StoreResult<Vec<TokenRow>> {
        let rows = sqlx::query(
            "SELECT id, name, role, created_at, revoked_at FROM operator_tokens ORDER BY created_at, id",
        )
        .fetch_all(self.0.pool())
        .await?;
        Ok(rows.iter().map(token).collect::<Result<_, _>>()?)
    }

    /// Revokes a token; `false` when there is no such unrevoked token.
    pub async fn revoke_token(self, id: &str, now: Millis) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE operator_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
        )
        .bind(id)
        .bind(now)
        .execute(self.0.writer())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn add_session(self, id: &str, email: &str, now: Millis) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO operator_sessions (id, email, created_at, last_seen_at) VALUES ($1, $2, $3, $3)",
        )
        .bind(id)
        .bind(email)
        .bind(now)
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    /// The unrevoked session with this id, with its operator's current role; a
    /// session whose operator no longer exists is no session.
    pub async fn session(self, id: &str) -> StoreResult<Option<SessionRow>> {
        let row = sqlx::query(
            "SELECT s.email, o.role, s.last_seen_at FROM operator_sessions s \
             JOIN operators o ON o.email = s.email WHERE s.id = $1 AND s.revoked_at IS NULL",
        )
        .bind(id)
        .fetch_optional(self.0.pool())
        .await?;
        Ok(row
            .map(|r| -> Result<_, sqlx::Error> {
                Ok(SessionRow {
                    email: r.try_get("email")?,
                    role: state(&r, "role", OperatorRole::parse)?,
                    last_seen_at: r.try_get("last_seen_at")?,
                })
            })
            .transpose()?)
    }

    pub async fn touch_session(self, id: &str, now: Millis) -> StoreResult<()> {
        sqlx::query("UPDATE operator_sessions SET last_seen_at = $2 WHERE id = $1")
            .bind(id)
            .bind(now)
            .execute(self.0.writer())
            .await?;
        Ok(())
    }

    pub async fn revoke_session(self, id: &str, now: Millis) -> StoreResult<()> {
        sqlx::query(
            "UPDATE operator_sessions SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
        )
        .bind(id)
        .bind(now)
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    /// Records a sign-in attempt under each key (forgetting attempts older than
    /// `since`) and returns, per key, the attempts since `since` — this one
    /// included — and the earliest of them. Counted after the insert, in one
    /// transaction: of attempts made at once, the later ones see the earlier.
    pub async fn begin_login_attempt(
        self,
        attempt: &str,
        keys: &[&str],
        now: Millis,
        since: Millis,
    ) -> StoreResult<Vec<(i64, Millis)>> {
        let mut tx = self.0.writer().begin().await?;
        // Each key's row is locked first, in one order (sorted), so attempts of
        // one key made at once count one after another instead of side by side.
        let mut locked: Vec<&str> = keys.to_vec();
        locked.sort_unstable();
        for key in &locked {
            sqlx::query(
                "INSERT INTO operator_login_keys (key) VALUES ($1) \
                 ON CONFLICT (key) DO UPDATE SET key = excluded.key",
            )
            .bind(*key)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query("DELETE FROM operator_login_failures WHERE at < $1")
            .bind(since)
            .execute(&mut *tx)
            .await?;
        for key in keys {
            sqlx::query(
                "INSERT INTO operator_login_failures (key, at, attempt) VALUES ($1, $2, $3)",
            )
            .bind(*key)
            .bind(now)
            .bind(attempt)
            .execute(&mut *tx)
            .await?;
        }
        let mut counts = Vec::with_capacity(keys.len());
        for key in keys {
            let row = sqlx::query(
                "SELECT COUNT(*) AS n, MIN(at) AS first FROM operator_login_failures WHERE key = $1 AND at >= $2",
            )
            .bind(*key)
            .bind(since)
            .fetch_one(&mut *tx)
            .await?;
            let first: Option<i64> = row.try_get("first")?;
            counts.push((row.try_get("n")?, first.unwrap_or(now)));
        }
        tx.commit().await?;
        Ok(counts)
    }

    /// Forgets an attempt: it succeeded, or it was refused before any check.
    pub async fn forget_login_attempt(self, attempt: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM operator_login_failures WHERE attempt = $1")
            .bind(attempt)
            .execute(self.0.writer())
            .await?;
        Ok(())
    }

    /// Forgets the sign-in keys left with no failure, at most once a minute (by
    /// `now`): every attempt already forgets the failures past the window
    /// (`begin_login_attempt`), so a flood of attempts with made-up emails leaves
    /// no rows behind for longer than the window and a minute, and the scan
    /// runs once a minute, not once an attempt.
    pub async fn purge_login_keys(self, now: Millis) -> StoreResult<()> {
        use std::sync::atomic::Ordering;
        let last = self.0.login_keys_purged_at.load(Ordering::Acquire);
        let due = now - last >= 60_000
            && self
                .0
                .login_keys_purged_at
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        match due {
            true => self.forget_unused_login_keys().await,
            false => Ok(()),
        }
    }

    /// In a transaction of its own that locks nothing else first, so it waits
    /// for attempts, never deadlocks with one.
    async fn forget_unused_login_keys(self) -> StoreResult<()> {
        sqlx::query(
            "DELETE FROM operator_login_keys WHERE key NOT IN (SELECT key FROM operator_login_failures)",
        )
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    /// Forgets sessions revoked or idle past `idle_before`, and sign-in keys
    /// with no failure left.
    pub async fn purge_sessions(self, idle_before: Millis) -> StoreResult<()> {
        sqlx::query(
            "DELETE FROM operator_sessions WHERE last_seen_at < $1 OR revoked_at IS NOT NULL",
        )
        .bind(idle_before)
        .execute(self.0.writer())
        .await?;
        self.forget_unused_login_keys().await
    }
}

fn token(r: &sqlx::any::AnyRow) -> Result<TokenRow, sqlx::Error> {
    Ok(TokenRow {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        role: state(r, "role", OperatorRole::parse)?,
        created_at: r.try_get("created_at")?,
        revoked_at: r.try_get("revoked_at")?,
    })
}

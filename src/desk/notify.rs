//! Wakes every replica's visitor channels when a desk event commits anywhere.
//!
//! PostgreSQL's LISTEN/NOTIFY, not Redis pub/sub: a `pg_notify` issued in the
//! event's own transaction is delivered only when that transaction commits,
//! and always then. So no replica is woken for an event it cannot read yet,
//! and a writer that dies between its commit and a separate publish cannot
//! leave the event unannounced — the failure Redis pub/sub, outside the
//! transaction and fire-and-forget, would allow. It also needs nothing beyond
//! the database every replica already has (Redis is optional, SPEC §16). The
//! notification carries only the conversation's id: the events themselves are
//! read from the table, after the number each stream last sent.
//!
//! A replica whose listening connection dropped may have missed notifications:
//! when it is back, every stream is woken to read again (`"*"`), and each
//! stream reads on its own every few seconds anyway. On SQLite the commits are
//! this process's own and wake its streams directly (`store::desk`).

use std::time::Duration;

use sqlx::postgres::PgListener;

use crate::app::App;
use crate::store::Backend;
use crate::store::desk::EVENTS_CHANNEL;

/// Waits this long before listening again after a failure.
const RETRY: Duration = Duration::from_secs(1);

/// Listens for other replicas' desk events until the process ends (PostgreSQL
/// only; returns at once on SQLite).
pub async fn listen_forever(app: App) {
    if app.store.backend() != Backend::Postgres {
        return;
    }
    let url = app.config.server.database_url();
    loop {
        match listen(&app, &url).await {
            Ok(()) => tracing::info!("the desk's listening connection dropped; listening again"),
            Err(e) => {
                tracing::warn!(error = %e, "listening for desk events failed; listening again")
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

async fn listen(app: &App, url: &str) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect(url).await?;
    listener.listen(EVENTS_CHANNEL).await?;
    // Whatever committed while this replica was not listening is read now.
    app.store.desk().wake("*");
    loop {
        match listener.try_recv().await? {
            Some(notification) => app.store.desk().wake(notification.payload()),
            // The connection dropped: listen again on a new one, then wake
            // every stream and turn to read what was missed meanwhile.
            None => return Ok(()),
        }
    }
}

//! Cards expire whether or not anybody answers: a sweep marks them so in history and
//! in the audit table, with their expiry time as the decision time.

use std::time::Duration;

use crate::app::App;

const SWEEP_EVERY: Duration = Duration::from_secs(15);

pub async fn sweep_forever(app: App) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    loop {
        tick.tick().await;
        match app.store.expire_due(app.clock.now_ms(), None).await {
            Ok(expired) if !expired.is_empty() => {
                tracing::info!(count = expired.len(), "confirmations expired")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = format!("{e:#}"), "expiry sweep failed"),
        }
    }
}

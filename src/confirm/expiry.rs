//! Cards expire whether or not anybody answers: a sweep marks them so in history and
//! in the audit table, with their expiry time as the decision time.

use std::time::Duration;

use crate::app::App;

const SWEEP_EVERY: Duration = Duration::from_secs(15);
/// The sweep is one replica's duty at a time (SPEC §16), held for two sweeps: if
/// its holder dies, another replica sweeps within half a minute.
const DUTY: &str = "expiry_sweep";

pub async fn sweep_forever(app: App) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    let hold_ms = 2 * SWEEP_EVERY.as_millis() as i64;
    loop {
        tick.tick().await;
        match app.store.leases().hold_duty(DUTY, hold_ms).await {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "the expiry sweep's duty could not be read"
                );
                continue;
            }
        }
        // Each card is expired by one conditional update, so even two sweeps at
        // once (a holder paused past its hold) write one `expired` row per card.
        super::approval::count_waiting(&app);
        match app.store.cards().expire_due(app.clock.now_ms(), None).await {
            Ok(expired) if !expired.is_empty() => {
                tracing::info!(count = expired.len(), "confirmations expired");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = format!("{e:#}"), "expiry sweep failed"),
        }
    }
}

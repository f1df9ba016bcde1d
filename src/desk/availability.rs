//! Whether anybody is there (SPEC §19): inside the site's hours, if it sets
//! any, and with an operator's console in use within the last two minutes.
//! When nobody is, a handoff is not made: the visitor is told so at once (the
//! site's `offline_message`) and may leave an email, so nothing is promised
//! that nobody will keep.

use crate::app::{App, Site};
use crate::clock::Millis;
use crate::error::ApiError;

/// An operator counts as there this long after their console was last used
/// (an open console renews it while its live stream runs).
pub const PRESENCE_MS: Millis = 2 * 60 * 1000;

/// Whether a handoff can be made now; `Err` carries what the visitor is told.
pub async fn someone_there(app: &App, site: &Site) -> Result<Result<(), String>, ApiError> {
    let handoff = &site.config.handoff;
    let now = app.clock.now_ms();
    let in_hours = match handoff.parsed_hours() {
        None => true,
        Some(Ok(hours)) => hours.open_at(now),
        Some(Err(_)) => false,
    };
    let online = app
        .store
        .operators()
        .online_since(now - PRESENCE_MS)
        .await?;
    crate::ops::metrics::operators_online(online);
    match in_hours && online > 0 {
        true => Ok(Ok(())),
        false => Ok(Err(handoff.offline_text().to_string())),
    }
}

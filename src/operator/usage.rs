//! Usage per site and UTC day (SPEC §15): questions, tokens against the budget,
//! confirmations by outcome, auto calls and failures — every day of the range,
//! empty ones included, so a chart's days line up.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;

use super::auth::Operator;
use super::{Params, chosen_sites};
use crate::app::{App, Site};
use crate::budget::utc_day;
use crate::error::ApiError;
use crate::states::{AuditEvent, Policy};
use crate::wire::{DayUsage, QuotaUsage, SiteUsage, UsageView};

const DAY_MS: i64 = 86_400_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    site: Option<String>,
    days: Option<i64>,
}

pub async fn show(
    State(app): State<App>,
    _: Operator,
    Params(query): Params<UsageQuery>,
) -> Result<Json<UsageView>, ApiError> {
    let days = match query.days.unwrap_or(14) {
        n @ 1..=90 => n,
        _ => {
            return Err(ApiError::InvalidRequest(
                "days: must be from 1 to 90".into(),
            ));
        }
    };
    let sites = chosen_sites(&app, query.site.as_deref())?;
    let today = app.clock.now_ms().div_euclid(DAY_MS);
    let first = today - days + 1;
    let mut out = Vec::new();
    for site in sites {
        out.push(site_usage(&app, &site, first, today).await?);
    }
    Ok(Json(UsageView { sites: out }))
}

async fn site_usage(app: &App, site: &Site, first: i64, today: i64) -> Result<SiteUsage, ApiError> {
    let id = &site.config.id;
    let since = first * DAY_MS;
    let turns = app.store.usage().turns(id, since).await?;
    let events = app.store.usage().events(id, since).await?;
    let spent = app.store.budget().spent_since(id, &utc_day(since)).await?;
    let mut days: Vec<DayUsage> = (first..=today)
        .map(|d| {
            let day = utc_day(d * DAY_MS);
            let (turns, input, output) = turns.get(&d).copied().unwrap_or_default();
            DayUsage {
                spent: spent.get(&day).copied().unwrap_or(0),
                day,
                turns,
                input_tokens: input,
                output_tokens: output,
                ..Default::default()
            }
        })
        .collect();
    for (d, rating, n) in app.store.feedback().per_day(id, since).await? {
        if let Some(day) = usize::try_from(d - first)
            .ok()
            .and_then(|i| days.get_mut(i))
        {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            match rating.as_str() {
                "up" => day.helpful += n,
                _ => day.not_helpful += n,
            }
        }
    }
    for (d, event, policy, n) in events {
        let Some(day) = usize::try_from(d - first)
            .ok()
            .and_then(|i| days.get_mut(i))
        else {
            continue;
        };
        match AuditEvent::parse(&event) {
            Ok(AuditEvent::Confirmed) => day.confirmed += n,
            Ok(AuditEvent::Cancelled) => day.cancelled += n,
            Ok(AuditEvent::Expired) => day.expired += n,
            Ok(AuditEvent::Failed) => day.failures += n,
            // Auto calls that ran: requested, less those refused before running.
            Ok(AuditEvent::Requested) if Policy::parse(&policy) == Ok(Policy::Auto) => {
                day.auto_calls += n
            }
            Ok(AuditEvent::Refused) if Policy::parse(&policy) == Ok(Policy::Auto) => {
                day.auto_calls -= n
            }
            _ => {}
        }
    }
    Ok(SiteUsage {
        site: id.clone(),
        daily_token_budget: site.config.limits.daily_token_budget,
        days,
        quotas: quota_usage(app, site).await?,
    })
}

/// The site's counted quota uses of this UTC day and month, for the tools
/// whose quota counts in that window.
async fn quota_usage(app: &App, site: &Site) -> Result<Vec<QuotaUsage>, ApiError> {
    use crate::config::{QuotaPer, QuotaWindow};
    let tools = site.tools.last_read();
    let now = app.clock.now_ms();
    let periods = [QuotaWindow::Day, QuotaWindow::Month]
        .map(|w| crate::confirm::quota::period(w, now))
        .to_vec();
    let counted = app
        .store
        .quotas()
        .of_site(&site.config.id, &periods, 100)
        .await?;
    Ok(counted
        .into_iter()
        .filter_map(|c| {
            let quota = tools.get(&c.tool)?.quota?;
            let window = crate::confirm::quota::period(quota.window, now);
            (window == c.period).then(|| QuotaUsage {
                per: match quota.per {
                    QuotaPer::Visitor => "visitor".into(),
                    QuotaPer::Site => "site".into(),
                },
                visitor: (quota.per == QuotaPer::Visitor).then(|| c.subject.clone()),
                tool: c.tool,
                period: c.period,
                used: c.used,
                max: quota.max,
            })
        })
        .collect())
}

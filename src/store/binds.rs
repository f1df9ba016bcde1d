//! Filters of the console's reads add constant SQL fragments; every value from
//! a request is bound through these, in order.

use sqlx::any::AnyRow;

use super::error::StoreResult;
use super::{Store, sql};

/// A value bound to a placeholder, in order.
pub(super) enum Bind {
    Text(String),
    Int(i64),
}

/// Collects binds and hands out their `$n` placeholders.
#[derive(Default)]
pub(super) struct Binds(Vec<Bind>);

impl Binds {
    pub(super) fn text(&mut self, value: impl Into<String>) -> String {
        self.0.push(Bind::Text(value.into()));
        format!("${}", self.0.len())
    }

    pub(super) fn int(&mut self, value: i64) -> String {
        self.0.push(Bind::Int(value));
        format!("${}", self.0.len())
    }

    pub(super) async fn fetch(self, store: &Store, text: String) -> StoreResult<Vec<AnyRow>> {
        let mut query = sqlx::query(sql(text));
        for bind in self.0 {
            query = match bind {
                Bind::Text(t) => query.bind(t),
                Bind::Int(i) => query.bind(i),
            };
        }
        Ok(query.fetch_all(store.pool()).await?)
    }
}

//! Migrations are compiled into the binary and applied with sqlx's migrator at start.
//! They are built at run time from embedded SQL (rather than with `migrate!`, which
//! would compile a second copy of the database drivers for the build host).

use std::borrow::Cow;

use futures_util::future::BoxFuture;
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

use super::{Backend, Store};

/// Embedded migrations: `(version, name, file under migrations/)`. The dialects share
/// a file where the SQL is the same and differ only where they must (triggers).
macro_rules! embedded {
    ($(($version:literal, $name:literal, $file:literal)),* $(,)?) => {
        &[$(($version, $name, include_str!(concat!("../../migrations/", $file)))),*]
    };
}

const SQLITE: &[(i64, &str, &str)] = embedded!(
    (1, "init", "common/0001_init.sql"),
    (2, "audit append only", "sqlite/0002_audit_append_only.sql"),
    (3, "budgets", "common/0003_budgets.sql"),
    (4, "leases", "common/0004_leases.sql"),
    (6, "operators", "common/0006_operators.sql"),
    (7, "duties", "common/0007_duties.sql"),
    (8, "knowledge", "common/0008_knowledge.sql"),
    (9, "ingest jobs", "common/0009_ingest_jobs.sql"),
    (10, "human desk", "common/0010_human_desk.sql"),
    (11, "gates", "common/0011_gates.sql"),
    (12, "knowledge vectors", "common/0012_knowledge_vectors.sql"),
    (13, "feedback", "common/0013_feedback.sql"),
    (14, "widget strings", "common/0014_widget_strings.sql"),
);

const POSTGRES: &[(i64, &str, &str)] = embedded!(
    (1, "init", "common/0001_init.sql"),
    (
        2,
        "audit append only",
        "postgres/0002_audit_append_only.sql"
    ),
    (3, "budgets", "common/0003_budgets.sql"),
    (4, "leases", "common/0004_leases.sql"),
    (
        5,
        "audit refuses truncate",
        "postgres/0005_audit_no_truncate.sql"
    ),
    (6, "operators", "common/0006_operators.sql"),
    (7, "duties", "common/0007_duties.sql"),
    (8, "knowledge", "common/0008_knowledge.sql"),
    (9, "ingest jobs", "common/0009_ingest_jobs.sql"),
    (10, "human desk", "common/0010_human_desk.sql"),
    (11, "gates", "common/0011_gates.sql"),
    (12, "knowledge vectors", "common/0012_knowledge_vectors.sql"),
    (13, "feedback", "common/0013_feedback.sql"),
    (14, "widget strings", "common/0014_widget_strings.sql"),
);

#[derive(Debug)]
struct Embedded(&'static [(i64, &'static str, &'static str)]);

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> BoxFuture<'static, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|(version, name, sql)| {
                    Migration::new(
                        *version,
                        Cow::Borrowed(*name),
                        MigrationType::Simple,
                        sqlx::SqlSafeStr::into_sql_str(*sql),
                        false,
                    )
                })
                .collect())
        })
    }
}

pub(super) async fn run(store: &Store) -> anyhow::Result<()> {
    let source = match store.backend {
        Backend::Sqlite => Embedded(SQLITE),
        Backend::Postgres => Embedded(POSTGRES),
    };
    let migrator = Migrator::new(source).await?;
    migrator.run(&store.writer).await?;
    Ok(())
}

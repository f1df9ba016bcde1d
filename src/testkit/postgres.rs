//! Fresh PostgreSQL databases for tests and benchmarks, one per run, on a server
//! the caller names.

/// A fresh, empty database named `{prefix}_{uuid}` on the PostgreSQL server at
/// `server` (such as `postgres://postgres@127.0.0.1:5432`), as a URL. The
/// server's URL may carry connection parameters (`?sslmode=disable`,
/// `?host=/var/run/postgresql`), which the database's URL keeps.
pub async fn fresh_database(server: &str, prefix: &str) -> anyhow::Result<String> {
    sqlx::any::install_default_drivers();
    let admin = sqlx::AnyPool::connect(&database_url(server, "postgres")).await?;
    let name = crate::ids::new_id(prefix);
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await?;
    admin.close().await;
    Ok(database_url(server, &name))
}

/// The URL of database `name` on the server at `server`, its parameters kept.
fn database_url(server: &str, name: &str) -> String {
    match server.split_once('?') {
        Some((base, parameters)) => format!("{base}/{name}?{parameters}"),
        None => format!("{server}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::database_url;

    #[test]
    fn a_database_url_keeps_the_servers_parameters() {
        assert_eq!(
            database_url("postgres://p@127.0.0.1:5432", "d"),
            "postgres://p@127.0.0.1:5432/d"
        );
        assert_eq!(
            database_url("postgres://p@127.0.0.1:5432?sslmode=disable", "d"),
            "postgres://p@127.0.0.1:5432/d?sslmode=disable"
        );
        assert_eq!(
            database_url(
                "postgres://p@localhost?host=/var/run/postgresql&sslmode=disable",
                "d"
            ),
            "postgres://p@localhost/d?host=/var/run/postgresql&sslmode=disable"
        );
    }
}

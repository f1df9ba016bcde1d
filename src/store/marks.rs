//! Placeholders for statements whose size grows with a batch (the group
//! commit's rows on SQLite, a list of chunks to read; on PostgreSQL the group
//! commit's rows are arrays, `rows.rs`).
//!
//! SQLite keeps a statement's named parameters (`$7`) in a list and walks it
//! by name for each one it parses (`strncmp`), and sqlx asks it each
//! parameter's name before binding (`sqlite3_bind_parameter_name`, another
//! walk): a statement of n named parameters costs n² steps twice. At 100
//! streams the two were 9.5 % of the server's CPU (BENCHMARKS.md, "The group
//! commit's parameters without names"). Anonymous `?` parameters are not in
//! that list; sqlx binds them in the order they appear. PostgreSQL knows only
//! `$n`.
//!
//! So a statement's many values take the first parameters, written as `?` on
//! SQLite and `$1`, `$2`, … on PostgreSQL, and its few other values come after
//! them as `$n` on both ([`Marks::after`]), which may then appear anywhere in
//! the text and more than once.

use super::Backend;

/// How a statement's values are written for the database it goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Marks {
    /// `?`, bound in the order they appear (SQLite).
    Anonymous,
    /// `$1`, `$2`, … (PostgreSQL; SQLite takes them too).
    Numbered,
}

impl Marks {
    /// `?, ?, ?` or `$1, $2, $3`: the statement's first `n` parameters, to be
    /// bound first and in this order.
    pub(in crate::store) fn list(self, n: usize) -> String {
        let mut out = String::with_capacity(n * 4);
        for i in 1..=n {
            if i > 1 {
                out.push_str(", ");
            }
            self.push(&mut out, i);
        }
        out
    }

    /// `(?, ?), (?, ?)` or `($1, $2), ($3, $4)`: `rows` rows of `width`
    /// values, the statement's first `rows × width` parameters, row by row.
    pub(in crate::store) fn rows(self, rows: usize, width: usize) -> String {
        let mut out = String::with_capacity(rows * (width * 4 + 4));
        for r in 0..rows {
            if r > 0 {
                out.push_str(", ");
            }
            out.push('(');
            for c in 1..=width {
                if c > 1 {
                    out.push_str(", ");
                }
                self.push(&mut out, r * width + c);
            }
            out.push(')');
        }
        out
    }

    /// `$n` for the `i`th value (from 1) bound after the first `first`:
    /// named on both databases, so it may appear anywhere and more than once.
    pub(in crate::store) fn after(first: usize, i: usize) -> String {
        format!("${}", first + i)
    }

    fn push(self, out: &mut String, n: usize) {
        match self {
            Marks::Anonymous => out.push('?'),
            Marks::Numbered => {
                use std::fmt::Write;
                // Writing to a String cannot fail.
                let _ = write!(out, "${n}");
            }
        }
    }
}

impl From<Backend> for Marks {
    fn from(backend: Backend) -> Marks {
        match backend {
            Backend::Sqlite => Marks::Anonymous,
            Backend::Postgres => Marks::Numbered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Backend, Marks};

    #[test]
    fn rows_take_the_first_parameters_row_by_row() {
        assert_eq!(Marks::Numbered.rows(2, 3), "($1, $2, $3), ($4, $5, $6)");
        assert_eq!(Marks::Anonymous.rows(2, 2), "(?, ?), (?, ?)");
        assert_eq!(Marks::Numbered.rows(1, 1), "($1)");
        assert_eq!(Marks::Anonymous.rows(0, 4), "");
    }

    #[test]
    fn a_list_takes_the_first_parameters_and_what_comes_after_is_named() {
        assert_eq!(Marks::Numbered.list(3), "$1, $2, $3");
        assert_eq!(Marks::Anonymous.list(2), "?, ?");
        assert_eq!(Marks::after(6, 1), "$7");
    }

    /// sqlx's name for a real SQLite connection is the one `Backend::of`
    /// looks for: a rename would take it for PostgreSQL, whose statements
    /// SQLite cannot run.
    #[tokio::test]
    async fn a_sqlite_connection_is_known_by_its_name() {
        use sqlx::Connection;
        sqlx::any::install_default_drivers();
        let connection = sqlx::AnyConnection::connect("sqlite::memory:").await;
        let connection = connection.expect("an in-memory SQLite database opens");
        assert_eq!(Backend::of(&connection), Backend::Sqlite);
    }

    #[test]
    fn sqlite_alone_takes_anonymous_marks() {
        assert_eq!(Marks::from(Backend::Sqlite), Marks::Anonymous);
        assert_eq!(Marks::from(Backend::Postgres), Marks::Numbered);
    }
}

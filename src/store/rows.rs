//! A batch's rows in one statement, written for the database at hand.
//!
//! On SQLite the rows are a `VALUES` list of anonymous marks (`marks.rs` says
//! why not named ones); the statement's text grows with the batch, and
//! preparing it costs little, in process. On PostgreSQL each column is one
//! parameter, the text form of an array (`{"a","b"}`), and the rows are
//! `unnest`ed from them: the statement's text is then the same for every batch,
//! so it is parsed and planned once on its connection and kept prepared. A
//! `VALUES` list there was a new statement for every batch, and its parsing and
//! planning took about a quarter of the database's CPU under load (BENCHMARKS.md,
//! "The group commit's rows as arrays on PostgreSQL").
//!
//! A statement's other values (a site, a day) come after the rows' parameters,
//! as `Marks::after(rows.taken(), i)`; states it filters on are written into its
//! text, so that a plan kept for every batch can still use the partial index
//! on them (a generic plan cannot for a bound `status = $n`).

use std::fmt::Write;

use sqlx::Any;
use sqlx::any::AnyArguments;
use sqlx::query::Query;

use super::Backend;
use super::marks::Marks;

/// A statement of the Any driver with its values bound.
pub(in crate::store) type AnyQuery<'q> = Query<'q, Any, AnyArguments>;

/// A column's type, for PostgreSQL's cast of its array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Kind {
    Text,
    Int,
}

/// One value of a row, of its column's kind.
#[derive(Debug, Clone, Copy)]
pub(in crate::store) enum Value<'a> {
    Text(Option<&'a str>),
    Int(i64),
}

impl<'a> Value<'a> {
    fn kind(&self) -> Kind {
        match self {
            Value::Text(_) => Kind::Text,
            Value::Int(_) => Kind::Int,
        }
    }

    /// Binds this value to the statement's next parameter.
    pub(in crate::store) fn bind(self, query: AnyQuery<'a>) -> AnyQuery<'a> {
        match self {
            Value::Text(text) => query.bind(text),
            Value::Int(n) => query.bind(n),
        }
    }
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(text: &'a str) -> Self {
        Value::Text(Some(text))
    }
}

impl<'a> From<&'a String> for Value<'a> {
    fn from(text: &'a String) -> Self {
        Value::Text(Some(text))
    }
}

impl<'a> From<&'a Option<String>> for Value<'a> {
    fn from(text: &'a Option<String>) -> Self {
        Value::Text(text.as_deref())
    }
}

impl From<i64> for Value<'_> {
    fn from(n: i64) -> Self {
        Value::Int(n)
    }
}

/// `count` rows of `N` columns of `kinds`, on `backend`. Every row is given as
/// `N` values, so none can move another into the wrong column or row.
#[derive(Debug, Clone, Copy)]
pub(in crate::store) struct Rows<const N: usize> {
    backend: Backend,
    count: usize,
    kinds: &'static [Kind; N],
}

impl<const N: usize> Rows<N> {
    pub(in crate::store) fn new(
        backend: Backend,
        count: usize,
        kinds: &'static [Kind; N],
    ) -> Rows<N> {
        Rows {
            backend,
            count,
            kinds,
        }
    }

    /// The rows as a table expression, their columns in `kinds`' order:
    /// `VALUES (?, ?), (?, ?)` on SQLite, `SELECT * FROM unnest($1::text[],
    /// $2::bigint[])` on PostgreSQL.
    pub(in crate::store) fn table(&self) -> String {
        match self.backend {
            Backend::Sqlite => format!(
                "VALUES {}",
                Marks::Anonymous.rows(self.count, self.kinds.len())
            ),
            Backend::Postgres => {
                let mut out = String::from("SELECT * FROM unnest(");
                for (i, kind) in self.kinds.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    let cast = match kind {
                        Kind::Text => "text",
                        Kind::Int => "bigint",
                    };
                    // Writing to a String cannot fail.
                    let _ = write!(out, "${}::{cast}[]", i + 1);
                }
                out.push(')');
                out
            }
        }
    }

    /// How many parameters the rows take; the statement's other values follow.
    pub(in crate::store) fn taken(&self) -> usize {
        match self.backend {
            Backend::Sqlite => self.count * self.kinds.len(),
            Backend::Postgres => self.kinds.len(),
        }
    }

    /// Whether the statement's text is the same whatever the batch's size, and
    /// so worth keeping prepared on its connection.
    pub(in crate::store) fn persistent(&self) -> bool {
        self.backend == Backend::Postgres
    }

    /// Binds the rows, each given as its values in `kinds`' order.
    pub(in crate::store) fn bind<'q>(
        &self,
        mut query: AnyQuery<'q>,
        rows: impl IntoIterator<Item = [Value<'q>; N]>,
    ) -> AnyQuery<'q> {
        let rows = rows.into_iter().inspect(|row| {
            debug_assert!(
                row.iter().zip(self.kinds).all(|(v, k)| v.kind() == *k),
                "a value of another kind than its column's"
            );
        });
        match self.backend {
            Backend::Sqlite => {
                let mut count = 0;
                for row in rows {
                    count += 1;
                    for value in row {
                        query = value.bind(query);
                    }
                }
                debug_assert_eq!(count, self.count, "rows other than the statement's");
                query
            }
            Backend::Postgres => {
                for column in columns(rows) {
                    query = query.bind(column);
                }
                query
            }
        }
    }
}

/// The rows' values as one PostgreSQL array literal per column.
fn columns<'q, const N: usize>(rows: impl IntoIterator<Item = [Value<'q>; N]>) -> [String; N] {
    let mut columns: [String; N] = std::array::from_fn(|_| String::from("{"));
    for (r, row) in rows.into_iter().enumerate() {
        for (column, value) in columns.iter_mut().zip(row) {
            if r > 0 {
                column.push(',');
            }
            element(column, value);
        }
    }
    for column in &mut columns {
        column.push('}');
    }
    columns
}

/// Appends one array element: a number as itself, a missing text as `NULL`, a
/// text in double quotes with its quotes and backslashes escaped, which
/// PostgreSQL's array input takes back exactly (its only other special
/// characters, braces, commas and spaces, are plain inside quotes).
fn element(out: &mut String, value: Value<'_>) {
    match value {
        Value::Int(n) => {
            // Writing to a String cannot fail.
            let _ = write!(out, "{n}");
        }
        Value::Text(None) => out.push_str("NULL"),
        Value::Text(Some(text)) => {
            out.reserve(text.len() + 2);
            out.push('"');
            for c in text.chars() {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Backend, Kind, Rows, Value, columns};

    const KINDS: &[Kind; 3] = &[Kind::Text, Kind::Int, Kind::Text];

    #[test]
    fn on_sqlite_the_rows_are_a_values_list_of_anonymous_marks() {
        let rows = Rows::new(Backend::Sqlite, 2, KINDS);
        assert_eq!(rows.table(), "VALUES (?, ?, ?), (?, ?, ?)");
        assert_eq!(rows.taken(), 6);
        assert!(!rows.persistent());
    }

    #[test]
    fn on_postgres_the_text_is_the_same_for_any_number_of_rows() {
        let one = Rows::new(Backend::Postgres, 1, KINDS);
        let many = Rows::new(Backend::Postgres, 90, KINDS);
        assert_eq!(
            one.table(),
            "SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])"
        );
        assert_eq!(one.table(), many.table());
        assert_eq!(many.taken(), 3);
        assert!(many.persistent());
    }

    #[test]
    fn each_column_becomes_one_array_literal() {
        let rows = [
            [Value::from("a"), Value::from(1), Value::Text(None)],
            [
                Value::from("b\"c\\d"),
                Value::from(-2),
                Value::from("{x, y}"),
            ],
        ];
        assert_eq!(
            columns(rows),
            [
                r#"{"a","b\"c\\d"}"#.to_string(),
                "{1,-2}".to_string(),
                r#"{NULL,"{x, y}"}"#.to_string(),
            ]
        );
    }

    #[test]
    fn an_empty_text_is_an_empty_element_not_a_missing_one() {
        let rows = [[Value::from(""), Value::from("NULL")]];
        assert_eq!(
            columns(rows),
            [r#"{""}"#.to_string(), r#"{"NULL"}"#.to_string()]
        );
    }
}

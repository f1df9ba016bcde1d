//! `deskbell operator add` and `deskbell operator token` (SPEC §13): accounts and
//! API tokens made on the server's own machine, whose secret text is shown once.

use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use super::accounts::{self, MIN_PASSWORD_CHARS};
use crate::clock::{Clock, SystemClock};
use crate::states::OperatorRole;
use crate::store::Store;

/// Creates an operator. The password is read from standard input when it is not
/// a terminal (one line; the line break is not part of it); otherwise, or when
/// the input is empty, one is generated and printed once.
pub async fn add(
    store: &Store,
    email: &str,
    role: OperatorRole,
    name: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let name = name.map(str::trim);
    if let Some(name) = name
        && let Err(why) = accounts::check_display_name(name)
    {
        eprintln!("deskbell: --name {why}");
        return Ok(ExitCode::from(2));
    }
    let given = match std::io::stdin().is_terminal() {
        true => String::new(),
        false => {
            let mut text = String::new();
            std::io::stdin().take(4096).read_to_string(&mut text)?;
            text.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    let (password, generated) = match given.is_empty() {
        true => (accounts::random_text(18)?, true),
        false => (given, false),
    };
    if password.chars().count() < MIN_PASSWORD_CHARS {
        eprintln!("deskbell: the password must have at least {MIN_PASSWORD_CHARS} characters");
        return Ok(ExitCode::from(2));
    }
    accounts::add_operator(store, email, role, &password, SystemClock.now_ms()).await?;
    let email = accounts::normalise_email(email);
    if let Some(name) = name {
        store.operators().set_name(&email, name).await?;
    }
    println!("operator {email} ({role}) created");
    if generated {
        println!("password: {password}");
        println!("(shown once; it is stored only as an Argon2id hash)");
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates an API token and prints it once.
pub async fn token(store: &Store, name: &str, role: OperatorRole) -> anyhow::Result<ExitCode> {
    let (row, text) = accounts::new_token(store, name, role, SystemClock.now_ms()).await?;
    println!("token {} ({}, {}): {text}", row.name, row.id, row.role);
    println!("(shown once; send it as Authorization: Bearer <token>; revoke it in the console)");
    Ok(ExitCode::SUCCESS)
}

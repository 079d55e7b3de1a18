//! `census token`: issue, list and revoke the credentials a coordinator
//! accepts. Tokens are shown once and stored only as their SHA-256.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use census_coordinator::auth::{generate_token, hash_token};
use census_store::{Role, StoreConfig};

use super::UsageError;
use super::roles::runtime;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Issue a token: printed once (or written to --output), stored hashed.
    Create {
        #[command(flatten)]
        database: Database,
        /// worker (lease and report jobs), operator (manage runs) or reader (read progress).
        #[arg(long, value_parser = parse_role)]
        role: Role,
        /// The identity: 1 to 64 letters, digits, '.', '_' or '-'. A worker's results are counted under it.
        #[arg(long)]
        name: String,
        /// Write the token to this file (created with mode 0600) instead of printing it.
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// List every token: name, role, created (UTC), rejected results, revoked, quarantined.
    List {
        #[command(flatten)]
        database: Database,
    },
    /// Revoke a token at once: every later call with it is refused.
    Revoke {
        #[command(flatten)]
        database: Database,
        /// The token's name.
        name: String,
    },
    /// Lift the quarantine of a worker whose results were rejected.
    Release {
        #[command(flatten)]
        database: Database,
        /// The worker's token name.
        name: String,
    },
    /// Write a new random token to each file that does not exist yet,
    /// without touching any database: for secrets that a coordinator
    /// registers with `--token-file ROLE:NAME:PATH`.
    Generate {
        /// A file to write (mode 0600); repeatable.
        #[arg(long, required = true)]
        output: Vec<PathBuf>,
    },
}

#[derive(clap::Args)]
struct Database {
    /// The coordinator's database: postgres://user:password@host/db, or an SQLite file path.
    #[arg(long, env = "CENSUS_DATABASE_URL", value_parser = super::DatabaseParser)]
    database: census_store::DatabaseLocation,
}

fn parse_role(text: &str) -> Result<Role, String> {
    text.parse().map_err(|_| format!("{text:?} is not a role: worker, operator or reader"))
}

/// Creates a new file only its owner can read, refusing one that exists.
fn new_secret_file(path: &std::path::Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    Ok(std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| UsageError(format!("--output {}: {e}", path.display())))?)
}

/// Removes the file written for a token that was never stored.
fn forget(output: &Option<PathBuf>) {
    if let Some(path) = output {
        let _ = std::fs::remove_file(path);
    }
}

/// Writes a secret to a new file only its owner can read, on disk before
/// it returns; a file it could not write whole (a full disk) is removed.
fn write_secret(path: &std::path::Path, secret: &str) -> anyhow::Result<()> {
    let mut file = new_secret_file(path)?;
    let written = writeln!(file, "{secret}").and_then(|()| file.sync_all());
    if let Err(error) = written {
        drop(file);
        let _ = std::fs::remove_file(path);
        anyhow::bail!("--output {}: {error}; no token was created", path.display());
    }
    Ok(())
}

/// Seconds since 1970 as `YYYY-MM-DD HH:MM` in UTC (the proleptic Gregorian
/// calendar; days to a date by Hinnant's `civil_from_days`).
fn utc_minute(unix: i64) -> String {
    let (days, seconds) = (unix.div_euclid(86_400), unix.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}", seconds / 3600, seconds % 3600 / 60)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let open = |database: &Database| {
            let location = database.database.clone();
            async move { census_store::open(&location, StoreConfig::default(), None).await }
        };
        match args.action {
            Action::Create { database, role, name, output } => {
                census_store::check_identity(&name).map_err(|e| UsageError(format!("--name: {e}")))?;
                // The secret is in its file before the token is stored: a
                // token that could not be written anywhere must not exist
                // (a full disk once left a stored token and an empty file).
                let token = generate_token();
                if let Some(path) = &output {
                    write_secret(path, &token)?;
                }
                let stored = match open(&database).await {
                    Ok(store) => store.create_token(&name, role, &hash_token(&token)).await,
                    Err(error) => Err(error),
                };
                if let Err(error) = stored {
                    forget(&output);
                    return Err(error.into());
                }
                match output {
                    Some(path) => println!("token {name:?} ({role}) written to {}", path.display()),
                    None => {
                        eprintln!("token {name:?} ({role}) created; it is shown only this once:");
                        println!("{token}");
                    }
                }
            }
            // Listing, revoking and releasing change nothing but what a
            // database holds: they never create one.
            Action::List { database } => {
                let store = super::open_existing_store(&database.database).await?;
                let tokens = store.list_tokens().await?;
                println!(
                    "{:<24} {:<9} {:<16} {:>8} {:<8} quarantined",
                    "name", "role", "created (UTC)", "rejected", "revoked"
                );
                for token in tokens {
                    println!(
                        "{:<24} {:<9} {:<16} {:>8} {:<8} {}",
                        token.name,
                        token.role,
                        utc_minute(token.created_unix),
                        token.rejected,
                        if token.revoked { "yes" } else { "no" },
                        if token.quarantined { "YES" } else { "no" }
                    );
                }
            }
            Action::Revoke { database, name } => {
                let store = super::open_existing_store(&database.database).await?;
                if !store.revoke_token(&name).await? {
                    return Err(UsageError(format!("there is no active token named {name:?}")).into());
                }
                println!("token {name:?} revoked");
            }
            Action::Release { database, name } => {
                let store = super::open_existing_store(&database.database).await?;
                if !store.release_quarantine(&name).await? {
                    return Err(UsageError(format!("{name:?} is not quarantined")).into());
                }
                println!("{name:?} may work again");
            }
            Action::Generate { output } => {
                for path in output {
                    if path.exists() {
                        println!("{} exists; keeping it", path.display());
                    } else {
                        write_secret(&path, &generate_token())?;
                        println!("wrote a new token to {}", path.display());
                    }
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::utc_minute;

    #[test]
    fn creation_times_read_as_utc_dates() {
        assert_eq!(utc_minute(0), "1970-01-01 00:00");
        assert_eq!(utc_minute(951_782_400), "2000-02-29 00:00");
        assert_eq!(utc_minute(951_868_799), "2000-02-29 23:59");
        assert_eq!(utc_minute(1_700_000_000), "2023-11-14 22:13");
        assert_eq!(utc_minute(4_107_542_400), "2100-03-01 00:00");
        assert_eq!(utc_minute(-1), "1969-12-31 23:59");
    }
}

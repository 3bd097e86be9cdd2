//! Structured logging with `tracing`.

use clap::ValueEnum;
use std::io::IsTerminal;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// Installs the global subscriber; `RUST_LOG` overrides `default_filter`.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_target(false)
                    .with_ansi(colour_wanted(std::io::stdout().is_terminal())),
            )
            .init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().flatten_event(true))
            .init(),
    }
}

/// Colours only on a terminal (never in a log file or a pipe), and never when
/// `NO_COLOR` is set.
fn colour_wanted(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Turns a binary's outcome into its exit code, logging why it stopped, so
/// both binaries end the same way.
pub fn exit_code<E: std::fmt::Display>(
    what: &str,
    outcome: Result<(), E>,
) -> std::process::ExitCode {
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "{what} stopped");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_colour_off_a_terminal() {
        assert!(!colour_wanted(false));
    }
}

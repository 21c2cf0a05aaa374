//! The `gputop` program on the `gputop_core` library: the interactive viewer (its view, drawing
//! and terminal), the exporter, the one-shot reports and the other commands. Public for the
//! program's binary and its benchmarks only: not a stable API.

#![recursion_limit = "256"]

pub mod app;
mod cli;
mod heap;
mod output;
mod run;
mod signal;
pub mod term;
pub mod ui;

#[cfg(test)]
mod tests;

/// The `gputop` program: parses the command line, runs, and exits with a one-line message
/// and the failure's code. For gputop's binary.
#[doc(hidden)]
pub fn program_main() {
    term::end_on_panic();
    let cli = cli::Cli::parse_checked();
    if let Err(failure) = run::run(&cli, &|name| std::env::var(name).ok()) {
        // Messages quote what they were given (config keys and values, paths, answers of
        // remote nodes): never raw on the terminal.
        eprintln!("gputop: {}", gputop_core::format::sanitize(&failure.to_string()));
        std::process::exit(failure.exit_code());
    }
}

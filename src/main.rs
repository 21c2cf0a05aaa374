//! The `gputop` binary: parse arguments, run, turn a failure into one line and an exit code.

use clap::Parser;

fn main() {
    let cli = gputop::cli::Cli::parse();
    if let Err(failure) = gputop::run::run(&cli, &|name| std::env::var(name).ok()) {
        eprintln!("gputop: {failure}");
        std::process::exit(failure.exit_code());
    }
}

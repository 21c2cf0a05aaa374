//! The `gputop` binary: parse arguments, run, turn a failure into one line and an exit code.

fn main() {
    let cli = gputop::cli::Cli::parse_checked();
    if let Err(failure) = gputop::run::run(&cli, &|name| std::env::var(name).ok()) {
        eprintln!("gputop: {failure}");
        std::process::exit(failure.exit_code());
    }
}

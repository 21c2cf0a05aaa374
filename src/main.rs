//! The `gputop` binary: parse arguments, run, turn a failure into one line and an exit code.

fn main() {
    // One malloc arena for all threads: glibc's default of one more per thread keeps the
    // memory the short-lived readers of a first sight used, as resident memory.
    // SAFETY: mallopt with a valid parameter, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    let cli = gputop::cli::Cli::parse_checked();
    if let Err(failure) = gputop::run::run(&cli, &|name| std::env::var(name).ok()) {
        eprintln!("gputop: {failure}");
        std::process::exit(failure.exit_code());
    }
}

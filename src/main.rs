//! The `gputop` binary: everything is in the library's `program_main`.

fn main() {
    gputop::program_main();
}

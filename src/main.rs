//! The `gputop` binary: everything is in the program's `program_main`.

fn main() {
    gputop_program::program_main();
}

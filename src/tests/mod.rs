//! Tests that span the crate's own modules, beside each module's unit tests: the fuzzing of
//! every reader of outside data through what comes after it (report, monitor, screen).

mod fuzz;

//! Application logic without I/O: what the user sees and does, as plain data and pure
//! functions (filter, sort, keys, state updates).

pub mod filter;
pub mod keymap;
pub mod query;
pub mod state;

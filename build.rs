//! Release link layout: the functions a run executes are placed together at the start of the
//! code, in the order `bench/symbol-order.txt` lists them (written by
//! `bench/symbol-order.py` from what a one-shot and an interactive run execute).
//!
//! The kernel maps a program's file pages 64 KiB around each one touched. Left where the
//! compiler puts them, the ~0.7 MB of functions a one-shot executes are spread over 36 of the
//! code's 48 such windows; listed first, over 13. Only the link order changes: no code does.
//!
//! The list names symbols as the linker sees them. It is passed only where the linker takes
//! it: a release build for x86-64 Linux (glibc) by Rust 1.90 or later, whose default linker
//! there is LLD, with no linker of the user's choosing. `GPUTOP_NO_SYMBOL_ORDER=1` turns it off.

use std::env;
use std::process::Command;

const ORDER_FILE: &str = "bench/symbol-order.txt";

fn main() {
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-env-changed=GPUTOP_NO_SYMBOL_ORDER");
    if let Some(path) = order_file() {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={path}");
        // Symbols that a change renamed or removed are skipped, not reported one by one:
        // `bench/symbol-order.py --check` says when the list needs writing again.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// The order file's path, when this build links with LLD in release mode.
fn order_file() -> Option<String> {
    let var = |name: &str| env::var(name).unwrap_or_default();
    if var("GPUTOP_NO_SYMBOL_ORDER") == "1" || var("PROFILE") != "release" {
        return None;
    }
    if var("TARGET") != "x86_64-unknown-linux-gnu" {
        return None;
    }
    // A linker set in Cargo's configuration, or one chosen by flags, may not be LLD.
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    if env::var_os("RUSTC_LINKER").is_some() || flags.contains("linker") || flags.contains("fuse-ld") {
        return None;
    }
    if rustc_minor()? < 90 {
        return None;
    }
    let path = std::path::Path::new(&var("CARGO_MANIFEST_DIR")).join(ORDER_FILE);
    let text = path.to_str()?.to_owned();
    // `-Wl,` would split the path at its commas.
    (!text.contains(',') && path.is_file()).then_some(text)
}

/// The minor version of the compiler building this crate (`90` of `rustc 1.90.0 (...)`).
fn rustc_minor() -> Option<u32> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let output = Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.');
    (parts.next()? == "1").then_some(())?;
    parts.next()?.parse().ok()
}

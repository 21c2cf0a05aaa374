//! Gives the simulated library the SONAME of the real one, so loaders treat it as
//! libnvidia-ml.so.1; only with the `exports` feature (the library that is one). Cargo also
//! passes a dependency's cdylib link arguments to the cdylibs that depend on it
//! (rust-lang/cargo#9562): without the feature check, gputop's Python extension, which uses
//! this crate without its exports, would itself be named libnvidia-ml.so.1, and loading
//! the real library by that name would find the extension instead.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_EXPORTS").is_some() {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
    }
}

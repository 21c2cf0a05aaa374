//! Gives the cdylib the SONAME of the real library, so loaders treat it as libnvidia-ml.so.1.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
}

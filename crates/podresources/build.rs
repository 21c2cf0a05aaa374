//! Generates the PodResources messages, client and (with the `server` feature) server from
//! `proto/api.proto`, compiled by protox: building needs no protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    let descriptors = protox::compile(["api.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .server_mod_attribute("v1", "#[cfg(feature = \"server\")]")
        .compile_fds(descriptors)?;
    Ok(())
}

//! Compiles proto/census/v1/*.proto with protox (pure Rust, no system
//! protoc) and generates the tonic services, plus the descriptor set that
//! server reflection serves.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time, not with env!: cargo reuses a compiled build script
    // for the same package in another checkout (a moved or copied target
    // dir), and a path baked in at compile time would point at the old one.
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let file = root.join("census/v1/census.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors = protox::compile([&file], [&root])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("census_descriptor.bin"), prost::Message::encode_to_vec(&descriptors))?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}

//! The census's gRPC protocol, generated from `proto/census/v1/census.proto`
//! at build time by `protox` and `tonic-prost-build` (no system `protoc`).
//!
//! This crate is generated code, the descriptor set for server reflection,
//! and [`client`]: how a client connects and presents its credential. It has
//! no census logic of its own.

#![allow(clippy::all)]

pub mod client;

/// Package `census.v1`.
pub mod v1 {
    tonic::include_proto!("census.v1");
}

/// The encoded `FileDescriptorSet`, for tonic-reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/census_descriptor.bin"));

//! The census's gRPC protocol, generated from `proto/census/v1/census.proto`
//! at build time by `protox` and `tonic-prost-build` (no system `protoc`).
//!
//! This crate is generated code, the descriptor set for server reflection,
//! [`client`]: how a client connects and presents its credential, and
//! [`limits`]: the bounds of the wire contract, which the coordinator enforces
//! and clients respect. It has no census logic of its own.

#![allow(clippy::all)]

pub mod client;
pub mod limits;

/// Package `census.v1`.
pub mod v1 {
    tonic::include_proto!("census.v1");
}

/// The encoded `FileDescriptorSet`, for tonic-reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/census_descriptor.bin"));

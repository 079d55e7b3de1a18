//! The census's gRPC protocol, generated from `proto/census/v1/census.proto`
//! at build time by `protox` and `tonic-prost-build` (no system `protoc`).
//!
//! This crate is generated code, the descriptor set for server reflection,
//! [`client`]: how a client connects and presents its credential,
//! [`limits`]: the bounds of the wire contract, which the coordinator enforces
//! and clients respect, and [`retry`]: the hint with which a busy
//! coordinator refuses a call, and how a client reads it. It has no census
//! logic of its own.

#![allow(clippy::all)]

pub mod client;
pub mod limits;
pub mod retry;

/// Package `census.v1`.
pub mod v1 {
    tonic::include_proto!("census.v1");
}

/// The encoded `FileDescriptorSet`, for tonic-reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/census_descriptor.bin"));

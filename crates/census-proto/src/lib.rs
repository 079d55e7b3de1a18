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
#[allow(clippy::too_many_lines)] // Generated code.
pub mod v1 {
    tonic::include_proto!("census.v1");
}

impl v1::Progress {
    /// The share of the run's work done, 0 to 1: its expected cost done
    /// over its total (`cost_done / cost_total`), or its jobs done over its
    /// jobs from a coordinator that sends no costs (`cost_total` 0).
    ///
    /// ```
    /// use census_proto::v1::Progress;
    /// let by_cost = Progress { jobs_total: 4, done: 2, cost_total: 400, cost_done: 100, ..Progress::default() };
    /// assert_eq!(by_cost.fraction_done(), 0.25);
    /// let by_jobs = Progress { jobs_total: 4, done: 2, ..Progress::default() };
    /// assert_eq!(by_jobs.fraction_done(), 0.5);
    /// assert_eq!(Progress::default().fraction_done(), 0.0);
    /// ```
    pub fn fraction_done(&self) -> f64 {
        match (self.cost_total, self.jobs_total) {
            (0, 0) => 0.0,
            (0, jobs) => self.done as f64 / jobs as f64,
            (cost, _) => self.cost_done as f64 / cost as f64,
        }
    }
}

/// The encoded `FileDescriptorSet`, for tonic-reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/census_descriptor.bin"));

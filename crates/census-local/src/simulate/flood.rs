//! A flood of stale reports during a load test (`census simulate
//! --stale-flood`), as issue 44 found it: one more identity leases a job
//! or two, reports them, and later sends many CompleteJobs calls at once,
//! each of thousands of results under the lease tokens it already
//! reported. What is measured is what the flood costs the honest workers
//! (their results a second before, during and after it) and the process
//! (its resident memory at the start, at the peak and a while after), and
//! what became of the flooder (refused, quarantined, from which call on).
//!
//! The tokens are the flooder's own stale ones, not made-up ones: a token
//! the store never issued is a rejection at once (the hostile tests), while
//! a genuine stale token is what an honest late worker sends too, the case
//! that must be cheap to refuse before it is known to be a flood.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use census_math::census::Census;
use census_proto::v1::job_outcome::Status as OutcomeStatus;
use census_proto::v1::{CompleteJobsRequest, CompleteJobsResponse, JobResult, LeaseJobsRequest};
use census_store::RunId;

use super::measure::{CpuSample, Memory};
use super::{Call, Calls, Retry, SimulationError, WorkerClient, timed};
use crate::Credential;

/// What the flooder does.
#[derive(Debug, Clone)]
pub struct Flood {
    /// The flooder's identity: not one of the honest workers'.
    pub flooder: Credential,
    /// CompleteJobs calls it sends.
    pub calls: u32,
    /// Results in each call (at most `census_proto::limits::MAX_BATCH`).
    pub results_per_call: usize,
    /// Calls it keeps in flight at once.
    pub concurrency: usize,
    /// Each call's client deadline.
    pub deadline: Duration,
    /// When the flood begins, from the workers' start.
    pub begins_after: Duration,
    /// How long after the flood's last answer memory is read again.
    pub settle: Duration,
}

/// The honest workers' results recorded so far and the process's resident
/// memory, at `seconds` since the workers started.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub seconds: f64,
    pub recorded: u64,
    pub rss_kib: u64,
}

/// How often the flood's timeline is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// What came of the flooder's calls. Its calls are numbered from 1 in the
/// order they were sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FloodCalls {
    /// Calls answered with an outcome for each result.
    pub answered: u64,
    /// Results of answered calls told their job was done already (a repeat).
    pub already_done: u64,
    /// Results of answered calls told their lease was lost.
    pub lease_lost: u64,
    /// Results of answered calls recorded: none, their leases are stale.
    pub recorded: u64,
    /// Results of answered calls told anything else (refused).
    pub other_outcomes: u64,
    /// Calls refused unread as a rejection against the flooder (INVALID_ARGUMENT).
    pub refused: u64,
    /// Calls refused because the flooder was quarantined (PERMISSION_DENIED).
    pub quarantined: u64,
    /// Calls refused as too many, with a retry hint.
    pub busy: u64,
    /// Calls whose client deadline passed.
    pub deadline_exceeded: u64,
    /// Calls that failed otherwise.
    pub failed: u64,
    pub last_failure: Option<String>,
    /// The first call refused unread.
    pub first_refused: Option<u32>,
    /// The first call refused for quarantine.
    pub first_quarantined: Option<u32>,
}

impl FloodCalls {
    /// Counts call `number`'s answer.
    fn count(&mut self, number: u32, answer: Result<tonic::Response<CompleteJobsResponse>, tonic::Status>) {
        let first = |slot: &mut Option<u32>| *slot = Some(slot.map_or(number, |seen| seen.min(number)));
        let status = match answer {
            Ok(response) => {
                self.answered += 1;
                for outcome in response.into_inner().outcomes {
                    match OutcomeStatus::try_from(outcome.status) {
                        Ok(OutcomeStatus::AlreadyDone) => self.already_done += 1,
                        Ok(OutcomeStatus::LeaseLost) => self.lease_lost += 1,
                        Ok(OutcomeStatus::Recorded) => self.recorded += 1,
                        _ => self.other_outcomes += 1,
                    }
                }
                return;
            }
            Err(status) => status,
        };
        if census_proto::retry::pushback(&status).is_some() {
            self.busy += 1;
            return;
        }
        match status.code() {
            tonic::Code::InvalidArgument => {
                self.refused += 1;
                first(&mut self.first_refused);
            }
            tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => {
                self.quarantined += 1;
                first(&mut self.first_quarantined);
            }
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => self.deadline_exceeded += 1,
            _ => {
                self.failed += 1;
                self.last_failure = Some(status.message().to_string());
            }
        }
    }
}

/// What a flood measured: its calls, when it began and ended, the
/// timeline sampled every 100 ms from the workers' start until `settled`,
/// and the memory then.
#[derive(Debug, Clone, PartialEq)]
pub struct FloodReport {
    pub calls: FloodCalls,
    /// Seconds from the workers' start to the first call sent.
    pub began: f64,
    /// Seconds from the workers' start to the last call's answer.
    pub ended: f64,
    /// Seconds from the workers' start to the last memory reading.
    pub settled: f64,
    pub samples: Vec<Sample>,
    pub rss_began_kib: u64,
    pub rss_settled_kib: u64,
    /// CPU seconds from the flood's first call to its last answer: the
    /// coordinator's, and the simulated side's (the workers' and the
    /// flooder's, on the same cores).
    pub coordinator_cpu_during: f64,
    pub simulated_cpu_during: f64,
}

/// The honest workers' rates and the process's memory around a flood.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phases {
    /// Results a second in the five seconds (at most half the time) before the flood.
    pub before_per_second: f64,
    /// Results a second from the flood's first call to its last answer
    /// (or to the workers' end, if sooner).
    pub during_per_second: f64,
    /// Results a second from the flood's last answer to the last memory
    /// reading (or to the workers' end): none if the workers ended first.
    pub after_per_second: Option<f64>,
    pub rss_began_kib: u64,
    /// The most of the samples from the flood's start to the last reading.
    pub rss_peak_kib: u64,
    pub rss_settled_kib: u64,
}

/// The longest window before the flood its rate is measured over.
const BEFORE_WINDOW: f64 = 5.0;

impl FloodReport {
    /// The phases, for workers that ended `workers_ended` seconds after their start.
    pub fn phases(&self, workers_ended: f64) -> Phases {
        let before_from = self.began - (self.began / 2.0).min(BEFORE_WINDOW);
        let rss_peak_kib = self
            .samples
            .iter()
            .filter(|s| s.seconds >= self.began)
            .map(|s| s.rss_kib)
            .chain([self.rss_began_kib, self.rss_settled_kib])
            .max()
            .unwrap_or(0);
        Phases {
            before_per_second: self.rate(before_from, self.began),
            during_per_second: self.rate(self.began, self.ended.min(workers_ended)),
            after_per_second: (workers_ended > self.ended)
                .then(|| self.rate(self.ended, self.settled.min(workers_ended))),
            rss_began_kib: self.rss_began_kib,
            rss_peak_kib,
            rss_settled_kib: self.rss_settled_kib,
        }
    }

    /// Results a second between the last samples at or before `from` and
    /// `to` (0 for no time between them).
    fn rate(&self, from: f64, to: f64) -> f64 {
        let at = |t: f64| self.samples.iter().rev().find(|s| s.seconds <= t).copied();
        match (at(from), at(to)) {
            (Some(a), Some(b)) if b.seconds > a.seconds => (b.recorded - a.recorded) as f64 / (b.seconds - a.seconds),
            _ => 0.0,
        }
    }
}

/// The flood, with the `stale` results its flooder reported before the
/// workers began ([`lease_and_report`]): waits for its time, sends its
/// calls, and samples the honest workers' `recorded` results and the
/// memory throughout, until `settle` after the flood.
pub(super) async fn run(
    flood: Flood,
    client: WorkerClient,
    stale: Vec<JobResult>,
    recorded: Arc<AtomicU64>,
    started: Instant,
) -> Result<FloodReport, SimulationError> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sampler = tokio::spawn(sample(recorded, started, stopped));
    tokio::time::sleep_until((started + flood.begins_after).into()).await;
    let results: Vec<JobResult> = stale.iter().cycle().take(flood.results_per_call).cloned().collect();
    let (began, rss_began_kib, cpu_began) = (started.elapsed().as_secs_f64(), Memory::now().rss_kib, CpuSample::now());
    let calls = send(&flood, &client, Arc::new(results)).await?;
    let (ended, cpu_ended) = (started.elapsed().as_secs_f64(), CpuSample::now());
    tokio::time::sleep(flood.settle).await;
    let (settled, rss_settled_kib) = (started.elapsed().as_secs_f64(), Memory::now().rss_kib);
    let _ = stop.send(());
    let samples = sampler.await.map_err(SimulationError::Task)?;
    Ok(FloodReport {
        calls,
        began,
        ended,
        settled,
        samples,
        rss_began_kib,
        rss_settled_kib,
        coordinator_cpu_during: cpu_ended.coordinator_since(&cpu_began),
        simulated_cpu_during: cpu_ended.workers_since(&cpu_began),
    })
}

/// Samples the timeline every [`SAMPLE_EVERY`] until told to stop.
async fn sample(
    recorded: Arc<AtomicU64>,
    started: Instant,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    loop {
        samples.push(Sample {
            seconds: started.elapsed().as_secs_f64(),
            recorded: recorded.load(Ordering::Relaxed),
            rss_kib: Memory::now().rss_kib,
        });
        tokio::select! {
            _ = &mut stopped => return samples,
            _ = tokio::time::sleep(SAMPLE_EVERY) => {}
        }
    }
}

/// Leases up to two jobs and reports their true counts, as an honest
/// worker would: the results whose tokens are stale from then on. Done
/// before the honest workers start, so that a job is left to lease.
pub(super) async fn lease_and_report(
    flood: &Flood,
    client: &WorkerClient,
    census: Census,
    run_id: RunId,
) -> Result<Vec<JobResult>, SimulationError> {
    let (name, mut calls, mut retry) = (&flood.flooder.name, Calls::default(), Retry::default());
    let leased = retry
        .until_answered(&mut calls, name, Call::Lease, || {
            let mut client = client.clone();
            let request = LeaseJobsRequest { worker_id: name.clone(), max_jobs: 2, run_id };
            async move { client.lease_jobs(timed(request)).await }
        })
        .await?;
    if leased.jobs.is_empty() {
        return Err(SimulationError::NothingToFlood);
    }
    let counter = census.job_counter();
    let mut results = Vec::with_capacity(leased.jobs.len());
    for job in leased.jobs {
        results.push(JobResult {
            job_id: job.job_id,
            count: counter.count(&job.key)?.to_string(),
            token: job.token,
            key: job.key,
            elapsed_seconds: 0.0,
            counter_version: census.counter_version(),
        });
    }
    retry
        .until_answered(&mut calls, name, Call::Complete, || {
            let mut client = client.clone();
            let request = CompleteJobsRequest { worker_id: name.clone(), results: results.clone() };
            async move { client.complete_jobs(timed(request)).await }
        })
        .await?;
    Ok(results)
}

/// Sends the flood's calls, `concurrency` at a time, each tried once.
async fn send(
    flood: &Flood,
    client: &WorkerClient,
    results: Arc<Vec<JobResult>>,
) -> Result<FloodCalls, SimulationError> {
    let mut calls = FloodCalls::default();
    let mut in_flight = tokio::task::JoinSet::new();
    for number in 1..=flood.calls {
        while in_flight.len() >= flood.concurrency.max(1) {
            let (number, answer) =
                in_flight.join_next().await.expect("calls in flight").map_err(SimulationError::Task)?;
            calls.count(number, answer);
        }
        let (mut client, results, name, deadline) =
            (client.clone(), results.clone(), flood.flooder.name.clone(), flood.deadline);
        in_flight.spawn(async move {
            let mut request =
                tonic::Request::new(CompleteJobsRequest { worker_id: name, results: results.as_ref().clone() });
            request.set_timeout(deadline);
            (number, client.complete_jobs(request).await)
        });
    }
    while let Some(joined) = in_flight.join_next().await {
        let (number, answer) = joined.map_err(SimulationError::Task)?;
        calls.count(number, answer);
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::{FloodReport, Sample};

    fn report(samples: &[(f64, u64, u64)]) -> FloodReport {
        FloodReport {
            calls: Default::default(),
            began: 10.0,
            ended: 14.0,
            settled: 20.0,
            samples: samples
                .iter()
                .map(|&(seconds, recorded, rss_kib)| Sample { seconds, recorded, rss_kib })
                .collect(),
            rss_began_kib: 100,
            rss_settled_kib: 110,
            coordinator_cpu_during: 0.0,
            simulated_cpu_during: 0.0,
        }
    }

    /// Before: the five seconds before the flood; during: its calls; after:
    /// to the last reading; the peak from the flood's start on only.
    #[test]
    fn phases_are_read_from_the_samples() {
        let samples: Vec<(f64, u64, u64)> = (0..=20)
            .map(|s| {
                let recorded = match s {
                    0..=10 => 100 * s,
                    11..=14 => 1000 + 10 * (s - 10),
                    _ => 1040 + 50 * (s - 14),
                };
                (s as f64, recorded, if s == 2 { 999 } else { 100 + s })
            })
            .collect();
        let phases = report(&samples).phases(30.0);
        assert_eq!((phases.before_per_second, phases.during_per_second), (100.0, 10.0));
        assert_eq!(phases.after_per_second, Some(50.0));
        assert_eq!((phases.rss_began_kib, phases.rss_peak_kib, phases.rss_settled_kib), (100, 120, 110));
        // Workers that ended during the flood have no rate after it.
        let ended = report(&samples).phases(12.0);
        assert_eq!((ended.during_per_second, ended.after_per_second), (10.0, None));
    }
}

//! `census simulate`: a load test of the real coordinator. It starts a
//! local cluster as `census run` does (`census_local::LocalCluster`: the
//! same `Coordinator`, gRPC server and store) on a made-up census,
//! `synthetic jobs=M` (counts of nothing, each checked by the coordinator
//! in O(1): `census_math::synthetic`), and N simulated workers
//! (`census_local::simulate`) that speak gRPC to it, each with its own
//! token, and prints what the coordinator and its store sustained. This
//! file reads the flags and prints; the engine is the library's.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use census_coordinator::{AdmissionLimits, CoordinatorConfig};
use census_local::simulate::flood::{Flood, FloodReport};
use census_local::simulate::measure::{CpuSample, Memory, Runtimes, round3};
use census_local::simulate::{Batch, Call, Calls, Driven, Heartbeats, Load, LoadProgress};
use census_local::{Identities, LocalCluster};
use census_math::census::{Census, Synthetic};
use census_proto::v1::{GetProgressRequest, GetResultRequest, Progress, RunResult};
use census_store::{DatabaseLocation, RunSummary, StoreConfig};

use super::UsageError;
use super::client::{connect_with, status_error};
use super::roles::{LogFormat, cores, init_logging};

#[derive(clap::Args)]
pub struct Args {
    /// Simulated workers, 1 to 100,000, each with its own token.
    #[arg(long, value_parser = parse_workers)]
    workers: usize,
    /// Jobs of the synthetic census, 1 to 10,000,000 (made-up counts, for load testing only).
    #[arg(long)]
    jobs: u64,
    /// A postgres:// URL to run against (a new run in it, removed never:
    /// use a throw-away database). Default: an SQLite file in a new
    /// temporary directory, removed at the end.
    #[arg(long, env = "CENSUS_DATABASE_URL", value_parser = super::DatabaseParser)]
    database: Option<DatabaseLocation>,
    /// Jobs a simulated worker leases at once, 1 to 2,048, or `rate`: as
    /// `census worker` sizes its batches, to count for the time the
    /// coordinator asks (a second while it is not busy, longer as a large
    /// fleet fills it), from the rate of the last batch.
    #[arg(long, default_value = "1", value_parser = parse_batch)]
    batch: Batch,
    /// Seconds a lease lasts without a heartbeat (the coordinator's
    /// `--lease-ttl`, 1 to 3,600): the pace asks for batches of up to a
    /// quarter of it.
    #[arg(long, default_value_t = CoordinatorConfig::default().lease_ttl.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600))]
    lease_ttl: u64,
    /// Milliseconds of made-up counting per job, between the lease and
    /// the report (0: none, the heaviest load a worker can make).
    #[arg(long, default_value = "0")]
    count_ms: u64,
    /// When a simulated worker heartbeats its leases.
    #[arg(long, value_enum, default_value = "worker")]
    heartbeats: HeartbeatsArg,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000), help = super::MAX_CALLS_IN_FLIGHT_HELP)]
    max_calls_in_flight: Option<u32>,
    #[arg(long, env = "CENSUS_DATABASE_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..=1000), help = super::DATABASE_CONNECTIONS_HELP)]
    database_connections: Option<u32>,
    /// HTTP/2 connections the simulated workers share (default: one each,
    /// as separate machines would have; fewer needs fewer file descriptors).
    #[arg(long, value_parser = parse_workers)]
    connections: Option<usize>,
    /// Floods the coordinator with stale reports during the run, as issue
    /// 44's attacker: one more identity leases and reports a job or two
    /// before the workers start, then, --flood-after seconds into the run,
    /// sends this many CompleteJobs calls (1 to 100,000), each of
    /// --flood-tokens results under its own stale lease tokens,
    /// --flood-concurrency at a time. The summary adds the workers' results
    /// a second before, during and after the flood, the process's memory at
    /// its start, its peak and 10 s after it, and what became of the flooder.
    #[arg(long, value_name = "CALLS", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    stale_flood: Option<u32>,
    /// Results in each call of the flood, 1 to 10,000.
    #[arg(long, default_value_t = 10_000, requires = "stale_flood", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    flood_tokens: u32,
    /// The client deadline of each call of the flood, in ms (1 to 3,600,000).
    #[arg(long, default_value_t = 30_000, requires = "stale_flood", value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    flood_deadline_ms: u64,
    /// Calls of the flood in flight at once, 1 to 10,000.
    #[arg(long, default_value_t = 32, requires = "stale_flood", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    flood_concurrency: u32,
    /// Seconds from the workers' start to the flood, 2 to 3,600 (the rate
    /// before it is measured over the last half of them, at most 5 s).
    #[arg(long, default_value_t = 10, requires = "stale_flood", value_parser = clap::value_parser!(u64).range(2..=3600))]
    flood_after: u64,
    /// Print only the summary, as one JSON object.
    #[arg(long)]
    json: bool,
    /// Log format (logs go to stderr; RUST_LOG=info shows more).
    #[arg(long, env = "CENSUS_LOG_FORMAT", value_enum, default_value = "pretty")]
    log_format: LogFormat,
}

/// When a simulated worker heartbeats its leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum HeartbeatsArg {
    /// As `census worker` does: a batch's leases in one call every third of
    /// the lease TTL while the batch is held (counted, then reported); a
    /// batch done sooner sends none.
    Worker,
    /// One call for each batch as soon as it is leased: the most a worker
    /// could send (what this command did before it modelled the worker).
    EveryBatch,
}

impl From<HeartbeatsArg> for Heartbeats {
    fn from(heartbeats: HeartbeatsArg) -> Heartbeats {
        match heartbeats {
            HeartbeatsArg::Worker => Heartbeats::Worker,
            HeartbeatsArg::EveryBatch => Heartbeats::EveryBatch,
        }
    }
}

fn parse_batch(text: &str) -> Result<Batch, String> {
    text.parse()
}

fn batch_json(batch: Batch) -> serde_json::Value {
    match batch {
        Batch::Fixed(n) => n.into(),
        Batch::Rate => "rate".into(),
    }
}

/// The most simulated workers (and connections) one command starts.
const MAX_WORKERS: usize = 100_000;

fn parse_workers(text: &str) -> Result<usize, String> {
    match text.replace(['_', ','], "").parse::<usize>() {
        Ok(n) if (1..=MAX_WORKERS).contains(&n) => Ok(n),
        _ => Err(format!("{text:?} is not a number from 1 to {MAX_WORKERS}")),
    }
}

/// What a simulation measured, for its summary.
struct Measured {
    run: RunSummary,
    create_seconds: f64,
    calls: Calls,
    seconds: f64,
    progress: Progress,
    result: RunResult,
    coordinator_cpu_seconds: f64,
    workers_cpu_seconds: f64,
    memory: Memory,
    admitted: census_coordinator::AdmissionCounts,
    flood: Option<FloodReport>,
}

/// How long after a flood's last answer the process's memory is read again.
const FLOOD_SETTLE: Duration = Duration::from_secs(10);

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    init_logging(args.log_format, "warn");
    let census = Census::new(Synthetic { jobs: args.jobs, salt: salt(), heavy: None })
        .map_err(|e| UsageError(format!("--jobs {}: {e}", args.jobs)))?;
    let connections = args.connections.unwrap_or(args.workers).min(args.workers);
    // Each connection is two descriptors here (client and server end),
    // plus the store's pool and the runtime's own.
    let descriptors = allow_descriptors(2 * connections as u64 + 256)?;
    let temporary = match &args.database {
        Some(_) => None,
        None => Some(tempfile::Builder::new().prefix("census-simulate-").tempdir()?),
    };
    let database = match (&args.database, &temporary) {
        (Some(location), _) => location.clone(),
        (None, Some(dir)) => DatabaseLocation::Sqlite(dir.path().join("simulate.db")),
        (None, None) => unreachable!("a temporary directory when no database is given"),
    };
    let shown_database = match &args.database {
        Some(location) => location.to_string(),
        None => "sqlite (a temporary file)".to_string(),
    };
    let pool = super::pool_for(&database, args.database_connections)?;
    let admission = super::admission_for(pool, args.max_calls_in_flight.map(|n| n as usize));
    let measured = simulate(&args, &database, pool, admission, census, &shown_database, connections)?;
    drop(temporary);

    let expected = census_math::synthetic::expected_answer(args.jobs, census_salt(census)).to_string();
    let answer_checked = measured.result.r#final && measured.result.answer == expected;
    let mut summary = summary_json(&args, &measured, answer_checked);
    summary["database"] = shown_database.into();
    summary["connections"] = connections.into();
    summary["max_calls_in_flight"] = admission.calls.into();
    summary["database_connections"] = pool.into();
    summary["file_descriptor_limit"] = descriptors.into();
    if args.json {
        println!("{summary}");
    } else {
        print_summary(&args, &measured, &summary, admission, answer_checked);
    }
    if !answer_checked || measured.progress.done != args.jobs {
        return Err(anyhow::anyhow!(
            "the run did not end as it must: {} of {} jobs done, final {}, answer {:?} (expected {expected})",
            measured.progress.done,
            args.jobs,
            measured.result.r#final,
            measured.result.answer
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts the local cluster on its runtime (the workers' results all
/// checked: they are not trusted as this process's own, the check is what
/// is measured), drives it with the simulated workers on theirs, reads the
/// run's progress and result as an operator would, and stops it.
fn simulate(
    args: &Args,
    database: &DatabaseLocation,
    pool: u32,
    admission: AdmissionLimits,
    census: Census,
    shown_database: &str,
    connections: usize,
) -> anyhow::Result<Measured> {
    let runtimes = Runtimes::new(cores())?;
    let created = Instant::now();
    let config = CoordinatorConfig {
        trust_local_workers: false,
        admission,
        lease_ttl: Duration::from_secs(args.lease_ttl),
        ..CoordinatorConfig::default()
    };
    let (cluster, run) = runtimes.coordinator.block_on(async {
        let store = super::open_store(database, StoreConfig::default(), pool).await?;
        let flooders = usize::from(args.stale_flood.is_some());
        let cluster = LocalCluster::start(store, config, Identities::named("sim", args.workers + flooders)).await?;
        let run = cluster.coordinator().create_run(census, 1).await?;
        anyhow::Ok((cluster, run))
    })?;
    let create_seconds = created.elapsed().as_secs_f64();
    if !args.json {
        eprintln!(
            "census simulate: {} workers, {} jobs ({census}, a load test: counts of nothing) on {shown_database}, \
             coordinator at {}",
            args.workers,
            args.jobs,
            cluster.address()
        );
    }
    let (honest, flooder) = cluster.workers().split_at(args.workers);
    let load = Load {
        address: cluster.address().to_string(),
        run_id: run.run_id,
        workers: honest.to_vec(),
        connections,
        batch: args.batch,
        count_ms: args.count_ms,
        heartbeats: args.heartbeats.into(),
        census,
        flood: args.stale_flood.map(|calls| Flood {
            flooder: flooder[0].clone(),
            calls,
            results_per_call: args.flood_tokens as usize,
            concurrency: args.flood_concurrency as usize,
            deadline: Duration::from_millis(args.flood_deadline_ms),
            begins_after: Duration::from_secs(args.flood_after),
            settle: FLOOD_SETTLE,
        }),
    };
    let show = !args.json;
    let before = CpuSample::now();
    let driven = runtimes.workers.block_on(async move {
        tokio::spawn(census_local::simulate::drive(load, move |progress: LoadProgress| {
            if show {
                eprintln!(
                    "progress: {} jobs recorded in {:.0} s, {} workers still working",
                    progress.recorded, progress.seconds, progress.working
                );
            }
        }))
        .await
    })?;
    let after = CpuSample::now();
    let memory = Memory::now();
    let admitted = cluster.coordinator().admission();
    let read = runtimes.coordinator.block_on(async {
        let read = read_run(&cluster, run.run_id).await;
        cluster.stop().await;
        read
    });
    drop(runtimes);
    let (Driven { calls, seconds, flood }, (progress, result)) = (driven?, read?);
    Ok(Measured {
        run,
        create_seconds,
        calls,
        seconds,
        progress,
        result,
        coordinator_cpu_seconds: after.coordinator_since(&before),
        workers_cpu_seconds: after.workers_since(&before),
        memory,
        admitted,
        flood,
    })
}

/// The run's progress and result, read over gRPC as an operator would.
async fn read_run(cluster: &LocalCluster, run_id: i64) -> anyhow::Result<(Progress, RunResult)> {
    let mut client = connect_with(&cluster.operator()).await?;
    let progress = client.get_progress(GetProgressRequest { run_id }).await.map_err(status_error)?.into_inner();
    let result = client.get_result(GetResultRequest { run_id }).await.map_err(status_error)?.into_inner();
    Ok((progress, result))
}

/// The summary as one JSON object (`--json`), but for what the caller
/// knows: the database, connections and limits.
fn summary_json(args: &Args, measured: &Measured, answer_checked: bool) -> serde_json::Value {
    let (calls, admitted) = (&measured.calls, &measured.admitted);
    let latency = |call: Call| {
        let latency = calls.latency(call);
        serde_json::json!({
            "calls": latency.calls,
            "p50_ms": latency.p50_ms,
            "p99_ms": latency.p99_ms,
            "max_ms": latency.max_ms,
            "answered_p50_ms": latency.answered_p50_ms,
            "answered_p99_ms": latency.answered_p99_ms,
        })
    };
    serde_json::json!({
        "census": measured.run.spec.census.to_string(),
        "workers": args.workers,
        "batch": batch_json(args.batch),
        "lease_ttl_seconds": args.lease_ttl,
        "count_ms": args.count_ms,
        "heartbeats": Heartbeats::from(args.heartbeats).name(),
        "jobs": args.jobs,
        "jobs_done": measured.progress.done,
        "results_recorded": calls.recorded,
        "results_already_done": calls.already_done,
        "results_lease_lost": calls.lease_lost,
        "results_refused": calls.refused,
        "calls_failed": calls.failed,
        "calls_refused_busy": calls.refused_busy,
        "last_failure": calls.last_failure,
        "admission": {
            "admitted": admitted.admitted,
            "refused_held": admitted.refused_held,
            "refused_leases": admitted.refused_leases,
            "most_in_flight": admitted.most_in_flight,
            "batch_pace_ms": admitted.batch_pace.as_millis() as u64,
        },
        "mean_batch": round3(calls.recorded as f64 / calls.batches.max(1) as f64),
        "empty_leases": calls.empty_leases,
        "final": measured.result.r#final,
        "answer": measured.result.answer,
        "answer_checked": answer_checked,
        "create_run_seconds": round3(measured.create_seconds),
        "seconds": round3(measured.seconds),
        "jobs_per_second": round3(measured.progress.done as f64 / measured.seconds.max(1e-9)),
        "lease": latency(Call::Lease),
        "heartbeat": latency(Call::Heartbeat),
        "complete": latency(Call::Complete),
        "coordinator_cpu_seconds": measured.coordinator_cpu_seconds,
        "workers_cpu_seconds": measured.workers_cpu_seconds,
        "process_rss_mib": round3(measured.memory.rss_kib as f64 / 1024.0),
        "process_peak_rss_mib": round3(measured.memory.peak_kib as f64 / 1024.0),
        "cores": cores(),
        "flood": measured.flood.as_ref().map(|flood| flood_json(args, flood, measured.seconds)),
    })
}

/// What a flood measured (`--stale-flood`), for workers that ended `workers_ended` s after their start.
fn flood_json(args: &Args, flood: &FloodReport, workers_ended: f64) -> serde_json::Value {
    let phases = flood.phases(workers_ended);
    let calls = &flood.calls;
    let mib = |kib: u64| round3(kib as f64 / 1024.0);
    let before = phases.before_per_second.max(1e-9);
    serde_json::json!({
        "calls": args.stale_flood,
        "results_per_call": args.flood_tokens,
        "concurrency": args.flood_concurrency,
        "deadline_ms": args.flood_deadline_ms,
        "began_seconds": round3(flood.began),
        "ended_seconds": round3(flood.ended),
        "settled_seconds": round3(flood.settled),
        "workers_ended_seconds": round3(workers_ended),
        "answered": calls.answered,
        "results_already_done": calls.already_done,
        "results_lease_lost": calls.lease_lost,
        "results_recorded": calls.recorded,
        "results_other": calls.other_outcomes,
        "refused": calls.refused,
        "quarantined": calls.quarantined,
        "refused_busy": calls.busy,
        "deadline_exceeded": calls.deadline_exceeded,
        "failed": calls.failed,
        "last_failure": calls.last_failure,
        "first_refused_call": calls.first_refused,
        "first_quarantined_call": calls.first_quarantined,
        "honest_per_second_before": round3(phases.before_per_second),
        "honest_per_second_during": round3(phases.during_per_second),
        "honest_per_second_after": phases.after_per_second.map(round3),
        "during_over_before": round3(phases.during_per_second / before),
        "rss_mib_began": mib(phases.rss_began_kib),
        "rss_mib_peak": mib(phases.rss_peak_kib),
        "rss_mib_settled": mib(phases.rss_settled_kib),
        "settled_over_began": round3(phases.rss_settled_kib as f64 / phases.rss_began_kib.max(1) as f64),
        "coordinator_cpu_seconds_during": flood.coordinator_cpu_during,
        "simulated_cpu_seconds_during": flood.simulated_cpu_during,
    })
}

/// The flood's lines of the summary (`--stale-flood`).
fn print_flood(flood: &serde_json::Value) {
    let call = |name: &str| flood[name].as_u64().map_or("none".to_string(), |n| format!("call {n}"));
    println!(
        "flood: {} calls of {} stale results from {:.1} s to {:.1} s: {} answered ({} results already done, {} \
         leases lost, {} recorded), {} refused unread (first at {}), {} refused quarantined (first at {}), {} busy, \
         {} past their deadline, {} failed",
        flood["calls"],
        flood["results_per_call"],
        flood["began_seconds"].as_f64().unwrap_or(0.0),
        flood["ended_seconds"].as_f64().unwrap_or(0.0),
        flood["answered"],
        flood["results_already_done"],
        flood["results_lease_lost"],
        flood["results_recorded"],
        flood["refused"],
        call("first_refused_call"),
        flood["quarantined"],
        call("first_quarantined_call"),
        flood["refused_busy"],
        flood["deadline_exceeded"],
        flood["failed"]
    );
    let after = match flood["honest_per_second_after"].as_f64() {
        Some(rate) => format!("{rate} after"),
        None => "none after (the workers were done before the flood ended)".to_string(),
    };
    println!(
        "flood: the workers' results/s {} before, {} during ({} of before), {after}; CPU during it: coordinator {} s, \
         simulated workers and flooder {} s",
        flood["honest_per_second_before"],
        flood["honest_per_second_during"],
        flood["during_over_before"],
        flood["coordinator_cpu_seconds_during"],
        flood["simulated_cpu_seconds_during"]
    );
    println!(
        "flood: process memory {} MiB at its start, peak {} MiB, {} MiB {} s after it ({} of the start; workers and \
         flooder included)",
        flood["rss_mib_began"],
        flood["rss_mib_peak"],
        flood["rss_mib_settled"],
        FLOOD_SETTLE.as_secs(),
        flood["settled_over_began"]
    );
}

/// The summary as lines for a person.
fn print_summary(
    args: &Args,
    measured: &Measured,
    summary: &serde_json::Value,
    admission: AdmissionLimits,
    answer_checked: bool,
) {
    let line = |name: &str| {
        let l = &summary[name];
        format!(
            "p50 {} ms, p99 {} ms, max {} ms ({} calls; the answered try alone: p50 {} ms, p99 {} ms)",
            l["p50_ms"], l["p99_ms"], l["max_ms"], l["calls"], l["answered_p50_ms"], l["answered_p99_ms"]
        )
    };
    let admitted = &measured.admitted;
    println!(
        "{} of {} jobs done in {:.1} s by {} workers: {} jobs/s",
        measured.progress.done, args.jobs, measured.seconds, args.workers, summary["jobs_per_second"]
    );
    println!("lease:     {}", line("lease"));
    println!("heartbeat: {}", line("heartbeat"));
    println!("complete:  {}", line("complete"));
    println!(
        "admission: {} calls admitted, {} refused busy (new leases {}, held leases {}), at most {} in flight of {}",
        admitted.admitted,
        admitted.refused_held + admitted.refused_leases,
        admitted.refused_leases,
        admitted.refused_held,
        admitted.most_in_flight,
        admission.calls
    );
    println!(
        "coordinator CPU {} s, simulated workers CPU {} s; process memory {} MiB (peak {} MiB, workers included)",
        summary["coordinator_cpu_seconds"],
        summary["workers_cpu_seconds"],
        summary["process_rss_mib"],
        summary["process_peak_rss_mib"]
    );
    if !summary["flood"].is_null() {
        print_flood(&summary["flood"]);
    }
    println!(
        "answer {} (the exact sum of made-up counts: {})",
        measured.result.answer,
        if answer_checked { "as expected" } else { "NOT as expected" }
    );
}

/// A salt new for every simulation, so that a run in a Postgres database
/// that already holds one is a new run, not the old one resumed.
fn salt() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)
}

fn census_salt(census: Census) -> u64 {
    census.as_kind::<Synthetic>().expect("census simulate runs the synthetic census").salt
}

/// Raises the soft limit on open files to `wanted` if the hard limit allows;
/// returns the limit in force, or says what to do when it is too low.
fn allow_descriptors(wanted: u64) -> anyhow::Result<u64> {
    // SAFETY: getrlimit and setrlimit read and write the struct given, which is ours.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Ok(0);
        }
        if limit.rlim_cur as u64 >= wanted {
            return Ok(limit.rlim_cur as u64);
        }
        if (limit.rlim_max as u64) < wanted {
            return Err(UsageError(format!(
                "this many connections need about {wanted} open files, and the hard limit is {}: \
                 share connections (--connections N) or raise the limit (ulimit -Hn)",
                limit.rlim_max
            ))
            .into());
        }
        limit.rlim_cur = wanted as libc::rlim_t;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(anyhow::anyhow!(
                "cannot raise the open-file limit to {wanted}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(wanted)
    }
}

//! `census run`: the whole census on this machine. It starts the same
//! coordinator and workers a cluster runs, in one process, on a loopback port
//! and an SQLite file, shows progress, and prints the exact total.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use census_coordinator::{AuthConfig, CoordinatorConfig};
use census_local::{Identities, LocalCluster, LocalWorkers};
use census_math::census::{Census, Sudoku};
use census_math::total::thousands;
use census_math::{CounterKind, Stage};
use census_proto::v1::{GetProgressRequest, GetResultRequest};
use census_store::{DatabaseLocation, RunSummary, StoreConfig};
use census_worker::Stop;
use indicatif::{ProgressBar, ProgressStyle};

use super::client::{Client, connect_with, print_result, status_error};
use super::roles::{LogFormat, cores, init_logging, runtime, signals};
use super::{UsageError, parse_counter, parse_stage};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, value_parser = super::CensusParser, env = "CENSUS_CENSUS", conflicts_with_all = ["stage", "counter"], help = super::census_help())]
    census: Option<Census>,
    #[arg(long, env = "CENSUS_STAGE", default_value = "44", value_parser = parse_stage, help = super::STAGE_HELP)]
    stage: Stage,
    #[arg(long, env = "CENSUS_COUNTER", default_value = "column-sets", value_parser = parse_counter, help = super::COUNTER_HELP)]
    counter: CounterKind,
    /// Where the run is kept: an SQLite file, or a postgres:// URL. Run again to resume.
    #[arg(long, env = "CENSUS_DATABASE_URL", default_value = "census.db", value_parser = super::DatabaseParser)]
    database: DatabaseLocation,
    /// Counting threads (in-process workers), 1 to 1024 (default: the
    /// number of cores). `--workers`, its old name, still works.
    #[arg(long, alias = "workers", env = "CENSUS_THREADS", value_parser = super::parse_threads)]
    threads: Option<usize>,
    /// Also serve the live status page on this address, e.g. 127.0.0.1:8080.
    #[arg(long, env = "CENSUS_HTTP_LISTEN")]
    http_listen: Option<std::net::SocketAddr>,
    /// Run a census that needs Postgres (2x6 boxes: 947,985 jobs of about an
    /// hour each, for a cluster) on an SQLite file anyway.
    #[arg(long)]
    allow_sqlite: bool,
    #[arg(long, env = "CENSUS_MAX_CALLS_IN_FLIGHT", value_parser = clap::value_parser!(u32).range(1..=100_000), help = super::MAX_CALLS_IN_FLIGHT_HELP)]
    max_calls_in_flight: Option<u32>,
    #[arg(long, env = "CENSUS_DATABASE_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..=1000), help = super::DATABASE_CONNECTIONS_HELP)]
    database_connections: Option<u32>,
    /// Where a `layers` census's files live (the parts of each layer, which
    /// its jobs write and read): by default next to an SQLite file, its
    /// name with the extension `layers` (census.db: census.layers); a
    /// Postgres database needs one given.
    #[arg(long, env = "CENSUS_LAYERS_DIR")]
    layers_dir: Option<std::path::PathBuf>,
    /// Print only the result: no header, no serving line, no progress (the
    /// status page's address still, when --http-listen asks for one).
    #[arg(long, short)]
    quiet: bool,
    /// Log format (logs go to stderr; RUST_LOG=info shows more).
    #[arg(long, env = "CENSUS_LOG_FORMAT", value_enum, default_value = "pretty")]
    log_format: LogFormat,
}

/// Leases of a local run are short, so a run killed hard resumes quickly.
const LOCAL_LEASE_TTL: Duration = Duration::from_secs(5);

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    init_logging(args.log_format, "warn");
    let workers = match args.threads {
        Some(threads) => threads,
        // The variable of the old name, read as the flag's was.
        None => match std::env::var("CENSUS_WORKERS") {
            Ok(text) => super::parse_threads(&text).map_err(|e| UsageError(format!("CENSUS_WORKERS: {e}")))?,
            Err(_) => cores(),
        },
    };
    runtime()?.block_on(census(args, workers))
}

async fn census(args: Args, workers: usize) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let census = super::census_of(args.census, args.stage, args.counter);
    let layers_dir = layers_dir(&args, census)?;
    let (cluster, run) = start(&args, census, workers).await?;
    let status_page = serve_status_page(&args, &cluster).await?;
    let mut client = connect_with(&cluster.operator()).await?;
    let mut workers = (!run.is_final).then(|| cluster.start_workers(run.run_id, layers_dir));
    let followed = follow(&args, &mut client, &run, workers.as_mut()).await;
    let interrupted = matches!(followed, Ok(Followed::Interrupted));
    if let Some(workers) = workers {
        workers.stop(if interrupted { Stop::Drain } else { Stop::Now }).await;
    }
    let result = match followed {
        Ok(_) => client.get_result(GetResultRequest { run_id: run.run_id }).await.map_err(status_error),
        Err(error) => Err(error),
    };
    if let Some(page) = status_page {
        page.abort();
    }
    // Closing the store folds SQLite's write-ahead log into the file, so
    // that the file alone is the census.
    cluster.stop().await;
    let result = result?.into_inner();
    if interrupted {
        let again = match census.as_kind::<Sudoku>() {
            Some(Sudoku { stage, counter }) => format!("--stage {} --counter {counter}", stage.name()),
            None => format!("--census {:?}", census.to_string()),
        };
        println!("interrupted: nothing is lost; `census run {again} --database {}` resumes it", args.database);
        return Ok(ExitCode::from(130));
    }
    if run.is_final {
        say(&args, "this run was already finished; the stored answer:".into());
    }
    print_result(&result);
    say(&args, format!("elapsed: {:.3} s", started.elapsed().as_secs_f64()));
    Ok(if result.r#final { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// A line for the user, unless --quiet.
fn say(args: &Args, line: String) {
    if !args.quiet {
        println!("{line}");
    }
}

/// Where a `layers` census's files go (none for other kinds), once the
/// census is known to fit the database.
fn layers_dir(args: &Args, census: Census) -> anyhow::Result<Option<std::path::PathBuf>> {
    if let Some(why) = census.needs_postgres().filter(|_| !args.database.is_server() && !args.allow_sqlite) {
        return Err(super::UsageError(format!(
            "{census} needs Postgres (--database postgres://...): {why}; --allow-sqlite runs it on {} anyway",
            args.database
        ))
        .into());
    }
    Ok(match (census, args.layers_dir.clone()) {
        (census, None) if census.needs_shared_files() => Some(layers_dir_next_to(&args.database).ok_or_else(|| {
            super::UsageError(format!("{census} on Postgres needs --layers-dir: where its layer files go"))
        })?),
        (_, dir) => dir,
    })
}

/// Opens the store, starts the local cluster (the coordinator a cluster
/// runs, with this process's own credentials) and creates (or finds) the
/// run; says what it is and where it is served.
async fn start(args: &Args, census: Census, workers: usize) -> anyhow::Result<(LocalCluster, RunSummary)> {
    // Every worker here is this process's own: a job that fails on one of
    // them fails for good (with one worker a quorum of two identities would
    // never come, and the run would wait forever instead of saying why).
    let store_config = StoreConfig { fail_quorum: 1, ..StoreConfig::default() };
    let connections = super::pool_for(&args.database, args.database_connections)?;
    let store = super::open_store(&args.database, store_config, connections).await?;
    // Reads are open: the loopback port serves `census status` from another
    // terminal; nothing can change without the in-process tokens. The
    // workers are this process's threads: their results are recounted
    // only by a counter other than theirs (column-sets checking banded or
    // enumerate); the same counter here again could not disagree.
    let config = CoordinatorConfig {
        lease_ttl: LOCAL_LEASE_TTL,
        auth: AuthConfig { public_read: true, ..AuthConfig::default() },
        trust_local_workers: true,
        admission: super::admission_for(connections, args.max_calls_in_flight.map(|n| n as usize)),
        ..CoordinatorConfig::default()
    };
    let cluster = LocalCluster::start(store, config, Identities::named("local", workers)).await?;
    let run = cluster.coordinator().create_run(census, 1).await?;
    say(
        args,
        format!(
            "census: {} ({} classes), {} jobs in {}{}",
            run.spec.census,
            thousands(&run.classes),
            thousands(&run.jobs_total),
            args.database,
            if run.jobs_done > 0 { format!(", resuming at {} done", thousands(&run.jobs_done)) } else { String::new() }
        ),
    );
    let address = cluster.address();
    say(args, format!("serving on {address} (progress from elsewhere: census status --coordinator {address})"));
    Ok((cluster, run))
}

/// The live status page, when --http-listen asks for one.
async fn serve_status_page(
    args: &Args,
    cluster: &LocalCluster,
) -> anyhow::Result<Option<tokio::task::JoinHandle<std::io::Result<()>>>> {
    let Some(http) = args.http_listen else { return Ok(None) };
    let listener = tokio::net::TcpListener::bind(http)
        .await
        .map_err(|e| anyhow::anyhow!("cannot serve the status page on {http}: {e}"))?;
    println!("status page: http://{}/", listener.local_addr()?);
    Ok(Some(tokio::spawn(cluster.coordinator().clone().serve_status_page(listener, std::future::pending()))))
}

/// How following a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Followed {
    /// Final, or every job done or failed with something to resolve.
    Ended,
    /// Told to stop by a signal.
    Interrupted,
}

/// Shows the run's progress until it ends or a signal says stop. Workers
/// only end early on an error: without them the run would wait forever,
/// so that is an error (what is counted stays stored).
async fn follow(
    args: &Args,
    client: &mut Client,
    run: &RunSummary,
    mut workers: Option<&mut LocalWorkers>,
) -> anyhow::Result<Followed> {
    let mut display = Display::new(args.quiet, run.jobs_total, run.jobs_done, run.spec.census.knows_job_costs());
    let mut signals = signals();
    let followed = loop {
        let progress = match client.get_progress(GetProgressRequest { run_id: run.run_id }).await {
            Ok(progress) => progress.into_inner(),
            Err(status) => break Err(status_error(status)),
        };
        display.update(&progress);
        if progress.r#final
            || (progress.done + progress.failed == progress.jobs_total && progress.conflicts + progress.failed > 0)
        {
            break Ok(Followed::Ended);
        }
        if let Some(workers) = workers.as_deref_mut()
            && let Some(ended) = workers.ended().await
        {
            break Err(ended.into());
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL_EVERY) => {}
            _ = signals.wait_for(|n| *n > 0) => break Ok(Followed::Interrupted),
        }
    };
    display.finish();
    followed
}

/// The directory of a layers census's files next to an SQLite database
/// (`census.db`, `sqlite://census.db`: `census.layers`); none for Postgres.
fn layers_dir_next_to(database: &DatabaseLocation) -> Option<std::path::PathBuf> {
    database.sqlite_file().map(|path| path.with_extension("layers"))
}

/// How `census run` shows progress: a bar on a terminal, a line every
/// few seconds otherwise, nothing with --quiet.
struct Display {
    bar: Option<ProgressBar>,
    plain: bool,
    rate: RateWindow,
    last_line: Instant,
    /// Jobs done when this run (or its resumption) started.
    done_at_start: u64,
    /// Whether the bar, the line and the ETA weigh jobs by their expected
    /// cost (`Census::knows_job_costs`: a layers census, whose map jobs
    /// cost thousands of times its class jobs); else by jobs.
    by_cost: bool,
}

/// The plain progress line of `census run`, the same for every kind of
/// census: jobs (they are what a run is made of), failures, the share of
/// the expected cost done where the census's jobs differ in cost
/// (`by_cost`), and the speed once jobs finish. No sum of counts: before
/// the end it is neither S nor the answer of any census, and it was read
/// as one.
fn progress_text(
    progress: &census_proto::v1::Progress,
    rate: Option<(f64, f64)>,
    moved: bool,
    by_cost: bool,
) -> String {
    format!(
        "progress: {}/{} jobs{}{}, {}",
        thousands(&progress.done),
        thousands(&progress.jobs_total),
        if by_cost { format!(" ({})", cost_text(progress)) } else { String::new() },
        if progress.failed > 0 { format!(" ({} failed)", thousands(&progress.failed)) } else { String::new() },
        speed_text(progress, rate, moved)
    )
}

/// The share of the expected cost done: `42.0% of the expected cost`.
fn cost_text(progress: &census_proto::v1::Progress) -> String {
    format!("{:.1}% of the expected cost", 100.0 * progress.fraction_done())
}

/// The speed part of the progress line (the bar shows the jobs itself).
fn speed_text(progress: &census_proto::v1::Progress, rate: Option<(f64, f64)>, moved: bool) -> String {
    match rate {
        Some((rate, eta)) => format!("{rate:.1} jobs/s, ETA {}", duration_text(eta)),
        // A census whose jobs take longer than the rate's window (or a
        // slow stretch of one) is not starting again.
        None if moved => format!("no job finished in the last {} s", RATE_WINDOW.as_secs()),
        None if progress.leased > 0 => "counting the first jobs".to_string(),
        None => "starting".to_string(),
    }
}

const YEAR: f64 = 365.25 * 86_400.0;

/// Seconds as a person reads them: `45 s`, `12 min`, `5.2 h`, `3.1 days`, `40 years`.
fn duration_text(seconds: f64) -> String {
    match seconds {
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7_200.0 => format!("{:.0} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.1} h", s / 3_600.0),
        s if s < 2.0 * YEAR => format!("{:.1} days", s / 86_400.0),
        s => format!("{} years", thousands(&((s / YEAR).round() as u64))),
    }
}

const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// How often `census run` asks for progress: often enough that a short run
/// ends when its last job does, not up to half a second later.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// Jobs a second measured over the last half minute, so that the ETA
/// follows the run's current speed without jumping with every poll (a rate
/// of whole jobs per poll made an ETA at a steady 0.5 jobs/s swing between
/// 219 and 583 s). The ETA is the work left at the work done a second over
/// the same window, the work being the jobs' expected cost where it is
/// weighed, else the jobs; it is estimated when work is done and counts
/// down in between: a long job under way is not done work, and while it
/// ran the rate fell and the ETA rose, to the job's whole cost as it ended
/// (a 5 s job of the essentially different count, last, showed 6 s left
/// with 0.3 s to go).
struct RateWindow {
    /// (when, jobs done, work done)
    samples: std::collections::VecDeque<(Instant, u64, u64)>,
    /// The last estimate: when, the work done then, the seconds left.
    estimated: Option<(Instant, u64, f64)>,
}

const RATE_WINDOW: Duration = Duration::from_secs(30);

impl RateWindow {
    fn new() -> RateWindow {
        RateWindow { samples: Default::default(), estimated: None }
    }

    /// Records `done` jobs and `work` of `work_total` done at `now`; the
    /// jobs a second over the window and the seconds left, once there is
    /// something to measure.
    fn observe(&mut self, now: Instant, done: u64, work: u64, work_total: u64) -> Option<(f64, f64)> {
        self.samples.push_back((now, done, work));
        while self.samples.len() > 2 && now - self.samples[0].0 > RATE_WINDOW {
            self.samples.pop_front();
        }
        let (then, done_then, work_then) = self.samples[0];
        let seconds = (now - then).as_secs_f64();
        if seconds < 0.5 || done <= done_then || work <= work_then {
            return None;
        }
        let rate = (done - done_then) as f64 / seconds;
        let left = match self.estimated {
            Some((at, work_at, left)) if work_at == work => (left - (now - at).as_secs_f64()).max(0.0),
            _ => {
                let left = work_total.saturating_sub(work) as f64 * seconds / (work - work_then) as f64;
                self.estimated = Some((now, work, left));
                left
            }
        };
        Some((rate, left))
    }
}

impl Display {
    fn new(quiet: bool, total: u64, done: u64, by_cost: bool) -> Display {
        use std::io::IsTerminal;
        let terminal = std::io::stderr().is_terminal();
        let bar = (!quiet && terminal).then(|| {
            // By cost, the bar's length and position are costs (set at the
            // first poll), and the jobs are in the message.
            let (template, length, position) = if by_cost {
                ("{bar:40} {percent}% of the expected cost  {msg}", 0, 0)
            } else {
                ("{bar:40} {pos}/{len} jobs  {msg}", total, done)
            };
            let bar = ProgressBar::new(length);
            bar.set_style(ProgressStyle::with_template(template).expect("a valid template").progress_chars("=> "));
            bar.set_position(position);
            bar
        });
        Display {
            bar,
            plain: !quiet && !terminal,
            rate: RateWindow::new(),
            last_line: Instant::now(),
            done_at_start: done,
            by_cost,
        }
    }

    fn update(&mut self, progress: &census_proto::v1::Progress) {
        let by_cost = self.by_cost && progress.cost_total > 0;
        let (work, work_total) =
            if by_cost { (progress.cost_done, progress.cost_total) } else { (progress.done, progress.jobs_total) };
        let rate = self.rate.observe(Instant::now(), progress.done, work, work_total);
        let moved = progress.done > self.done_at_start;
        if let Some(bar) = &self.bar {
            if by_cost {
                bar.set_length(work_total);
                bar.set_message(format!(
                    "{}/{} jobs, {}",
                    thousands(&progress.done),
                    thousands(&progress.jobs_total),
                    speed_text(progress, rate, moved)
                ));
            } else {
                bar.set_message(speed_text(progress, rate, moved));
            }
            bar.set_position(work);
        } else if self.plain && self.last_line.elapsed() >= PLAIN_EVERY {
            self.last_line = Instant::now();
            eprintln!("{}", progress_text(progress, rate, moved, by_cost));
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layers_census_keeps_its_files_next_to_its_sqlite_file() {
        let next_to =
            |database: &str| layers_dir_next_to(&database.parse().unwrap()).map(|dir| dir.display().to_string());
        assert_eq!(next_to("census.db").as_deref(), Some("census.layers"));
        assert_eq!(next_to("sqlite:///tmp/run.db").as_deref(), Some("/tmp/run.layers"));
        assert_eq!(next_to("sqlite:data/run").as_deref(), Some("data/run.layers"));
        assert_eq!(next_to("postgres://census@db/census"), None);
    }

    /// When each job of `costs` (seconds, in the queue's order) finishes on
    /// `threads` threads that each take the next job when free.
    fn finish_times(costs: &[f64], threads: usize) -> Vec<(f64, usize)> {
        let mut free = vec![0.0f64; threads];
        let mut finished: Vec<(f64, usize)> = costs
            .iter()
            .enumerate()
            .map(|(job, cost)| {
                let thread = (0..threads).min_by(|&a, &b| free[a].total_cmp(&free[b])).unwrap();
                free[thread] += cost;
                (free[thread], job)
            })
            .collect();
        finished.sort_by(|a, b| a.0.total_cmp(&b.0));
        finished
    }

    /// The ETA of `census run --census essentially-different` (whose jobs
    /// take from microseconds to seconds), fed the jobs' measured times as
    /// they finish and polled every 50 ms, as `census run` polls: once 10 %
    /// of the expected cost is done it never says more than twice the time
    /// really left (to the second it is shown in). Weighed by jobs it said 12 to 18 minutes for a run of
    /// 27 s (issue 46), and counting no time down while a long job ran it
    /// said 6 s with 0.3 s to go. The
    /// times are thread CPU seconds of each job (`census bench --census
    /// essentially-different --sample 282 --seed 2 --threads 1 --json`),
    /// another run than the one `Census::job_cost`'s figures come from.
    #[test]
    fn the_eta_of_the_essentially_different_count_is_at_most_twice_the_time_left() {
        let census = Census::from(census_math::census::EssentiallyDifferent);
        assert!(census.knows_job_costs());
        let measured: std::collections::HashMap<&str, f64> =
            include_str!("../../tests/data/essentially-different-job-seconds.tsv")
                .lines()
                .map(|line| {
                    let (seconds, key) = line.split_once('\t').unwrap();
                    (key, seconds.parse().unwrap())
                })
                .collect();
        let jobs = census.jobs().unwrap();
        let seconds: Vec<f64> = jobs.iter().map(|job| measured[job.key.as_str()]).collect();
        let costs: Vec<u64> = jobs.iter().map(|job| census.job_cost(&job.key).unwrap()).collect();
        let total: u64 = costs.iter().sum();
        for threads in [1, 2, 4] {
            let finished = finish_times(&seconds, threads);
            let end = finished.last().unwrap().0;
            let start = Instant::now();
            let mut window = RateWindow::new();
            let (mut next, mut done, mut work, mut checked) = (0, 0, 0, 0);
            for poll in 0.. {
                let now = f64::from(poll) * 0.05;
                while next < finished.len() && finished[next].0 <= now {
                    (done, work) = (done + 1, work + costs[finished[next].1]);
                    next += 1;
                }
                if let Some((_, eta)) = window.observe(start + Duration::from_secs_f64(now), done, work, total)
                    && work * 10 >= total
                    && done < jobs.len() as u64
                {
                    let left = end - now;
                    // Half a second more: it is shown in whole seconds.
                    assert!(
                        eta <= 2.0 * left + 0.5,
                        "{threads} thread(s), {now:.2} s: ETA {eta:.2} s, {left:.2} s left"
                    );
                    checked += 1;
                }
                if next == finished.len() {
                    break;
                }
            }
            assert!(checked > 100, "{threads} thread(s): {checked} polls checked");
        }
    }

    /// A steady 0.5 jobs/s polled every 0.5 s (one job every other poll)
    /// gives a steady rate and an ETA that only counts down.
    #[test]
    fn a_steady_rate_gives_a_steady_eta() {
        let start = Instant::now();
        let mut window = RateWindow::new();
        let mut etas = Vec::new();
        for poll in 0..240u64 {
            let now = start + Duration::from_millis(500 * poll);
            let done = poll / 4;
            if let Some((rate, eta)) = window.observe(now, done, done, 1000)
                && poll >= 80
            {
                assert!((rate - 0.5).abs() < 0.05, "poll {poll}: rate {rate}");
                etas.push(eta);
            }
        }
        assert!(etas.len() > 100);
        for pair in etas.windows(2) {
            assert!(pair[1] <= pair[0] + 40.0, "the ETA jumped from {} to {}", pair[0], pair[1]);
        }
        let last = *etas.last().unwrap();
        assert!((last - (1000.0 - 59.0) / 0.5).abs() < 200.0, "{last}");
    }

    fn progress(done: u64, total: u64, leased: u64, failed: u64) -> census_proto::v1::Progress {
        census_proto::v1::Progress {
            done,
            jobs_total: total,
            leased,
            failed,
            completions_counted: "18383222450951424".into(),
            ..Default::default()
        }
    }

    /// The line says jobs and speed, with separators, and never a sum of
    /// counts (which no census's answer is before the end); a run whose
    /// jobs stopped finishing for a while is not "starting".
    #[test]
    fn the_progress_line_says_jobs_and_speed_only() {
        assert_eq!(
            progress_text(&progress(0, 144_578, 0, 0), None, false, false),
            "progress: 0/144,578 jobs, starting"
        );
        assert_eq!(
            progress_text(&progress(0, 144_578, 2, 0), None, false, false),
            "progress: 0/144,578 jobs, counting the first jobs"
        );
        assert_eq!(
            progress_text(&progress(14, 282, 2, 0), None, true, false),
            "progress: 14/282 jobs, no job finished in the last 30 s"
        );
        assert_eq!(
            progress_text(&progress(1_200, 3_550, 2, 3), Some((0.3, 9_400.0)), true, false),
            "progress: 1,200/3,550 jobs (3 failed), 0.3 jobs/s, ETA 2.6 h"
        );
        assert!(!progress_text(&progress(14, 282, 2, 0), Some((1.0, 268.0)), true, false).contains("18,383"));
    }

    /// By cost, the line says the share of the expected cost done, and the
    /// ETA is the cost left at the cost done a second: a run whose first
    /// jobs were cheap is not nearly done.
    #[test]
    fn a_run_weighed_by_cost_shows_and_times_its_cost() {
        let heavy = census_proto::v1::Progress { cost_total: 1_000, cost_done: 250, ..progress(300, 400, 2, 0) };
        assert_eq!(
            progress_text(&heavy, Some((10.0, 75.0)), true, true),
            "progress: 300/400 jobs (25.0% of the expected cost), 10.0 jobs/s, ETA 75 s"
        );
        // 10 jobs/s but 5 of cost a second: 750 of cost left is 150 s.
        let start = Instant::now();
        let mut window = RateWindow::new();
        assert_eq!(window.observe(start, 250, 200, 1_000), None);
        let later = start + Duration::from_secs(10);
        assert_eq!(window.observe(later, 350, 250, 1_000), Some((10.0, 150.0)));
    }

    #[test]
    fn durations_read_as_a_person_reads_them() {
        assert_eq!(duration_text(45.4), "45 s");
        assert_eq!(duration_text(720.0), "12 min");
        assert_eq!(duration_text(18_720.0), "5.2 h");
        assert_eq!(duration_text(267_840.0), "3.1 days");
        assert_eq!(duration_text(40.0 * YEAR), "40 years");
    }

    #[test]
    fn no_rate_before_anything_moves() {
        let start = Instant::now();
        let mut window = RateWindow::new();
        assert_eq!(window.observe(start, 5, 5, 10), None);
        assert_eq!(window.observe(start + Duration::from_secs(3), 5, 5, 10), None);
    }
}

//! Completions: the transaction that applies a batch of [`decide`]'s
//! verdicts: results and rejections appended, jobs and class sums updated,
//! and the run finished when its last job is.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use num_bigint::BigUint;
use sqlx::Row;

use super::decision::{JobView, Report, Verdict, decide};
use super::exact::{ClassChanges, Direction};
use super::queue::RETIRE_LEASE;
use super::{JobState, SqlStore, now_ms, parse_count};
use crate::{CompleteOutcome, Completion, JobId, RunId, StoreError};

/// One row of the append-only results table.
struct ResultRow {
    job: JobId,
    run: RunId,
    attempt: i64,
    round: i64,
    worker: String,
    count: u128,
    elapsed_ms: f64,
    counter_version: String,
    outcome: &'static str,
}

/// One row of the append-only rejections table.
pub(super) struct RejectionRow {
    pub(super) job: JobId,
    pub(super) run: RunId,
    pub(super) attempt: i64,
    pub(super) worker: String,
    pub(super) count: u128,
    pub(super) reason: String,
}

/// Per-run changes of a batch.
#[derive(Default, Clone)]
struct RunDelta {
    done: i64,
    conflicts_opened: i64,
    failed_added: i64,
    counted: BigUint,
}

/// What a batch of completions changes.
#[derive(Default)]
struct Deltas {
    /// job -> (new state, accepted count, votes added, keep the token)
    jobs: BTreeMap<JobId, (JobState, Option<u128>, i64)>,
    /// Jobs newly flagged with a conflict.
    conflicted: BTreeSet<JobId>,
    /// (run, class) -> (count added, jobs done added)
    classes: ClassChanges,
    runs: BTreeMap<RunId, RunDelta>,
    /// (run, worker) -> (results accepted, completions)
    workers: BTreeMap<(RunId, String), (i64, BigUint)>,
    rejections: Vec<RejectionRow>,
}

impl SqlStore {
    pub(crate) async fn complete_batch(
        &self,
        completions: &[Completion],
    ) -> Result<Vec<Result<CompleteOutcome, StoreError>>, StoreError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        // The reporting identities first (a quarantine in progress finishes
        // before their reports are weighed, and sees them if they commit first).
        self.lock_identities(&mut tx, completions.iter().map(|c| c.worker.as_str())).await?;

        // Lock the batch's jobs in id order (so concurrent batches cannot
        // deadlock), then decide every completion in Rust, then write in bulk.
        let mut ids: Vec<JobId> = completions.iter().map(|c| c.job_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let mut jobs: HashMap<JobId, JobView> = HashMap::with_capacity(ids.len());
        let rows = self
            .select_by_ids(&mut tx, &ids, |ids| {
                format!(
                    "SELECT j.id, j.run_id, j.class_id, j.key, j.state, j.attempt, j.lease_token, j.lease_owner,
                            j.lease_expires_at, j.votes, r.redundancy, r.cancelled_at, j.round, r.counter_version
                     FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.id IN ({ids}) ORDER BY j.id {}",
                    self.backend.for_update()
                )
            })
            .await?;
        for row in rows {
            let job = JobView {
                run: row.try_get(1)?,
                class: row.try_get(2)?,
                key: row.try_get(3)?,
                state: row.try_get::<String, _>(4)?.parse()?,
                attempt: row.try_get(5)?,
                token: row.try_get(6)?,
                owner: row.try_get(7)?,
                expires_at: row.try_get(8)?,
                redundancy: row.try_get::<i64, _>(10)? as u32,
                cancelled: row.try_get::<Option<i64>, _>(11)?.is_some(),
                round: row.try_get(12)?,
                counter_version: row.try_get(13)?,
                votes: Vec::new(),
            };
            let votes = row.try_get::<i64, _>(9)?;
            let id: JobId = row.try_get(0)?;
            jobs.insert(id, job);
            if votes == 0 {
                continue;
            }
            // Earlier votes of this round: who voted, and what.
            let earlier = sqlx::query(
                "SELECT worker, CAST(count AS TEXT), round FROM results WHERE job_id = $1 AND outcome IN ('vote', 'accepted') ORDER BY id",
            )
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
            let job = jobs.get_mut(&id).expect("just inserted");
            for vote in &earlier {
                if vote.try_get::<i64, _>(2)? == job.round {
                    job.votes.push((vote.try_get(0)?, parse_count(&vote.try_get::<String, _>(1)?)?));
                }
            }
        }
        // Done jobs have no votes counted above when redundancy is 1: their
        // accepted result is the only vote, needed to recognise a repeat.
        for (id, job) in jobs.iter_mut().filter(|(_, job)| job.state == JobState::Done && job.votes.is_empty()) {
            let accepted = sqlx::query(
                "SELECT worker, CAST(count AS TEXT) FROM results WHERE job_id = $1 AND round = $2 AND outcome = 'accepted' ORDER BY id",
            )
            .bind(*id)
            .bind(job.round)
            .fetch_all(&mut *tx)
            .await?;
            for vote in &accepted {
                job.votes.push((vote.try_get(0)?, parse_count(&vote.try_get::<String, _>(1)?)?));
            }
        }

        let mut outcomes = Vec::with_capacity(completions.len());
        let mut deltas = Deltas::default();
        let mut results: Vec<ResultRow> = Vec::new();
        for c in completions {
            let Some(job) = jobs.get_mut(&c.job_id) else {
                outcomes.push(Err(StoreError::UnknownJob(c.job_id)));
                continue;
            };
            let report = Report {
                worker: &c.worker,
                token: &c.token,
                key: &c.key,
                counter_version: &c.counter_version,
                count: c.count,
                checked_count: c.checked_count,
            };
            let verdict = decide(job, &report, now);
            let count = c.count;
            let mut result = |outcome: &'static str, job: &JobView| {
                results.push(ResultRow {
                    job: c.job_id,
                    run: job.run,
                    attempt: job.attempt,
                    round: job.round,
                    worker: c.worker.clone(),
                    count,
                    elapsed_ms: c.elapsed.as_secs_f64() * 1e3,
                    counter_version: c.counter_version.clone(),
                    outcome,
                })
            };
            let outcome = match verdict {
                Verdict::Cancelled => Err(StoreError::RunCancelled(job.run)),
                Verdict::Stale => Err(StoreError::StaleToken { job: c.job_id }),
                Verdict::Repeat => Ok(CompleteOutcome::AlreadyDone),
                Verdict::Reject { reason, lease_is_current } => {
                    tracing::warn!(job = c.job_id, worker = %c.worker, count = c.count, %reason, "result rejected");
                    deltas.rejections.push(RejectionRow {
                        job: c.job_id,
                        run: job.run,
                        attempt: job.attempt,
                        worker: c.worker.clone(),
                        count: c.count,
                        reason: reason.clone(),
                    });
                    if lease_is_current {
                        // Someone else counts it.
                        job.state = JobState::Pending;
                        job.token = None;
                        job.owner = None;
                        deltas.jobs.insert(c.job_id, (JobState::Pending, None, 0));
                    }
                    Err(StoreError::Rejected { job: c.job_id, reason })
                }
                Verdict::Vote => {
                    result("vote", job);
                    job.votes.push((c.worker.clone(), c.count));
                    job.state = JobState::Pending;
                    job.token = None;
                    job.owner = None;
                    let entry = deltas.jobs.entry(c.job_id).or_insert((JobState::Pending, None, 0));
                    *entry = (JobState::Pending, None, entry.2 + 1);
                    Ok(CompleteOutcome::Recorded)
                }
                Verdict::Accept { outvoted } => {
                    result("accepted", job);
                    for loser in outvoted {
                        let theirs = job.votes.iter().find(|(w, _)| *w == loser).map(|(_, n)| *n).unwrap_or(0);
                        tracing::warn!(job = c.job_id, worker = %loser, reported = theirs, accepted = c.count, "outvoted by the quorum");
                        deltas.rejections.push(RejectionRow {
                            job: c.job_id,
                            run: job.run,
                            attempt: job.attempt,
                            worker: loser,
                            count: theirs,
                            reason: format!("reported {theirs}; a quorum of identities agreed on {}", c.count),
                        });
                    }
                    job.votes.push((c.worker.clone(), c.count));
                    job.state = JobState::Done;
                    job.token = None;
                    job.owner = None;
                    let entry = deltas.jobs.entry(c.job_id).or_insert((JobState::Done, Some(count), 0));
                    *entry = (JobState::Done, Some(count), entry.2 + 1);
                    let class = deltas.classes.entry((job.run, job.class)).or_default();
                    class.0 += count;
                    class.1 += 1;
                    let run = deltas.runs.entry(job.run).or_default();
                    run.done += 1;
                    run.counted += count;
                    let tally = deltas.workers.entry((job.run, c.worker.clone())).or_default();
                    tally.0 += 1;
                    tally.1 += count;
                    Ok(CompleteOutcome::Recorded)
                }
                Verdict::NoQuorum { stored } => {
                    result("conflict", job);
                    tracing::error!(job = c.job_id, votes = ?job.votes, reported = c.count, "no quorum: the job fails with a conflict");
                    job.votes.push((c.worker.clone(), c.count));
                    job.state = JobState::Failed;
                    job.token = None;
                    job.owner = None;
                    deltas.jobs.insert(c.job_id, (JobState::Failed, None, 1));
                    deltas.conflicted.insert(c.job_id);
                    let run = deltas.runs.entry(job.run).or_default();
                    run.conflicts_opened += 1;
                    run.failed_added += 1;
                    Ok(CompleteOutcome::Conflict { stored })
                }
            };
            outcomes.push(outcome);
        }

        self.insert_results(&mut tx, &results, now).await?;
        // Every decided job loses its lease: the token is fenced off. One
        // statement for many jobs (VALUES columns are column1.. on both
        // backends), not one round trip a job.
        let decided: Vec<_> = deltas.jobs.iter().collect();
        let count = |p: &str| self.backend.count(p);
        for chunk in decided.chunks(self.backend.rows_per_statement(500, 4)) {
            let rows = values_rows(chunk.len(), 2, &[&bigint, &text, &count, &bigint]);
            let sql = format!(
                "UPDATE jobs SET state = v.column2, count = COALESCE(v.column3, jobs.count), votes = jobs.votes + v.column4,
                        {RETIRE_LEASE}, updated_at = $1
                 FROM (VALUES {rows}) AS v WHERE jobs.id = v.column1"
            );
            let mut query = sqlx::query(&sql).bind(now);
            for &(&job, &(state, count, votes)) in chunk {
                query = query.bind(job).bind(state.as_str()).bind(count.map(|count| count.to_string())).bind(votes);
            }
            query.execute(&mut *tx).await?;
        }
        for job in &deltas.conflicted {
            sqlx::query("UPDATE jobs SET conflict = 1 WHERE id = $1").bind(*job).execute(&mut *tx).await?;
        }
        if self.backend.sums_in_sql() {
            self.add_to_classes(&mut tx, &deltas.classes).await?;
        } else {
            self.change_classes_exactly(&mut tx, &deltas.classes, Direction::Add).await?;
        }
        for ((run, worker), (jobs, completions)) in &deltas.workers {
            // Postgres adds; SQLite is given the exact new sum.
            let (completions, new_completions) = if self.backend.sums_in_sql() {
                (completions.to_string(), "worker_stats.completions + excluded.completions")
            } else {
                (self.completions_after(&mut tx, *run, worker, completions).await?, "excluded.completions")
            };
            sqlx::query(&format!(
                "INSERT INTO worker_stats (run_id, worker, jobs, completions, last_seen) VALUES ($1, $2, $3, {}, $5)
                 ON CONFLICT (run_id, worker) DO UPDATE SET jobs = worker_stats.jobs + excluded.jobs,
                     completions = {new_completions}, last_seen = excluded.last_seen",
                self.backend.count("$4")
            ))
            .bind(*run)
            .bind(worker.clone())
            .bind(*jobs)
            .bind(completions)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        self.record_rejections(&mut tx, &deltas.rejections, now).await?;
        let mut finished = Vec::new();
        for (&run, delta) in &deltas.runs {
            let (counted, new_counted) = if self.backend.sums_in_sql() {
                (delta.counted.to_string(), format!("counted + {}", self.backend.count("$5")))
            } else {
                (self.counted_after(&mut tx, run, &delta.counted, Direction::Add).await?, self.backend.count("$5"))
            };
            sqlx::query(&format!(
                "UPDATE runs SET jobs_remaining = jobs_remaining - $2, open_conflicts = open_conflicts + $3,
                        failed_jobs = failed_jobs + $4, counted = {new_counted} WHERE id = $1"
            ))
            .bind(run)
            .bind(delta.done)
            .bind(delta.conflicts_opened)
            .bind(delta.failed_added)
            .bind(counted)
            .execute(&mut *tx)
            .await?;
            if delta.done > 0 && self.finish_if_complete(&mut tx, run).await? {
                finished.push(run);
            }
        }
        tx.commit().await?;
        self.finished.lock().expect("never poisoned").extend(finished);
        Ok(outcomes)
    }

    /// Postgres: adds each class's counts and done jobs in NUMERIC: one
    /// statement per chunk of classes, not one a class (a batch of the 9x9
    /// catalogue touches about a hundred). It locks the chunk's rows in (run, class) order first,
    /// as the one-by-one updates did, so batches that share classes cannot
    /// deadlock. (SQLite: [`SqlStore::change_classes_exactly`].)
    async fn add_to_classes(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        classes: &ClassChanges,
    ) -> Result<(), StoreError> {
        let classes: Vec<_> = classes.iter().collect();
        let count = |p: &str| self.backend.count(p);
        for chunk in classes.chunks(self.backend.rows_per_statement(500, 4)) {
            // A join with VALUES is an index probe a row; a row-value
            // IN list of a hundred pairs was planned as a scan (36 ms).
            let pairs = values_rows(chunk.len(), 1, &[&bigint, &bigint]);
            let sql = format!(
                "SELECT 1 FROM classes c JOIN (VALUES {pairs}) AS v ON c.run_id = v.column1 AND c.class_id = v.column2
                 ORDER BY c.run_id, c.class_id FOR UPDATE OF c"
            );
            let mut lock = sqlx::query(&sql);
            for &(&(run, class), _) in chunk {
                lock = lock.bind(run).bind(class);
            }
            lock.fetch_all(&mut **tx).await?;
            let rows = values_rows(chunk.len(), 1, &[&bigint, &bigint, &count, &bigint]);
            let sql = format!(
                "UPDATE classes SET count_sum = classes.count_sum + v.column3, jobs_done = classes.jobs_done + v.column4
                 FROM (VALUES {rows}) AS v WHERE classes.run_id = v.column1 AND classes.class_id = v.column2"
            );
            let mut update = sqlx::query(&sql);
            for &(&(run, class), (count, jobs_done)) in chunk {
                update = update.bind(run).bind(class).bind(count.to_string()).bind(*jobs_done);
            }
            update.execute(&mut **tx).await?;
        }
        Ok(())
    }

    async fn insert_results(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        results: &[ResultRow],
        now: i64,
    ) -> Result<(), StoreError> {
        const COLUMNS: usize = 9;
        for chunk in results.chunks(self.backend.rows_per_statement(300, COLUMNS)) {
            let rows: Vec<String> = (0..chunk.len())
                .map(|i| {
                    let p = i * COLUMNS + 2;
                    let params: Vec<String> = (p..p + COLUMNS)
                        .map(|n| if n == p + 5 { self.backend.count(&format!("${n}")) } else { format!("${n}") })
                        .collect();
                    format!("({}, $1)", params.join(", "))
                })
                .collect();
            let sql = format!(
                "INSERT INTO results (job_id, run_id, attempt, round, worker, count, elapsed_ms, counter_version, outcome, finished_at)
                 VALUES {}",
                rows.join(", ")
            );
            let mut query = sqlx::query(&sql).bind(now);
            for r in chunk {
                query = query
                    .bind(r.job)
                    .bind(r.run)
                    .bind(r.attempt)
                    .bind(r.round)
                    .bind(r.worker.clone())
                    .bind(r.count.to_string())
                    .bind(r.elapsed_ms)
                    .bind(r.counter_version.clone())
                    .bind(r.outcome);
            }
            query.execute(&mut **tx).await?;
        }
        Ok(())
    }

    /// Appends rejections and quarantines every identity that reached the
    /// limit: its leases are released at once and its results counted again.
    pub(super) async fn record_rejections(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        rejections: &[RejectionRow],
        now: i64,
    ) -> Result<(), StoreError> {
        let insert = format!(
            "INSERT INTO rejections (job_id, run_id, attempt, worker, count, reason, rejected_at)
             VALUES ($1, $2, $3, $4, {}, $6, $7)",
            self.backend.big_number("$5")
        );
        for r in rejections {
            sqlx::query(&insert)
                .bind(r.job)
                .bind(r.run)
                .bind(r.attempt)
                .bind(r.worker.clone())
                .bind(r.count.to_string())
                .bind(r.reason.clone())
                .bind(now)
                .execute(&mut **tx)
                .await?;
        }
        let workers: BTreeSet<&str> = rejections.iter().map(|r| r.worker.as_str()).collect();
        for worker in workers {
            let rejected: i64 = sqlx::query("SELECT COUNT(*) FROM rejections WHERE worker = $1")
                .bind(worker)
                .fetch_one(&mut **tx)
                .await?
                .try_get(0)?;
            if rejected < i64::from(self.config.quarantine_after) {
                continue;
            }
            self.quarantine_in(tx, worker, &format!("{rejected} results rejected"), now).await?;
        }
        Ok(())
    }
}

/// The rows of a `VALUES` list: `rows` tuples of `columns`, each column an
/// expression around its parameter, numbered from `$first` row by row. (The
/// casts give both backends the column types; VALUES columns are column1,
/// column2, ... on both.)
fn values_rows(rows: usize, first: usize, columns: &[&dyn Fn(&str) -> String]) -> String {
    let row = |i: usize| {
        let cells: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(j, column)| column(&format!("${}", first + i * columns.len() + j)))
            .collect();
        format!("({})", cells.join(", "))
    };
    (0..rows).map(row).collect::<Vec<_>>().join(", ")
}

fn bigint(parameter: &str) -> String {
    format!("CAST({parameter} AS BIGINT)")
}

fn text(parameter: &str) -> String {
    format!("CAST({parameter} AS TEXT)")
}

//! Runs: creating one with its classes and jobs (what a run may hold, how
//! its classes are numbered), listing them, cancelling.

use std::collections::HashMap;
use std::sync::Arc;

use super::{RunFacts, Store, now_ms, read_census};
use crate::backend::{HeldBy, Inserted, NewClass, NewJob, NewRun, StorageBackend};
use crate::{JobSpec, JobStream, MAX_KEY_LEN, MAX_REDUNDANCY, RunId, RunSpec, RunSummary, StoreError};

/// How many jobs creating a run reads and stores at a time: what it holds
/// in memory besides one entry a class.
const JOBS_PER_CHUNK: usize = 10_000;

/// A class while its run is created.
struct ClassEntry {
    /// Its number in the run, in order of first appearance.
    id: usize,
    weight: u128,
    /// Its jobs so far.
    jobs: i64,
    /// The job count its row was stored with.
    stored_jobs: i64,
}

/// Refuses a spec the store cannot hold faithfully.
fn check_new_spec(spec: &RunSpec) -> Result<(), StoreError> {
    if spec.redundancy == 0 || spec.redundancy > MAX_REDUNDANCY {
        return Err(StoreError::Invalid(format!(
            "the redundancy factor must be 1 to {MAX_REDUNDANCY}, not {}",
            spec.redundancy
        )));
    }
    for (what, text) in [("census", &spec.census.to_string()), ("counter version", &spec.counter_version)] {
        if text.is_empty() || text.len() > MAX_KEY_LEN {
            return Err(StoreError::Invalid(format!("a {what} has 1 to {MAX_KEY_LEN} characters")));
        }
    }
    Ok(())
}

/// Refuses a job the store cannot hold faithfully.
fn check_new_job(job: &JobSpec) -> Result<(), StoreError> {
    for (what, text) in [("job key", &job.key), ("class label", &job.group)] {
        if text.is_empty() || text.len() > MAX_KEY_LEN {
            return Err(StoreError::Invalid(format!("{what} {text:?}: 1 to {MAX_KEY_LEN} characters")));
        }
    }
    Ok(())
}

/// A chunk's new classes (number, label, weight) and jobs.
type ChunkRows<'c> = (Vec<(usize, &'c str, u128)>, Vec<NewJob<'c>>);

/// A chunk of a new run's jobs as rows: the classes it brings (numbered
/// in order of first appearance, each added to `classes`) and its jobs,
/// whose costs are added to `cost_total`. A key given twice within the
/// chunk, or a class given two weights, is refused by name.
fn chunk_rows<'c>(
    spec: &RunSpec,
    chunk: &'c [JobSpec],
    classes: &mut HashMap<String, ClassEntry>,
    cost_total: &mut i64,
) -> Result<ChunkRows<'c>, StoreError> {
    // Each job's stage is kept where there is more than one, for the
    // lease's stage rule (`stages.rs`).
    let staged = spec.census.stage_count() > 1;
    let stage_of = |job: &JobSpec| -> Result<Option<u32>, StoreError> {
        if !staged {
            return Ok(None);
        }
        spec.census.stage(&job.key).map(Some).map_err(|e| StoreError::Invalid(format!("job {:?}: {e}", job.key)))
    };
    // Each job's expected cost, for progress by cost (`totals.rs`).
    let cost_of = |job: &JobSpec| -> Result<i64, StoreError> {
        let cost =
            spec.census.job_cost(&job.key).map_err(|e| StoreError::Invalid(format!("job {:?}: {e}", job.key)))?;
        i64::try_from(cost.max(1))
            .map_err(|_| StoreError::Invalid(format!("job {:?}: a cost of {cost} passes 2^63", job.key)))
    };
    let mut keys = std::collections::HashSet::with_capacity(chunk.len());
    let mut new_classes: Vec<(usize, &str, u128)> = Vec::new();
    let mut new_jobs: Vec<NewJob<'_>> = Vec::with_capacity(chunk.len());
    for job in chunk {
        check_new_job(job)?;
        if !keys.insert(job.key.as_str()) {
            return Err(StoreError::Invalid(format!("job {:?} is given twice", job.key)));
        }
        let next = classes.len();
        let class = classes.entry(job.group.clone()).or_insert_with(|| {
            new_classes.push((next, &job.group, job.weight));
            ClassEntry { id: next, weight: job.weight, jobs: 0, stored_jobs: 0 }
        });
        if class.weight != job.weight {
            return Err(StoreError::Invalid(format!("class {:?} is given two weights", job.group)));
        }
        class.jobs += 1;
        let cost = cost_of(job)?;
        *cost_total = cost_total
            .checked_add(cost)
            .ok_or_else(|| StoreError::Invalid("the run's jobs' costs add up past 2^63".into()))?;
        new_jobs.push(NewJob { class: class.id as i64, key: &job.key, stage: stage_of(job)?, cost });
    }
    Ok((new_classes, new_jobs))
}

impl<B: StorageBackend> Store<B> {
    pub(super) async fn run_facts(&self, run: RunId) -> Result<Arc<RunFacts>, StoreError> {
        self.run_facts_in(None, run).await
    }

    /// [`Store::run_facts`], read in `tx` if they are not known yet: a
    /// transaction that holds a backend's one connection (SQLite's) cannot
    /// wait for another.
    pub(super) async fn run_facts_in(&self, tx: Option<&mut B::Tx>, run: RunId) -> Result<Arc<RunFacts>, StoreError> {
        if let Some(facts) = self.runs.lock().expect("the run cache is never poisoned").get(&run) {
            return Ok(facts.clone());
        }
        let outline = self.backend.run_outline(tx, run).await?.ok_or(StoreError::UnknownRun(run))?;
        let census = read_census(run, &outline.census)?;
        let facts = Arc::new(RunFacts { census, classes: outline.classes, stages: census.stage_count() });
        self.runs.lock().expect("the run cache is never poisoned").insert(run, facts.clone());
        Ok(facts)
    }

    /// Every run, or only `run`, as listed.
    pub(super) async fn summaries(&self, run: Option<RunId>) -> Result<Vec<RunSummary>, StoreError> {
        let rows = self.backend.runs(run).await?;
        let mut runs = Vec::with_capacity(rows.len());
        for row in rows {
            runs.push(RunSummary {
                run_id: row.id,
                spec: RunSpec {
                    census: read_census(row.id, &row.census)?,
                    counter_version: row.counter_version,
                    redundancy: row.redundancy,
                },
                classes: self.run_facts(row.id).await?.classes,
                jobs_total: row.jobs_total as u64,
                jobs_done: (row.jobs_total - row.jobs_remaining) as u64,
                is_final: row.finished_at.is_some() && row.open_conflicts == 0,
                priority: row.priority,
                cancelled: row.cancelled_at.is_some(),
            });
        }
        Ok(runs)
    }

    /// Creates the run from its jobs as they come, [`JOBS_PER_CHUNK`] at a
    /// time, in one transaction: what is held is one chunk and one entry a
    /// class (its number, weight and job count), never the job list. A key
    /// given twice within a chunk is named here; across chunks the
    /// backend's unique key on (run, key) refuses it.
    pub(super) async fn insert_run(&self, spec: &RunSpec, jobs: JobStream) -> Result<RunId, StoreError> {
        check_new_spec(spec)?;
        if let Some(run) = self.backend.find_run(spec).await? {
            if self.backend.resume_run(run).await? {
                tracing::warn!(run, "a cancelled run was submitted again: it resumes");
            }
            return Ok(run);
        }
        let mut jobs = jobs.peekable();
        if jobs.peek().is_none() {
            return Err(StoreError::Invalid("a run needs at least one job".into()));
        }
        let now = now_ms();
        let mut tx = self.backend.begin().await?;
        // Classes numbered in order of first appearance. A class is stored
        // with the jobs of the chunk it first appears in; one whose jobs
        // reach later chunks has its job count set at the end.
        let mut classes: HashMap<String, ClassEntry> = HashMap::new();
        let mut total: u64 = 0;
        let mut cost_total: i64 = 0;
        let mut created: Option<RunId> = None;
        loop {
            let chunk: Vec<JobSpec> = jobs.by_ref().take(JOBS_PER_CHUNK).collect();
            if chunk.is_empty() {
                break;
            }
            let (new_classes, new_jobs) = chunk_rows(spec, &chunk, &mut classes, &mut cost_total)?;
            // The run's row, once its first chunk is known to be sound.
            let run = match created {
                Some(run) => run,
                None => {
                    // The job count is written when the last chunk is in.
                    let row = NewRun {
                        spec,
                        created_at: now,
                        class_power: spec.census.class_power(),
                        max_lease_ms: spec.census.longest_lease().map(|own| own.as_millis() as i64),
                    };
                    match self.backend.insert_run(&mut tx, &row).await? {
                        Inserted::New(run) => *created.insert(run),
                        // Another coordinator created the same run first: use it.
                        Inserted::Duplicate(detail) => {
                            self.backend.rollback(tx).await?;
                            return self.backend.find_run(spec).await?.ok_or_else(|| {
                                StoreError::Internal(format!("the run exists and cannot be found: {detail}"))
                            });
                        }
                    }
                }
            };
            let rows: Vec<NewClass<'_>> = new_classes
                .iter()
                .map(|&(id, label, weight)| {
                    let class = classes.get_mut(label).expect("every new class is listed");
                    class.stored_jobs = class.jobs;
                    NewClass { id: id as i64, label, weight, jobs_total: class.jobs }
                })
                .collect();
            self.backend.insert_classes(&mut tx, run, &rows).await?;
            if let Inserted::Duplicate(detail) = self.backend.insert_jobs(&mut tx, run, &new_jobs, now).await? {
                return Err(StoreError::Invalid(format!(
                    "a job key is given twice (in different chunks of {JOBS_PER_CHUNK}): {detail}"
                )));
            }
            total += chunk.len() as u64;
        }
        let run = created.expect("a run has at least one chunk");
        let spread: Vec<(i64, i64)> = classes
            .values()
            .filter(|class| class.jobs != class.stored_jobs)
            .map(|class| (class.id as i64, class.jobs))
            .collect();
        self.backend.set_class_jobs_total(&mut tx, run, &spread).await?;
        self.backend.set_run_jobs_total(&mut tx, run, total as i64, cost_total).await?;
        self.backend.commit(tx).await?;
        self.backend.refresh_statistics().await?;
        tracing::info!(run, census = %spec.census, classes = classes.len(), jobs = total, "run created");
        Ok(run)
    }

    pub(super) async fn cancel(&self, run: RunId) -> Result<(), StoreError> {
        self.ensure_run(run).await?;
        let now = now_ms();
        let mut tx = self.backend.begin().await?;
        self.backend.mark_cancelled(&mut tx, run, now).await?;
        self.backend.release_leases(&mut tx, HeldBy::Run(run), now).await?;
        self.backend.commit(tx).await?;
        tracing::warn!(run, "run cancelled");
        Ok(())
    }
}

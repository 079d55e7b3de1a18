//! The queue's rules: who may lease (not a quarantined identity, not past
//! its lease cap), how long a lease lives (the run's own lifetime or the
//! coordinator's, whichever is longer), which runs go first, which jobs of
//! a run of stages may be leased (its open stage: `stages.rs`), where the
//! scan of a run's pending jobs starts (`fronts.rs`), and whether anything
//! is left for an identity.

use std::time::{Duration, Instant};

use super::stages::Leasable;
use super::{Store, now_ms, shares};
use crate::backend::{ExtendLeases, JobState, LeaseJobs, LeasedJob, OpenRun, OpenTo, StorageBackend, Waiting};
use crate::{HeartbeatOutcome, JobId, Lease, RunId, StoreError};

/// A lease token prefix, random for every lease call; the job id and
/// attempt number complete it, so two attempts never share a token.
fn token_salt() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The job a lease token of the form the store issues names, if it is of
/// that form.
///
/// ```text
/// 0123456789abcdef0123456789abcdef-42-1  ->  Some(42)
/// made-up                                ->  None
/// ```
fn job_of_token(token: &str) -> Option<JobId> {
    let mut parts = token.rsplitn(3, '-');
    let (_attempt, id, _salt) = (parts.next()?, parts.next()?, parts.next()?);
    id.parse().ok()
}

/// One lease call: who asks, when, for how long, its tokens' salt, and the
/// leases its identity held before it (as its trigger counts them).
struct LeaseCall<'a> {
    worker: &'a str,
    now: i64,
    ttl: Duration,
    salt: String,
    holds: i64,
}

impl<B: StorageBackend> Store<B> {
    /// The longest a lease of a run lives, heartbeated: the coordinator's
    /// limit, or the run's own (its census's `Census::longest_lease`,
    /// recorded when it was created) where that is longer. So an operator
    /// who raises `--max-lease-lifetime` raises it for every run.
    fn run_lease_lifetime(&self, max_lease_ms: Option<i64>) -> Duration {
        let own = Duration::from_millis(max_lease_ms.unwrap_or(0).max(0) as u64);
        own.max(self.config.max_lease_lifetime)
    }

    /// An identity votes once per job and round, and is not handed a job it
    /// failed `max_attempts` times since the job was last requeued.
    fn max_failures(&self) -> u32 {
        self.config.max_attempts.max(1)
    }

    pub(super) async fn lease_jobs(
        &self,
        run: Option<RunId>,
        worker: &str,
        max: u32,
        ttl: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        crate::check_identity(worker)?;
        if max == 0 {
            return Ok(Vec::new());
        }
        if let Some(run) = run {
            self.run_facts(run).await?;
        }
        let now = now_ms();
        // Counting the identity's leases and adding to them is one step
        // under its lock: concurrent calls of one identity cannot each see
        // room under the cap.
        let mut tx = self.backend.begin().await?;
        self.lock_identities(&mut tx, [worker]).await?;
        if self.backend.is_quarantined(Some(&mut tx), worker).await? {
            return Ok(Vec::new());
        }
        // The trigger's count includes expired leases not yet taken over,
        // so it can only overstate what the identity holds: while it leaves
        // room for `max`, so does the exact count, which reads an index
        // entry for every job the identity leased within the last TTL
        // (migration `owner_leases`). Only a worker near its cap pays it.
        let cap = i64::from(self.config.max_leases_per_worker);
        let max = i64::from(max);
        let counted = self.backend.leases_counted(&mut tx, worker).await?;
        let max = if counted + max <= cap {
            max
        } else {
            max.min(cap - self.backend.held_leases(&mut tx, worker, None, now).await?)
        };
        if max <= 0 {
            return Ok(Vec::new());
        }
        let call = LeaseCall { worker, now, ttl, salt: token_salt(), holds: counted };
        // Runs in priority order.
        let mut leased = Vec::new();
        for open in self.backend.open_runs(Some(&mut tx), run).await? {
            let wanted = max - leased.len() as i64;
            if wanted <= 0 {
                break;
            }
            let held = call.holds + leased.len() as i64;
            leased.extend(self.lease_from_run(&mut tx, &open, &call, wanted, held).await?);
        }
        self.backend.commit(tx).await?;
        self.shares.granted(worker, leased.len() as u64, Instant::now());
        let mut leases = Vec::with_capacity(leased.len());
        for job in leased {
            leases.push(Lease {
                job_id: job.id,
                run_id: job.run,
                census: self.run_facts(job.run).await?.census,
                key: job.key,
                attempt: job.attempt,
                token: job.token,
            });
        }
        leases.sort_by_key(|lease| lease.job_id);
        Ok(leases)
    }

    /// Leases up to `wanted` jobs of one open run for `call`, whose
    /// identity `holds` leases now (as its trigger counts them): expired
    /// leases first (few), then pending jobs in id order, of the open stage
    /// in a run of stages. While another identity waits for the run, no
    /// more than the identity's allowance, and none of its own leases that
    /// expired within the TTL (`shares.rs`).
    async fn lease_from_run(
        &self,
        tx: &mut B::Tx,
        open: &OpenRun,
        call: &LeaseCall<'_>,
        wanted: i64,
        holds: i64,
    ) -> Result<Vec<LeasedJob>, StoreError> {
        let stage = match self.leasable(Some(tx), open.id).await? {
            Leasable::Any => None,
            Leasable::Stage(stage) => Some(stage),
            Leasable::Nothing => return Ok(Vec::new()),
        };
        let ttl = call.ttl.min(self.run_lease_lifetime(open.max_lease_ms));
        let others = self.shares.others_waiting(open.id, call.worker, Instant::now());
        let (wanted, own_expired_by) = if others > 0 {
            let room = self.room_in_run(tx, open.id, call.worker, others, holds).await?;
            (wanted.min(room), Some(call.now - ttl.as_millis() as i64))
        } else {
            (wanted, None)
        };
        // Expired leases (when a look is due: `fronts.rs`), then pending
        // jobs from the run's front, whose next `wanted` jobs this lease
        // claims, so that concurrent leases scan past each other's locked
        // rows no more than they must. A scan from the front that comes up
        // short does not go on from the first pending job: near a run's end
        // every lease comes up short, and each such scan walked every entry
        // the run's leases left in the index since the last vacuum
        // (BENCHMARKS.md, "A run's end"). A job below the front is found by
        // the next full scan (`fronts.rs`).
        let mut leased = Vec::new();
        for waiting in [Waiting::Expired, Waiting::Pending] {
            let left = wanted - leased.len() as i64;
            if left <= 0 {
                break;
            }
            let from = match waiting {
                Waiting::Expired if !self.fronts.expired_look(open.id, call.worker, Instant::now(), call.now) => {
                    continue;
                }
                Waiting::Expired => None,
                Waiting::Pending => self.fronts.claim(open.id, stage, left, Instant::now()),
            };
            let lease = LeaseJobs {
                run: open.id,
                waiting,
                wanted: left,
                worker: call.worker,
                now: call.now,
                expires_at: call.now + ttl.as_millis() as i64,
                token_salt: &call.salt,
                max_failures: self.max_failures(),
                stage,
                from: from.unwrap_or(0),
                own_expired_by,
            };
            let jobs = self.backend.lease_jobs(tx, &lease).await?;
            self.scanned(tx, &lease, from, &jobs).await?;
            if !jobs.is_empty() {
                self.fronts.granted(open.id, lease.expires_at);
            }
            leased.extend(jobs);
        }
        Ok(leased)
    }

    /// How many more of `run`'s jobs `worker`, which `holds` leases, may
    /// be handed while `others` identities wait for them: its allowance
    /// (`shares.rs`) less what it holds.
    async fn room_in_run(
        &self,
        tx: &mut B::Tx,
        run: RunId,
        worker: &str,
        others: usize,
        holds: i64,
    ) -> Result<i64, StoreError> {
        // Cached: `leasable` has just read the run's facts.
        let together = self.run_facts(run).await?.census.jobs_counted_together();
        let floor = shares::FLOOR.max(u64::from(together));
        let open = self.backend.run_state(Some(tx), run).await?.map_or(0, |state| state.jobs_remaining.max(0) as u64);
        let allowance = self.shares.allowance(run, worker, floor, open, others, Instant::now());
        Ok(i64::try_from(allowance).unwrap_or(i64::MAX).saturating_sub(holds))
    }

    /// What a scan of `lease` that started `from` and leased `jobs` tells
    /// the fronts.
    async fn scanned(
        &self,
        tx: &mut B::Tx,
        lease: &LeaseJobs<'_>,
        from: Option<JobId>,
        jobs: &[LeasedJob],
    ) -> Result<(), StoreError> {
        let run = lease.run;
        match lease.waiting {
            Waiting::Expired if jobs.len() as i64 >= lease.wanted => self.fronts.more_expired(run),
            // Short: what is left may be open to other identities only (this
            // one voted on it, or failed it, or must leave it to others a
            // while), and they must not wait for the next look, which this
            // identity may take again (a job a fast worker voted on would
            // then wait for ever for a slow one).
            Waiting::Expired => {
                let left = self.backend.has_expired_leases(tx, run, lease.now).await?;
                self.fronts.looked_short(run, lease.worker, left);
            }
            Waiting::Pending => {
                self.fronts.scanned(run, lease.stage, from, jobs.iter().map(|job| job.id), Instant::now());
                // A scan from the first pending job is the one way to a job
                // put back that the fronts do not know of (after a requeue,
                // a restart, another coordinator): if it passed one (its
                // identity voted on it or failed it), the next leases start
                // there, or the identity that takes the next full scan may
                // pass it again, and again (found by the state-machine
                // proptest).
                if from.is_none() {
                    let below = jobs.iter().map(|job| job.id).max().unwrap_or(JobId::MAX);
                    if let Some(passed) = self.backend.first_pending_below(tx, run, lease.stage, below).await? {
                        self.fronts.put_back(run, passed, Instant::now());
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) async fn work_left_for(&self, worker: &str, run: Option<RunId>) -> Result<bool, StoreError> {
        if self.backend.is_quarantined(None, worker).await? {
            return Ok(false);
        }
        // A run of stages whose open stage holds only failed jobs has
        // nothing for anyone until an operator acts. Otherwise a job of a
        // later stage is work to come: it is handed out once the stage
        // below is done (by other identities, perhaps).
        let mut runs = Vec::new();
        for open in self.backend.open_runs(None, run).await? {
            if !self.stage_blocked(open.id).await? {
                runs.push(open);
            }
        }
        for state in [JobState::Pending, JobState::Leased] {
            for open in &runs {
                let open = OpenTo { run: open.id, state, worker, max_failures: self.max_failures() };
                if self.backend.has_job_open_to(&open).await? {
                    // Asked after a lease that handed it nothing: it waits
                    // for this run's jobs, which others hold (`shares.rs`).
                    self.shares.waits(open.run, worker, Instant::now());
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The runs another identity waits for in which `worker` holds more
    /// leases at `now` than it may be expected to count: the most of the
    /// least allowance (or the jobs its census counts together) and twice
    /// its results recorded there lately (`shares.rs`). Its leases of these
    /// runs live one TTL at most; of the others, while heartbeated, however
    /// long a job takes: else two identities that each count a run's open
    /// jobs more slowly than one TTL (a quorum of two on a loaded machine)
    /// would take them from each other for ever, and nothing be stored.
    async fn capped_runs(&self, worker: &str, now: i64) -> Result<Vec<RunId>, StoreError> {
        let contended = self.shares.runs_others_wait_for(worker, Instant::now());
        if contended.is_empty() {
            return Ok(contended);
        }
        let mut tx = self.backend.begin().await?;
        let mut capped = Vec::new();
        for run in contended {
            let together = self.run_facts(run).await?.census.jobs_counted_together();
            let floor = shares::FLOOR.max(u64::from(together));
            // No open jobs, nobody else: the allowance without its equal share.
            let expected = self.shares.allowance(run, worker, floor, 0, 0, Instant::now());
            let held = self.backend.held_leases(&mut tx, worker, Some(run), now).await?;
            if u64::try_from(held).unwrap_or(0) > expected {
                capped.push(run);
            }
        }
        self.backend.commit(tx).await?;
        Ok(capped)
    }

    pub(super) async fn extend_leases(
        &self,
        worker: &str,
        tokens: &[String],
        ttl: Duration,
    ) -> Result<HeartbeatOutcome, StoreError> {
        let now = now_ms();
        // A token that names no job was never a lease: lost, not looked for.
        let leases: Vec<(JobId, &str)> =
            tokens.iter().filter_map(|token| Some((job_of_token(token)?, token.as_str()))).collect();
        // Where another identity waits, a lease of an identity that holds
        // more than it may be expected to count lives one TTL at most
        // (`shares.rs`).
        let contended = self.capped_runs(worker, now).await?;
        let extend = ExtendLeases {
            worker,
            leases: &leases,
            now,
            expires_at: now + ttl.as_millis() as i64,
            max_lifetime_ms: self.config.max_lease_lifetime.as_millis() as i64,
            contended: &contended,
            contended_lifetime_ms: ttl.as_millis() as i64,
        };
        let extended = self.backend.extend_leases(&extend).await?;
        let mut outcome = HeartbeatOutcome::default();
        for token in tokens {
            if extended.contains(token) {
                outcome.extended.push(token.clone());
            } else {
                outcome.lost.push(token.clone());
            }
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_job() {
        let salt = token_salt();
        assert_eq!(job_of_token(&format!("{salt}-42-1")), Some(42));
        assert_eq!(job_of_token(&format!("{salt}-7-12")), Some(7));
        for made_up in ["", "42", "42-1", "salt-x-1", "-1"] {
            assert_eq!(job_of_token(made_up), None, "{made_up:?}");
        }
    }
}

//! Deciding conflicts: a job whose identities disagree, where no quorum
//! forms with the identities there are (two identities, one of them wrong,
//! wait for a third for ever), is counted by the coordinator itself once
//! it has waited [`crate::CoordinatorConfig::conflict_wait`], unchanged and
//! with nobody counting it, and the coordinator's count decides
//! (`JobStore::decide_conflict`: the job is accepted with it, every vote of
//! another count is rejected against its identity). BOINC sends a result
//! that reaches no quorum to more hosts, a bounded number of them, and then
//! gives up on it; here the server has a counter of its own, so it counts.
//!
//! The look is cheap (an index of the jobs in conflict, migration 0016);
//! the counting takes the checking permits, as a recount of a result does.

use std::sync::Arc;
use std::time::Duration;

use census_store::ConflictWaiting;

use crate::Coordinator;

/// The most conflicts one look takes on.
const CONFLICTS_A_LOOK: u32 = 64;

impl Coordinator {
    /// Looks for conflicts that have waited their time, a few times a wait,
    /// and decides each by the coordinator's own count, until the process ends.
    pub(crate) async fn decide_conflicts(self: Arc<Self>) {
        let wait = self.config.conflict_wait;
        let every = (wait / 4).clamp(Duration::from_millis(100), Duration::from_secs(60));
        loop {
            tokio::time::sleep(every).await;
            match self.store.conflicts_waiting(wait, CONFLICTS_A_LOOK).await {
                Ok(waiting) => {
                    for conflict in waiting {
                        self.decide_conflict(conflict).await;
                    }
                }
                Err(error) => tracing::debug!(error = %error.report(), "cannot look for conflicts now"),
            }
        }
    }

    /// Counts the job of `conflict` with its census's checking counter,
    /// under the checking permits, and lets the count decide.
    async fn decide_conflict(self: &Arc<Self>, conflict: ConflictWaiting) {
        let ConflictWaiting { job_id, run_id, census, key } = conflict;
        tracing::warn!(
            job = job_id,
            run = run_id,
            waited = ?self.config.conflict_wait,
            "no quorum formed on a job whose identities disagree: the coordinator counts it itself"
        );
        let count = match self.count_itself(census, key).await {
            Ok(count) => count,
            Err(reason) => {
                tracing::error!(job = job_id, run = run_id, %reason, "the coordinator cannot count the job in conflict");
                return;
            }
        };
        match self.store.decide_conflict(job_id, count).await {
            // The store says it, with the votes it rejected.
            Ok(true) => self.announce_finished_runs().await,
            Ok(false) => tracing::info!(job = job_id, "the conflict was settled meanwhile"),
            Err(error) => {
                tracing::error!(job = job_id, error = %error.report(), "the conflict could not be decided now")
            }
        }
    }
}

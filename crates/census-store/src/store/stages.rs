//! Stages: a run whose census has more than one stage (`Census::stage_count`,
//! the layers census) leases only the jobs of its open stage, the lowest
//! that holds a job not done, because a job reads what the jobs of the
//! stage before it accepted; and what a stage accepted is read back for the
//! next. A run of one stage (every other kind) is leased as before, with no
//! query of its stages.

use super::Store;
use crate::backend::{AcceptedPage, LowestStages, StorageBackend};
use crate::{AcceptedCount, JobId, RunId, StoreError};

/// Which jobs of a run may be leased now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leasable {
    /// Any: the run has one stage.
    Any,
    /// Only those of this stage, the lowest that holds a job not done.
    Stage(u32),
    /// None: every job is done.
    Nothing,
}

/// The open stage: the lowest that holds a job not done (pending, leased,
/// or failed: a failed job, or one with an open conflict, holds the stages
/// after it until a requeue or a recount settles it).
fn open_stage(lowest: LowestStages) -> Option<u32> {
    [lowest.pending, lowest.leased, lowest.failed].into_iter().flatten().min()
}

/// Whether the open stage holds only failed jobs, so that nothing of the
/// run can be handed to anyone until an operator acts.
fn waits_for_an_operator(lowest: LowestStages) -> bool {
    let waiting = [lowest.pending, lowest.leased].into_iter().flatten().min();
    lowest.failed.is_some_and(|failed| waiting.is_none_or(|waiting| failed < waiting))
}

impl<B: StorageBackend> Store<B> {
    /// Which jobs of `run` may be leased now ([`open_stage`]), read in
    /// `tx` (a lease's transaction) or on its own.
    pub(super) async fn leasable(&self, mut tx: Option<&mut B::Tx>, run: RunId) -> Result<Leasable, StoreError> {
        if self.run_facts_in(tx.as_deref_mut(), run).await?.stages <= 1 {
            return Ok(Leasable::Any);
        }
        Ok(match open_stage(self.backend.lowest_stages(tx, run).await?) {
            Some(stage) => Leasable::Stage(stage),
            None => Leasable::Nothing,
        })
    }

    /// Whether a run of stages waits for an operator: its open stage holds
    /// no job that can be leased (every job of it not done has failed), so
    /// nothing of the run can be handed to anyone until a requeue or a
    /// recount. False for a run of one stage. (One read of the lowest
    /// stages: two would see a stage finish between them and call the
    /// next one blocked.)
    pub(super) async fn stage_blocked(&self, run: RunId) -> Result<bool, StoreError> {
        if self.run_facts(run).await?.stages <= 1 {
            return Ok(false);
        }
        Ok(waits_for_an_operator(self.backend.lowest_stages(None, run).await?))
    }

    pub(super) async fn read_accepted_counts(
        &self,
        run: RunId,
        stage: u32,
        after: JobId,
        limit: u32,
    ) -> Result<Vec<AcceptedCount>, StoreError> {
        let stages = self.run_facts(run).await?.stages;
        if stage >= stages {
            return Err(StoreError::Invalid(format!("run {run} has stages 0 to {}, not {stage}", stages - 1)));
        }
        let page = AcceptedPage { run, stage: (stages > 1).then_some(stage), after, limit: i64::from(limit) };
        self.backend.accepted_counts(&page).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lowest(pending: Option<u32>, leased: Option<u32>, failed: Option<u32>) -> LowestStages {
        LowestStages { pending, leased, failed }
    }

    #[test]
    fn the_open_stage_is_the_lowest_holding_a_job_not_done() {
        assert_eq!(open_stage(lowest(Some(3), Some(2), None)), Some(2));
        assert_eq!(open_stage(lowest(Some(3), None, Some(1))), Some(1));
        assert_eq!(open_stage(lowest(None, None, None)), None, "every job is done");
    }

    /// A stage finishing while its jobs are read does not make the next one
    /// look blocked: only failed jobs below every pending or leased one do.
    #[test]
    fn only_failed_jobs_below_every_other_wait_for_an_operator() {
        assert!(!waits_for_an_operator(lowest(Some(6), Some(5), None)));
        assert!(!waits_for_an_operator(lowest(Some(6), None, None)), "stage 5 just finished");
        assert!(!waits_for_an_operator(lowest(Some(5), Some(5), Some(5))), "the stage goes on beside it");
        assert!(waits_for_an_operator(lowest(Some(6), None, Some(5))));
        assert!(waits_for_an_operator(lowest(None, None, Some(8))), "the last stage failed");
        assert!(!waits_for_an_operator(lowest(None, None, None)));
    }
}

//! Stages: a run whose census has more than one stage (`Census::stage_count`,
//! the layers census) leases only the jobs of its open stage, the lowest
//! that holds a job not done, because a job reads what the jobs of the
//! stage before it accepted; and what a stage accepted is read back for the
//! next. A run of one stage (every other kind) is leased as before, with no
//! query of its stages.

use super::Store;
use crate::backend::{AcceptedPage, JobState, StorageBackend};
use crate::{AcceptedCount, JobId, RunId, StoreError};

/// The states of a job that is not done: while one of a stage is, no job
/// of a later stage may be leased (a failed job, or one with an open
/// conflict, holds them until a requeue or a recount settles it).
const NOT_DONE: [JobState; 3] = [JobState::Pending, JobState::Leased, JobState::Failed];

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

impl<B: StorageBackend> Store<B> {
    /// Which jobs of `run` may be leased now, read in `tx` (a lease's
    /// transaction) or on its own.
    pub(super) async fn leasable(&self, tx: Option<&mut B::Tx>, run: RunId) -> Result<Leasable, StoreError> {
        if self.run_facts(run).await?.stages <= 1 {
            return Ok(Leasable::Any);
        }
        Ok(match self.backend.lowest_stage(tx, run, &NOT_DONE).await? {
            Some(stage) => Leasable::Stage(stage),
            None => Leasable::Nothing,
        })
    }

    /// Whether a run of stages waits for an operator: its open stage holds
    /// no job that can be leased (every job of it not done has failed), so
    /// nothing of the run can be handed to anyone until a requeue or a
    /// recount. False for a run of one stage.
    pub(super) async fn stage_blocked(&self, run: RunId) -> Result<bool, StoreError> {
        let Leasable::Stage(open) = self.leasable(None, run).await? else { return Ok(false) };
        let waiting = self.backend.lowest_stage(None, run, &[JobState::Pending, JobState::Leased]).await?;
        Ok(waiting != Some(open))
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

-- Bounded identities (issue 26): failures are counted per identity and per
-- job, and a quarantined identity's results are found without a scan.
--
-- A job's failures belong to an epoch that a requeue or a new round ends:
-- the identities that failed the job in the current epoch are the ones
-- counted towards failing it for good, and an identity that failed it
-- max_attempts times is not handed it again in that epoch.
ALTER TABLE jobs ADD COLUMN failure_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE failures ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
CREATE INDEX failures_job_worker ON failures (job_id, worker);
CREATE INDEX failures_worker ON failures (worker);
-- Quarantining an identity reopens every job whose current result it gave.
CREATE INDEX results_worker ON results (worker);

-- A lease and a completion each rewrite a job's state, owner and token, so
-- every index holding one of those is rewritten twice a job. Keep only the
-- ones a query walks: leases take jobs_run_queue (run, state, id);
-- heartbeats find a worker's leases through jobs_lease_owner and compare
-- their tokens there. Nothing reads jobs by (state, id) without the run, or
-- by token alone.
DROP INDEX jobs_queue;
DROP INDEX jobs_lease_token;

-- A result's job already references its run (through its class), so the
-- results' own reference to the run only made every inserted result take a
-- key-share lock on the run's row, which two concurrent batches then share
-- through a multixact. Likewise a job's class row references the run.
ALTER TABLE results DROP CONSTRAINT results_run_id_fkey;
ALTER TABLE jobs DROP CONSTRAINT jobs_run_id_fkey;

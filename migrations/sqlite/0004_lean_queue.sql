-- A lease and a completion each rewrite a job's state, owner and token, so
-- every index holding one of those is rewritten twice a job. Keep only the
-- ones a query walks: leases take jobs_run_queue (run, state, id);
-- heartbeats find a worker's leases through jobs_lease_owner and compare
-- their tokens there. Nothing reads jobs by (state, id) without the run, or
-- by token alone.
DROP INDEX jobs_queue;
DROP INDEX jobs_lease_token;

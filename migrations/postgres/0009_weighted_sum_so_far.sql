-- A run's weighted sum so far, kept in its row (issue 21 item 1).
--
-- The status page and `census status` show a run's weighted sum so far (the
-- sum of its classes' contributions, weight x count sum^class_power). The
-- run_progress view added it up over the run's classes on every read: a
-- sum over 10^6 rows a poll for a run of 10^7 jobs. The store now keeps it
-- in the runs row, changed in the transaction that changes a class's count
-- sum (census-store, sql/results.rs and sql/remedies.rs: one statement
-- updates the classes and adds the change of their contributions), as
-- SQLite's migration 0006 already keeps it. The finish of a run checks it
-- against the fold of the jobs' counts, as before.
ALTER TABLE runs ADD COLUMN weighted_sum_so_far NUMERIC NOT NULL DEFAULT 0;
UPDATE runs r SET weighted_sum_so_far = COALESCE((SELECT sum(g.contribution) FROM group_totals g WHERE g.run_id = r.id), 0);

CREATE OR REPLACE VIEW run_progress AS
SELECT r.id AS run_id,
       r.census,
       r.counter_version,
       r.redundancy,
       r.jobs_total,
       r.jobs_total - r.jobs_remaining AS jobs_done,
       r.failed_jobs,
       r.open_conflicts,
       r.finished_at IS NOT NULL AS final,
       r.weighted_sum,
       r.answer,
       r.weighted_sum_so_far,
       to_timestamp(r.created_at / 1000.0)  AS created,
       to_timestamp(r.finished_at / 1000.0) AS finished
FROM runs r;

-- Progress by cost (issue 21 item 3).
--
-- A run's jobs may differ in cost by orders of magnitude (a layers census's
-- map, reduce and class jobs), so progress and its ETA weigh each job by its
-- expected cost (census-math's Census::job_cost; 1 where the census does not
-- know). A job's cost is recorded when its run is created; the run's row
-- keeps the cost of all its jobs and of its done jobs, changed in the
-- statements that change jobs_remaining (census-store: sql/results.rs when a
-- job is accepted, sql/remedies.rs when one is reopened), so a progress poll
-- reads one row, never the run's jobs. (The same schema as
-- migrations/sqlite/0009_job_costs.sql.)
--
-- Every job stored before this migration costs 1, so its run's costs are its
-- job counts. A constant default adds the column without rewriting the table.
ALTER TABLE jobs ADD COLUMN cost BIGINT NOT NULL DEFAULT 1;
ALTER TABLE runs ADD COLUMN cost_total BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cost_done BIGINT NOT NULL DEFAULT 0;
UPDATE runs SET cost_total = jobs_total, cost_done = jobs_total - jobs_remaining;

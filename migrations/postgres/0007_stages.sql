-- Runs with stages (issue 22 item 4). A layers census's map and reduce jobs
-- read the files the jobs of the stage before wrote, so the store leases a
-- job of stage s only when every job of the stages below s in its run is
-- done (census-store, store/queue.rs). (The same schema as
-- migrations/sqlite/0008_stages.sql.)
--
-- A job's stage, recorded when its run is created (Census::stage), from 0,
-- in a run whose census has more than one stage; NULL in a run of one stage,
-- which is every other kind and every run created before this migration.
-- NULL rather than 0 so that the index below holds only staged runs' jobs:
-- the jobs of ordinary runs, leased and reported millions of times, write
-- no entry in it.
ALTER TABLE jobs ADD COLUMN stage BIGINT CHECK (stage >= 0);
-- A staged run's queue, walked by (run, state, stage, id): the lowest stage
-- that holds a job in a state is the first entry of its range, and leases
-- take the open stage's jobs in id order. (Runs of one stage keep walking
-- jobs_run_queue, whose id order the fold's pages also read.)
CREATE INDEX jobs_staged_queue ON jobs (run_id, state, stage, id) WHERE stage IS NOT NULL;

-- A group may weigh 0: its count is no part of the answer (a layers map or
-- reduce job's count is the digest of its files). It contributes
-- 0 x count_sum^class_power = 0, so the run's weighted sum stays the sum of
-- the groups that count. (The check of migration 0001, on the column then
-- called size, asked for at least 1.)
ALTER TABLE classes DROP CONSTRAINT classes_size_check;
ALTER TABLE classes ADD CHECK (weight >= 0);

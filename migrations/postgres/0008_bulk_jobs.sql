-- Creating a run of 10^7 jobs within a minute (issue 21 item 1).
--
-- Inserting a run's jobs cost the server about 12 s a million (measured:
-- BENCHMARKS.md, "Creating a run of 10^7 jobs"), 43 % of it the foreign key
-- from jobs to classes: a trigger a row, each looking up and locking (FOR
-- KEY SHARE) its class. The store now looks up a chunk's classes, each
-- once, before it inserts the chunk's jobs in one statement, and refuses a
-- chunk with a class the run does not have (census-store, sql/runs.rs:
-- insert_jobs): the same check, once a class and chunk instead of once a
-- job, and without a lock. Classes are never deleted
-- and a job's class never changes (no statement of the store does either,
-- and results, which reference jobs, are append-only), so what the key
-- guarded after a job is inserted cannot happen through the store. The
-- SQLite schema keeps its key: there the check costs little, and a table
-- would have to be rebuilt to drop it.
ALTER TABLE jobs DROP CONSTRAINT jobs_run_id_class_id_fkey;

-- A job key is unique within its run. Nothing looks a job up by its key:
-- the index only keeps keys unique, so it compares them byte by byte ("C"),
-- where the database's collation compared them by locale rules (about 7 %
-- of an insert). Equal under one is equal under the other: the same keys
-- are refused.
CREATE UNIQUE INDEX jobs_run_key ON jobs (run_id, key COLLATE "C");
ALTER TABLE jobs DROP CONSTRAINT jobs_run_id_key_key;

-- Each run's count of leased jobs, kept by the database (issue 21 item 1).
--
-- Progress reported `COUNT(*) FROM jobs WHERE state = 'leased' AND run_id`
-- on every status poll. That count reads an index entry for every job
-- leased since the table was last vacuumed (a job that leaves its lease
-- leaves its entry behind until then): polls while 10^7 jobs were counted
-- took 72 ms on average and up to 893 ms for this count alone (BENCHMARKS.md,
-- "The count of leased jobs"). Now a trigger adds up, statement by
-- statement, the jobs that enter and leave the leased state, and progress
-- sums a few rows.
--
-- A trigger, not the store's code: every statement that moves a job into
-- or out of its lease (a lease, a report, a failure, a release, a recount,
-- a quarantine, one written in the future) is counted, by construction.
-- Once a statement, with its transition tables: a lease of 2,000 jobs is
-- one upsert, not 2,000. In one of 1,024 slots a run, by the server
-- process: a slot's row stays locked until the statement's transaction
-- commits (a report's holds it through its other statements), so with one
-- row a run every lease and report of the run would queue on it. A slot
-- may go negative; their sum is the count, a read of at most 1,024 rows.
-- (What migrations/sqlite/0013_run_leases.sql keeps with a row trigger.)
CREATE TABLE run_leases (
    run_id BIGINT NOT NULL REFERENCES runs (id),
    slot   INTEGER NOT NULL,
    leased BIGINT NOT NULL,
    PRIMARY KEY (run_id, slot)
);

CREATE FUNCTION count_run_leases() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The leased rows after the statement less those before, by run: a
    -- job leased again (an expired lease taken over, a heartbeat) counts
    -- +1 and -1. Not a join of the two tables: PL/pgSQL's cached plan
    -- takes them for one row each and joined 2,048 x 2,048 rows in a
    -- nested loop (2 s a lease, seen with auto_explain). In run order, so
    -- that two statements that touch the same runs take their slots'
    -- locks in one order.
    INSERT INTO run_leases AS counted (run_id, slot, leased)
    SELECT run_id, pg_backend_pid() % 1024, SUM(change)
    FROM (SELECT run_id, 1 AS change FROM jobs_after WHERE state = 'leased'
          UNION ALL
          SELECT run_id, -1 AS change FROM jobs_before WHERE state = 'leased') AS moved
    GROUP BY run_id
    HAVING SUM(change) <> 0
    ORDER BY run_id
    ON CONFLICT (run_id, slot) DO UPDATE SET leased = counted.leased + EXCLUDED.leased;
    RETURN NULL;
END
$$;

-- Jobs are inserted pending and never deleted: only updates move leases.
CREATE TRIGGER jobs_count_run_leases AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS jobs_before NEW TABLE AS jobs_after
    FOR EACH STATEMENT EXECUTE FUNCTION count_run_leases();

-- After the trigger, in the same transaction: creating it locked the jobs
-- against writes, so no lease moves between this count and the trigger.
INSERT INTO run_leases (run_id, slot, leased)
SELECT run_id, 0, COUNT(*) FROM jobs WHERE state = 'leased' GROUP BY run_id;

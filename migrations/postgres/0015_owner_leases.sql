-- Each identity's count of leased jobs, kept by the database (issue 21
-- item 2): a bound the lease checks the worker's cap against.
--
-- Every lease call counted the identity's unexpired leases, `COUNT(*) FROM
-- jobs WHERE state = 'leased' AND lease_owner = $1 AND lease_expires_at >=
-- now`. That count reads an index entry for every job the identity leased
-- within the last lease TTL, live or already reported (an entry stays until
-- the table is vacuumed): 9,399 buffers and 44 ms a call with two workers
-- leasing 6,000 jobs a batch, and on creation-time statistics it was
-- sometimes planned along `jobs_lease_expiry`, every leased entry of every
-- run (BENCHMARKS.md, "A run's end"). Now a trigger adds up the jobs each
-- identity holds in the leased state, expired or not, and the lease sums a
-- few rows. That sum is at least the count of unexpired leases, so while it
-- leaves room under the cap the count is not needed; only a worker at its
-- cap is counted exactly (`store/queue.rs`).
--
-- As migration 0014_run_leases: a trigger, so that every statement that
-- moves a lease is counted; once a statement, with its transition tables;
-- in one of 1,024 slots an identity, by the server process, so that a
-- worker's lease and its reports on other connections do not queue on one
-- row, and a lease that takes over expired leases of other identities
-- does not wait for their reports. A job leased again by the same
-- identity (a heartbeat, its own expired lease) counts +1 and -1.
-- (What migrations/sqlite/0014_owner_leases.sql keeps with a row trigger.)
CREATE TABLE owner_leases (
    owner  TEXT NOT NULL,
    slot   INTEGER NOT NULL,
    leased BIGINT NOT NULL,
    PRIMARY KEY (owner, slot)
);

CREATE FUNCTION count_owner_leases() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- No join of the two tables (see count_run_leases); in owner order, so
    -- that two statements that touch the same identities take their slots'
    -- locks in one order.
    INSERT INTO owner_leases AS counted (owner, slot, leased)
    SELECT lease_owner, pg_backend_pid() % 1024, SUM(change)
    FROM (SELECT lease_owner, 1 AS change FROM jobs_after WHERE state = 'leased'
          UNION ALL
          SELECT lease_owner, -1 AS change FROM jobs_before WHERE state = 'leased') AS moved
    GROUP BY lease_owner
    HAVING SUM(change) <> 0
    ORDER BY lease_owner
    ON CONFLICT (owner, slot) DO UPDATE SET leased = counted.leased + EXCLUDED.leased;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_count_owner_leases AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS jobs_before NEW TABLE AS jobs_after
    FOR EACH STATEMENT EXECUTE FUNCTION count_owner_leases();

-- After the trigger, in the same transaction: creating it locked the jobs
-- against writes, so no lease moves between this count and the trigger.
INSERT INTO owner_leases (owner, slot, leased)
SELECT lease_owner, 0, COUNT(*) FROM jobs WHERE state = 'leased' GROUP BY lease_owner;

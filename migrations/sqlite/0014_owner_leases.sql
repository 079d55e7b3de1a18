-- Each identity's count of leased jobs, expired or not, kept by the
-- database: a bound the lease checks the worker's cap against, so that
-- only a worker at its cap has its unexpired leases counted
-- (`store/queue.rs`). One slot an identity and a trigger for each row, as
-- migration 0013_run_leases. (Why, and what migrations/postgres/
-- 0015_owner_leases.sql keeps once a statement: there.)
CREATE TABLE owner_leases (
    owner  TEXT NOT NULL,
    slot   INTEGER NOT NULL,
    leased INTEGER NOT NULL,
    PRIMARY KEY (owner, slot)
);

-- A lease moves when the job's state or its owner changes; a job leased
-- again by another identity (an expired lease taken over) counts -1 for
-- the one and +1 for the other.
CREATE TRIGGER jobs_count_owner_leases AFTER UPDATE OF state, lease_owner ON jobs
    WHEN (OLD.state = 'leased' OR NEW.state = 'leased')
        AND NOT (OLD.state = 'leased' AND NEW.state = 'leased' AND OLD.lease_owner = NEW.lease_owner)
BEGIN
    INSERT INTO owner_leases (owner, slot, leased)
    SELECT OLD.lease_owner, 0, -1 WHERE OLD.state = 'leased'
    ON CONFLICT (owner, slot) DO UPDATE SET leased = leased + excluded.leased;
    INSERT INTO owner_leases (owner, slot, leased)
    SELECT NEW.lease_owner, 0, 1 WHERE NEW.state = 'leased'
    ON CONFLICT (owner, slot) DO UPDATE SET leased = leased + excluded.leased;
END;

INSERT INTO owner_leases (owner, slot, leased)
SELECT lease_owner, 0, COUNT(*) FROM jobs WHERE state = 'leased' GROUP BY lease_owner;

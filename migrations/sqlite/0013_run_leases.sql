-- Each run's count of leased jobs, kept by the database (issue 21 item 1).
--
-- Progress reported `COUNT(*) FROM jobs WHERE state = 'leased' AND run_id`
-- on every status poll, which reads every leased job of the run. Now a
-- trigger counts the jobs that enter and leave the leased state, whichever
-- statement moves them, and progress sums the run's rows here. SQLite has
-- one writer at a time: one slot a run, and a trigger for each row.
-- (What migrations/postgres/0014_run_leases.sql keeps once a statement.)
CREATE TABLE run_leases (
    run_id INTEGER NOT NULL REFERENCES runs (id),
    slot   INTEGER NOT NULL,
    leased INTEGER NOT NULL,
    PRIMARY KEY (run_id, slot)
);

-- Jobs are inserted pending and never deleted: only updates move leases.
CREATE TRIGGER jobs_count_run_leases AFTER UPDATE OF state ON jobs
    WHEN (OLD.state = 'leased') <> (NEW.state = 'leased')
BEGIN
    INSERT INTO run_leases (run_id, slot, leased)
    VALUES (NEW.run_id, 0, CASE WHEN NEW.state = 'leased' THEN 1 ELSE -1 END)
    ON CONFLICT (run_id, slot) DO UPDATE SET leased = leased + excluded.leased;
END;

INSERT INTO run_leases (run_id, slot, leased)
SELECT run_id, 0, COUNT(*) FROM jobs WHERE state = 'leased' GROUP BY run_id;

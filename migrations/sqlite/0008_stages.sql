-- Runs with stages (issue 22 item 4). A layers census's map and reduce jobs
-- read the files the jobs of the stage before wrote, so the store leases a
-- job of stage s only when every job of the stages below s in its run is
-- done (census-store, store/queue.rs). (The same schema as
-- migrations/postgres/0007_stages.sql.)
--
-- A job's stage, recorded when its run is created (Census::stage), from 0,
-- in a run whose census has more than one stage; NULL in a run of one stage,
-- which is every other kind and every run created before this migration.
-- NULL rather than 0 so that the index below holds only staged runs' jobs:
-- the jobs of ordinary runs write no entry in it.
ALTER TABLE jobs ADD COLUMN stage INTEGER CHECK (stage >= 0);
-- A staged run's queue, walked by (run, state, stage, id): the lowest stage
-- that holds a job in a state is the first entry of its range, and leases
-- take the open stage's jobs in id order. (Runs of one stage keep walking
-- jobs_run_queue, whose id order the fold's pages also read.)
CREATE INDEX jobs_staged_queue ON jobs (run_id, state, stage, id) WHERE stage IS NOT NULL;

-- A group may weigh 0: its count is no part of the answer (a layers map or
-- reduce job's count is the digest of its files). It contributes
-- 0 x count_sum^class_power = 0, so the run's weighted sum stays the sum of
-- the groups that count. SQLite cannot change a column's check, so classes
-- is rebuilt as in 0006 (the store migrates with foreign keys off and checks
-- them after; rows keep their keys), and the two views that read it are
-- made again as they were.
DROP VIEW class_totals;
DROP VIEW group_totals;

CREATE TABLE classes_v8 (
    run_id       INTEGER NOT NULL REFERENCES runs (id),
    class_id     INTEGER NOT NULL,
    label        TEXT    NOT NULL CHECK (length(label) BETWEEN 1 AND 200),
    weight       TEXT    NOT NULL
                 CHECK (weight <> '' AND weight NOT GLOB '*[^0-9]*' AND (weight = '0' OR weight NOT GLOB '0*')
                        AND length(weight) <= 39),
    jobs_total   INTEGER NOT NULL CHECK (jobs_total > 0),
    jobs_done    INTEGER NOT NULL DEFAULT 0 CHECK (jobs_done BETWEEN 0 AND jobs_total),
    count_sum    TEXT    NOT NULL DEFAULT '0'
                 CHECK (count_sum <> '' AND count_sum NOT GLOB '*[^0-9]*' AND (count_sum = '0' OR count_sum NOT GLOB '0*')),
    -- weight x count_sum^class_power, kept by the store with count_sum.
    contribution TEXT    NOT NULL DEFAULT '0'
                 CHECK (contribution <> '' AND contribution NOT GLOB '*[^0-9]*'
                        AND (contribution = '0' OR contribution NOT GLOB '0*')),
    PRIMARY KEY (run_id, class_id)
);
INSERT INTO classes_v8 (run_id, class_id, label, weight, jobs_total, jobs_done, count_sum, contribution)
SELECT run_id, class_id, label, weight, jobs_total, jobs_done, count_sum, contribution FROM classes;
DROP TABLE classes;
ALTER TABLE classes_v8 RENAME TO classes;

-- Any census: one row per class (group) of a run. Numbers are decimal TEXT;
-- add them with the sqlite3 shell's decimal_sum (README, "Audit in SQL").
CREATE VIEW group_totals AS
SELECT c.run_id,
       r.census,
       c.class_id,
       c.label,
       c.weight,
       c.jobs_total,
       c.jobs_done,
       c.count_sum,
       c.contribution,                -- weight x count_sum^class_power
       c.jobs_done = c.jobs_total AS complete
FROM classes c JOIN runs r ON r.id = c.run_id;

-- The 9x9 audit, with the columns of earlier versions. completions is
-- 72 x seed_sum, multiplied as a 64-bit integer only where it cannot
-- overflow (a 9x9 class's seed sum has at most 17 digits by far), and
-- shown as text like every other number here.
CREATE VIEW class_totals AS
SELECT g.run_id,
       g.class_id,
       g.label        AS representative,
       g.weight       AS size,
       g.jobs_done    AS seeds_done,
       g.count_sum    AS seed_sum,
       CASE WHEN length(g.count_sum) <= 17 THEN CAST(72 * CAST(g.count_sum AS INTEGER) AS TEXT) END AS completions,
       g.contribution,
       g.complete
FROM group_totals g WHERE g.census LIKE 'sudoku %';

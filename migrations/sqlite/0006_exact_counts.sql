-- Exact 128-bit counts and exact sums in SQLite (issue 20 item 4, issue 25
-- item 4).
--
-- SQLite's numbers are 64-bit integers or doubles: a count above 2^63 - 1
-- cannot be an INTEGER, and an INTEGER sum or product that overflows
-- silently becomes a REAL (a 2x5 run's contributions read back as
-- 1.90381604797262e+30). The 4x3 census has per-class counts up to 7.1e19
-- and sums far beyond 2^128. So every count, weight and sum is stored as
-- canonical decimal TEXT (digits only, no sign, no leading zero), the
-- representation Postgres's NUMERIC prints, the proto carries and the
-- sqlite3 shell's decimal_* functions read; TEXT affinity keeps SQLite from
-- ever converting it to a number. (Fixed-width limbs were the alternative:
-- exact too, but no person auditing the file could read or add them.)
--
-- SQLite cannot add TEXT exactly, so the store keeps the sums itself, in
-- Rust, in the same transaction that records the results: a class's
-- count_sum and its contribution (weight x count_sum^class_power), the run's
-- counted and weighted_sum_so_far (the sum of the contributions) and each
-- worker's completions. The views only show stored text; none computes
-- with a count, so none can yield a REAL.
--
-- Every earlier run stays readable. Its job and result counts were 64-bit
-- INTEGERs (larger ones were refused), so CAST(... AS TEXT) keeps them
-- exactly. Its sums may already have overflowed to REAL, so they are not
-- trusted: runs.sums_exact = 0 marks a run whose sums the store rebuilds,
-- exactly and from the jobs and results, the next time it opens the file
-- (sql/exact.rs), before anything else reads them.
--
-- Tables are rebuilt as in 0003 (SQLite cannot change a column's type);
-- the store applies this with foreign keys off and checks them after, and
-- rows keep their ids.

DROP VIEW run_progress;
DROP VIEW class_totals;
DROP VIEW group_totals;
DROP TRIGGER results_never_change;
DROP TRIGGER results_never_go;

CREATE TABLE runs_v6 (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    census              TEXT    NOT NULL CHECK (length(census) BETWEEN 1 AND 200),
    counter_version     TEXT    NOT NULL,
    redundancy          INTEGER NOT NULL DEFAULT 1 CHECK (redundancy >= 1),
    jobs_total          INTEGER NOT NULL,
    jobs_remaining      INTEGER NOT NULL,
    open_conflicts      INTEGER NOT NULL DEFAULT 0,
    failed_jobs         INTEGER NOT NULL DEFAULT 0,
    -- The sum of the counts of done jobs.
    counted             TEXT    NOT NULL DEFAULT '0'
                        CHECK (counted <> '' AND counted NOT GLOB '*[^0-9]*' AND (counted = '0' OR counted NOT GLOB '0*')),
    created_at          INTEGER NOT NULL,
    finished_at         INTEGER,
    weighted_sum        TEXT,
    answer              TEXT,
    priority            INTEGER NOT NULL DEFAULT 0,
    cancelled_at        INTEGER,
    class_power         INTEGER NOT NULL DEFAULT 1 CHECK (class_power IN (1, 2)),
    -- The sum of the classes' contributions so far, kept by the store.
    weighted_sum_so_far TEXT    NOT NULL DEFAULT '0'
                        CHECK (weighted_sum_so_far <> '' AND weighted_sum_so_far NOT GLOB '*[^0-9]*'
                               AND (weighted_sum_so_far = '0' OR weighted_sum_so_far NOT GLOB '0*')),
    -- 0 until the store has rebuilt this run's sums after the migration.
    sums_exact          INTEGER NOT NULL DEFAULT 1 CHECK (sums_exact IN (0, 1)),
    UNIQUE (census, counter_version, redundancy)
);
INSERT INTO runs_v6 (id, census, counter_version, redundancy, jobs_total, jobs_remaining, open_conflicts, failed_jobs,
                     counted, created_at, finished_at, weighted_sum, answer, priority, cancelled_at, class_power,
                     weighted_sum_so_far, sums_exact)
SELECT id, census, counter_version, redundancy, jobs_total, jobs_remaining, open_conflicts, failed_jobs,
       '0', created_at, finished_at, weighted_sum, answer, priority, cancelled_at, class_power, '0', 0
FROM runs;

CREATE TABLE classes_v6 (
    run_id       INTEGER NOT NULL REFERENCES runs (id),
    class_id     INTEGER NOT NULL,
    label        TEXT    NOT NULL CHECK (length(label) BETWEEN 1 AND 200),
    weight       TEXT    NOT NULL
                 CHECK (weight <> '' AND weight NOT GLOB '*[^0-9]*' AND weight NOT GLOB '0*' AND length(weight) <= 39),
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
-- Weights were positive 64-bit INTEGERs; the sums are rebuilt (sums_exact = 0).
INSERT INTO classes_v6 (run_id, class_id, label, weight, jobs_total, jobs_done, count_sum, contribution)
SELECT run_id, class_id, label, CAST(weight AS TEXT), jobs_total, jobs_done, '0', '0' FROM classes;

CREATE TABLE jobs_v6 (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id           INTEGER NOT NULL REFERENCES runs (id),
    class_id         INTEGER NOT NULL,
    key              TEXT    NOT NULL CHECK (length(key) BETWEEN 1 AND 200),
    state            TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'leased', 'done', 'failed')),
    attempt          INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_token      TEXT,
    lease_expires_at INTEGER,
    lease_started_at INTEGER,
    votes            INTEGER NOT NULL DEFAULT 0,
    -- The accepted count, below 2^128.
    count            TEXT    CHECK (count <> '' AND count NOT GLOB '*[^0-9]*' AND (count = '0' OR count NOT GLOB '0*')
                                    AND length(count) <= 39),
    conflict         INTEGER NOT NULL DEFAULT 0,
    round            INTEGER NOT NULL DEFAULT 0,
    failures         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    failure_epoch    INTEGER NOT NULL DEFAULT 0,
    UNIQUE (run_id, key),
    FOREIGN KEY (run_id, class_id) REFERENCES classes (run_id, class_id)
);
INSERT INTO jobs_v6 (id, run_id, class_id, key, state, attempt, lease_owner, lease_token, lease_expires_at,
                     lease_started_at, votes, count, conflict, round, failures, created_at, updated_at, failure_epoch)
SELECT id, run_id, class_id, key, state, attempt, lease_owner, lease_token, lease_expires_at, lease_started_at, votes,
       CAST(count AS TEXT), conflict, round, failures, created_at, updated_at, failure_epoch
FROM jobs;

CREATE TABLE results_v6 (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id          INTEGER NOT NULL REFERENCES jobs (id),
    run_id          INTEGER NOT NULL REFERENCES runs (id),
    attempt         INTEGER NOT NULL,
    worker          TEXT    NOT NULL,
    count           TEXT    NOT NULL
                    CHECK (count <> '' AND count NOT GLOB '*[^0-9]*' AND (count = '0' OR count NOT GLOB '0*')
                           AND length(count) <= 39),
    elapsed_ms      REAL    NOT NULL,
    counter_version TEXT    NOT NULL,
    outcome         TEXT    NOT NULL CHECK (outcome IN ('accepted', 'vote', 'conflict')),
    finished_at     INTEGER NOT NULL,
    round           INTEGER NOT NULL DEFAULT 0
);
INSERT INTO results_v6 (id, job_id, run_id, attempt, worker, count, elapsed_ms, counter_version, outcome, finished_at,
                        round)
SELECT id, job_id, run_id, attempt, worker, CAST(count AS TEXT), elapsed_ms, counter_version, outcome, finished_at, round
FROM results;

CREATE TABLE worker_stats_v6 (
    run_id      INTEGER NOT NULL REFERENCES runs (id),
    worker      TEXT    NOT NULL,
    jobs        INTEGER NOT NULL,
    -- The sum of the worker's accepted counts in the run, kept by the store.
    completions TEXT    NOT NULL
                CHECK (completions <> '' AND completions NOT GLOB '*[^0-9]*'
                       AND (completions = '0' OR completions NOT GLOB '0*')),
    last_seen   INTEGER NOT NULL,
    PRIMARY KEY (run_id, worker)
);
INSERT INTO worker_stats_v6 (run_id, worker, jobs, completions, last_seen)
SELECT run_id, worker, jobs, '0', last_seen FROM worker_stats;

DROP TABLE worker_stats;
DROP TABLE results;
DROP TABLE jobs;
DROP TABLE classes;
DROP TABLE runs;
ALTER TABLE runs_v6 RENAME TO runs;
ALTER TABLE classes_v6 RENAME TO classes;
ALTER TABLE jobs_v6 RENAME TO jobs;
ALTER TABLE results_v6 RENAME TO results;
ALTER TABLE worker_stats_v6 RENAME TO worker_stats;

-- The indexes of 0001-0005 that remain, and results' append-only triggers.
CREATE INDEX jobs_lease_owner ON jobs (lease_owner) WHERE state = 'leased';
CREATE INDEX jobs_run_queue ON jobs (run_id, state, id);
CREATE INDEX results_job ON results (job_id, worker);
CREATE INDEX results_run_finished ON results (run_id, finished_at);
CREATE INDEX results_worker ON results (worker);
CREATE TRIGGER results_never_change BEFORE UPDATE ON results
BEGIN SELECT RAISE(ABORT, 'results are append-only'); END;
CREATE TRIGGER results_never_go BEFORE DELETE ON results
BEGIN SELECT RAISE(ABORT, 'results are append-only'); END;

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

CREATE VIEW run_progress AS
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
       datetime(r.created_at / 1000, 'unixepoch')  AS created,
       datetime(r.finished_at / 1000, 'unixepoch') AS finished
FROM runs r;

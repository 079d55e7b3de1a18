-- Any kind of census (issue 9). A run is a census description
-- (census_math::census::Census, e.g. 'essentially-different'); its classes
-- are the census's groups (a label and an exact weight); its jobs carry the
-- text key a worker counts from. The store knows nothing more of what is
-- counted: the answer and its terms come from the census's fold in Rust.
--
-- SQLite cannot drop CHECK or UNIQUE constraints, so runs, classes and jobs
-- are rebuilt (https://sqlite.org/lang_altertable.html, "other kinds of table
-- schema changes"). The store applies this file on a connection with foreign
-- keys off and checks them after; rows keep their ids, so results, failures
-- and rejections still point at their jobs. 9x9 runs of earlier versions
-- become 'sudoku stage=S counter=C' runs; their jobs' keys are 'BAND SEED'.
-- Counts stay 64-bit INTEGERs here; Postgres holds them as NUMERIC.

DROP VIEW run_progress;
DROP VIEW class_totals;

CREATE TABLE runs_v3 (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    census          TEXT    NOT NULL CHECK (length(census) BETWEEN 1 AND 200),
    counter_version TEXT    NOT NULL,
    redundancy      INTEGER NOT NULL DEFAULT 1 CHECK (redundancy >= 1),
    jobs_total      INTEGER NOT NULL,
    jobs_remaining  INTEGER NOT NULL,
    open_conflicts  INTEGER NOT NULL DEFAULT 0,
    failed_jobs     INTEGER NOT NULL DEFAULT 0,
    counted         INTEGER NOT NULL DEFAULT 0,      -- sum of the counts of done jobs
    created_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    weighted_sum    TEXT,                            -- sum over classes of weight x count sum (9x9: S)
    answer          TEXT,                            -- the census's exact answer (9x9: N0), decimal
    priority        INTEGER NOT NULL DEFAULT 0,
    cancelled_at    INTEGER,
    -- How a class's count sum enters the answer (Census::class_power): a
    -- class contributes weight x (count sum)^class_power; 2 for box shapes.
    class_power     INTEGER NOT NULL DEFAULT 1 CHECK (class_power IN (1, 2)),
    UNIQUE (census, counter_version, redundancy)
);
INSERT INTO runs_v3 (id, census, counter_version, redundancy, jobs_total, jobs_remaining, open_conflicts,
                     failed_jobs, counted, created_at, finished_at, weighted_sum, answer, priority, cancelled_at)
SELECT id, 'sudoku stage=' || stage || ' counter=' || counter, counter_version, redundancy, jobs_total,
       jobs_remaining, open_conflicts, failed_jobs, counted, created_at, finished_at, s, n0, priority, cancelled_at
FROM runs;

CREATE TABLE classes_v3 (
    run_id     INTEGER NOT NULL REFERENCES runs (id),
    class_id   INTEGER NOT NULL,
    label      TEXT    NOT NULL CHECK (length(label) BETWEEN 1 AND 200),
    weight     INTEGER NOT NULL CHECK (weight > 0),
    jobs_total INTEGER NOT NULL CHECK (jobs_total > 0),
    jobs_done  INTEGER NOT NULL DEFAULT 0 CHECK (jobs_done BETWEEN 0 AND jobs_total),
    count_sum  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, class_id)
);
INSERT INTO classes_v3 (run_id, class_id, label, weight, jobs_total, jobs_done, count_sum)
SELECT run_id, class_id, representative, size, 10, seeds_done, seed_sum FROM classes;

CREATE TABLE jobs_v3 (
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
    count            INTEGER CHECK (count >= 0),
    conflict         INTEGER NOT NULL DEFAULT 0,
    round            INTEGER NOT NULL DEFAULT 0,
    failures         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    UNIQUE (run_id, key),
    FOREIGN KEY (run_id, class_id) REFERENCES classes (run_id, class_id)
);
-- The seeds in the order of census_math::SEEDS (the old jobs.seed index).
INSERT INTO jobs_v3 (id, run_id, class_id, key, state, attempt, lease_owner, lease_token, lease_expires_at,
                     lease_started_at, votes, count, conflict, round, failures, created_at, updated_at)
SELECT j.id, j.run_id, j.class_id,
       c.representative || ' ' || CASE j.seed WHEN 0 THEN '235/689' WHEN 1 THEN '236/589' WHEN 2 THEN '238/569'
           WHEN 3 THEN '239/568' WHEN 4 THEN '256/389' WHEN 5 THEN '258/369' WHEN 6 THEN '259/368'
           WHEN 7 THEN '268/359' WHEN 8 THEN '269/358' WHEN 9 THEN '289/356' END,
       j.state, j.attempt, j.lease_owner, j.lease_token, j.lease_expires_at, j.lease_started_at, j.votes, j.count,
       j.conflict, j.round, j.failures, j.created_at, j.updated_at
FROM jobs j JOIN classes c ON c.run_id = j.run_id AND c.class_id = j.class_id;

DROP TABLE jobs;
DROP TABLE classes;
DROP TABLE runs;
ALTER TABLE runs_v3 RENAME TO runs;
ALTER TABLE classes_v3 RENAME TO classes;
ALTER TABLE jobs_v3 RENAME TO jobs;

CREATE INDEX jobs_queue ON jobs (state, id);
CREATE INDEX jobs_lease_token ON jobs (lease_token);
CREATE INDEX jobs_lease_owner ON jobs (lease_owner) WHERE state = 'leased';
CREATE INDEX jobs_run_queue ON jobs (run_id, state, id);

-- Any census: one row per class (group) of a run.
CREATE VIEW group_totals AS
SELECT c.run_id,
       r.census,
       c.class_id,
       c.label,
       c.weight,
       c.jobs_total,
       c.jobs_done,
       c.count_sum,
       -- What the class adds to the answer: weight x (count sum)^class_power.
       CASE WHEN r.class_power = 2 THEN c.weight * c.count_sum * c.count_sum
            ELSE c.weight * c.count_sum END AS contribution,
       c.jobs_done = c.jobs_total  AS complete
FROM classes c JOIN runs r ON r.id = c.run_id;

-- The 9x9 audit, with the columns of earlier versions: a class's label is
-- its representative band, its weight the class size, its jobs the 10 seeds.
CREATE VIEW class_totals AS
SELECT g.run_id,
       g.class_id,
       g.label        AS representative,
       g.weight       AS size,
       g.jobs_done    AS seeds_done,
       g.count_sum    AS seed_sum,
       72 * g.count_sum AS completions,
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
       (SELECT sum(g.contribution) FROM group_totals g WHERE g.run_id = r.id) AS weighted_sum_so_far,
       datetime(r.created_at / 1000, 'unixepoch')  AS created,
       datetime(r.finished_at / 1000, 'unixepoch') AS finished
FROM runs r;

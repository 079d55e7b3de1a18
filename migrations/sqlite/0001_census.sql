-- The census's queue of record (SQLite, the embedded default). The same
-- tables as the Postgres schema; seed sums and S fit in INTEGER, N0 (about
-- 6.7e21) does not, so it is TEXT. Timestamps are Unix epoch milliseconds.

CREATE TABLE runs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    stage           TEXT    NOT NULL,
    counter         TEXT    NOT NULL,
    counter_version TEXT    NOT NULL,
    redundancy      INTEGER NOT NULL DEFAULT 1 CHECK (redundancy >= 1),
    jobs_total      INTEGER NOT NULL,
    jobs_remaining  INTEGER NOT NULL,
    open_conflicts  INTEGER NOT NULL DEFAULT 0,
    failed_jobs     INTEGER NOT NULL DEFAULT 0,
    counted         INTEGER NOT NULL DEFAULT 0,      -- sum of the counts of done jobs
    created_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    s               TEXT,
    n0              TEXT,
    UNIQUE (stage, counter, counter_version, redundancy)
);

CREATE TABLE classes (
    run_id          INTEGER NOT NULL REFERENCES runs (id),
    class_id        INTEGER NOT NULL,
    representative  TEXT    NOT NULL CHECK (length(representative) = 27),
    size            INTEGER NOT NULL CHECK (size > 0),
    seed_sum        INTEGER NOT NULL DEFAULT 0,
    seeds_done      INTEGER NOT NULL DEFAULT 0 CHECK (seeds_done BETWEEN 0 AND 10),
    PRIMARY KEY (run_id, class_id)
);

CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id           INTEGER NOT NULL REFERENCES runs (id),
    class_id         INTEGER NOT NULL,
    seed             INTEGER NOT NULL CHECK (seed BETWEEN 0 AND 9),
    state            TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'leased', 'done', 'failed')),
    attempt          INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_token      TEXT,
    lease_expires_at INTEGER,
    votes            INTEGER NOT NULL DEFAULT 0,
    count            INTEGER,
    conflict         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    UNIQUE (run_id, class_id, seed),
    FOREIGN KEY (run_id, class_id) REFERENCES classes (run_id, class_id)
);
CREATE INDEX jobs_queue ON jobs (state, id);
CREATE INDEX jobs_lease_token ON jobs (lease_token);

CREATE TABLE results (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id          INTEGER NOT NULL REFERENCES jobs (id),
    run_id          INTEGER NOT NULL REFERENCES runs (id),
    attempt         INTEGER NOT NULL,
    worker          TEXT    NOT NULL,
    count           INTEGER NOT NULL CHECK (count >= 0),
    elapsed_ms      REAL    NOT NULL,
    counter_version TEXT    NOT NULL,
    outcome         TEXT    NOT NULL CHECK (outcome IN ('accepted', 'vote', 'conflict')),
    finished_at     INTEGER NOT NULL
);
CREATE INDEX results_job ON results (job_id, worker);
CREATE INDEX results_run_finished ON results (run_id, finished_at);

-- Results are append-only.
CREATE TRIGGER results_never_change BEFORE UPDATE ON results
BEGIN SELECT RAISE(ABORT, 'results are append-only'); END;
CREATE TRIGGER results_never_go BEFORE DELETE ON results
BEGIN SELECT RAISE(ABORT, 'results are append-only'); END;

-- Per-worker tallies, kept up to date by each batch of results.
CREATE TABLE worker_stats (
    run_id      INTEGER NOT NULL REFERENCES runs (id),
    worker      TEXT   NOT NULL,
    jobs        INTEGER NOT NULL,
    completions INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    PRIMARY KEY (run_id, worker)
);

CREATE TABLE failures (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id    INTEGER NOT NULL REFERENCES jobs (id),
    attempt   INTEGER NOT NULL,
    worker    TEXT    NOT NULL,
    reason    TEXT    NOT NULL,
    failed_at INTEGER NOT NULL
);

CREATE VIEW class_totals AS
SELECT c.run_id,
       c.class_id,
       c.representative,
       c.size,
       c.seeds_done,
       c.seed_sum,
       72 * c.seed_sum      AS completions,
       c.size * c.seed_sum  AS contribution,
       c.seeds_done = 10    AS complete
FROM classes c;

CREATE VIEW run_progress AS
SELECT r.id AS run_id,
       r.stage,
       r.counter,
       r.counter_version,
       r.redundancy,
       r.jobs_total,
       r.jobs_total - r.jobs_remaining AS jobs_done,
       r.failed_jobs,
       r.open_conflicts,
       r.finished_at IS NOT NULL AS final,
       r.s,
       r.n0,
       (SELECT sum(t.contribution) FROM class_totals t WHERE t.run_id = r.id) AS s_so_far,
       datetime(r.created_at / 1000, 'unixepoch')  AS created,
       datetime(r.finished_at / 1000, 'unixepoch') AS finished
FROM runs r;

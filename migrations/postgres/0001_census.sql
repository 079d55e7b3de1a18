-- The census's queue of record (PostgreSQL). Timestamps are Unix epoch
-- milliseconds (BIGINT), the same in both backends; the views show them as
-- timestamptz. Big numbers (seed sums, S, N0) are NUMERIC.

CREATE TABLE runs (
    id              BIGSERIAL PRIMARY KEY,
    stage           TEXT    NOT NULL,
    counter         TEXT    NOT NULL,
    counter_version TEXT    NOT NULL,
    redundancy      BIGINT  NOT NULL DEFAULT 1 CHECK (redundancy >= 1),
    jobs_total      BIGINT  NOT NULL,
    jobs_remaining  BIGINT  NOT NULL,      -- jobs not yet done; the run is final at 0 with no open conflict
    open_conflicts  BIGINT  NOT NULL DEFAULT 0,
    failed_jobs     BIGINT  NOT NULL DEFAULT 0,
    counted         BIGINT  NOT NULL DEFAULT 0,      -- sum of the counts of done jobs
    created_at      BIGINT  NOT NULL,
    finished_at     BIGINT,
    s               NUMERIC,               -- written by the transaction that records the last job
    n0              NUMERIC,
    UNIQUE (stage, counter, counter_version, redundancy)
);

CREATE TABLE classes (
    run_id          BIGINT  NOT NULL REFERENCES runs (id),
    class_id        BIGINT  NOT NULL,
    representative  TEXT    NOT NULL CHECK (length(representative) = 27),
    size            BIGINT  NOT NULL CHECK (size > 0),
    seed_sum        NUMERIC NOT NULL DEFAULT 0,
    seeds_done      BIGINT  NOT NULL DEFAULT 0 CHECK (seeds_done BETWEEN 0 AND 10),
    PRIMARY KEY (run_id, class_id)
);

CREATE TABLE jobs (
    id               BIGSERIAL PRIMARY KEY,
    run_id           BIGINT  NOT NULL REFERENCES runs (id),
    class_id         BIGINT  NOT NULL,
    seed             BIGINT  NOT NULL CHECK (seed BETWEEN 0 AND 9),
    state            TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'leased', 'done', 'failed')),
    attempt          BIGINT  NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_token      TEXT,
    lease_expires_at BIGINT,
    votes            BIGINT  NOT NULL DEFAULT 0,   -- agreeing results so far (redundancy > 1)
    count            BIGINT,                       -- the accepted count, once done
    conflict         BIGINT  NOT NULL DEFAULT 0,   -- 1 while a disagreeing result is unresolved
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    UNIQUE (run_id, class_id, seed),
    FOREIGN KEY (run_id, class_id) REFERENCES classes (run_id, class_id)
);
CREATE INDEX jobs_queue ON jobs (state, id);
CREATE INDEX jobs_lease_token ON jobs (lease_token);

-- Append-only: a result is never updated or deleted.
CREATE TABLE results (
    id              BIGSERIAL PRIMARY KEY,
    job_id          BIGINT  NOT NULL REFERENCES jobs (id),
    run_id          BIGINT  NOT NULL REFERENCES runs (id),
    attempt         BIGINT  NOT NULL,
    worker          TEXT    NOT NULL,
    count           BIGINT  NOT NULL CHECK (count >= 0),
    elapsed_ms      DOUBLE PRECISION NOT NULL,
    counter_version TEXT    NOT NULL,
    outcome         TEXT    NOT NULL CHECK (outcome IN ('accepted', 'vote', 'conflict')),
    finished_at     BIGINT  NOT NULL
);
CREATE INDEX results_job ON results (job_id, worker);
CREATE INDEX results_run_finished ON results (run_id, finished_at);

-- Per-worker tallies, kept up to date by each batch of results.
CREATE TABLE worker_stats (
    run_id      BIGINT NOT NULL REFERENCES runs (id),
    worker      TEXT   NOT NULL,
    jobs        BIGINT NOT NULL,
    completions BIGINT NOT NULL,
    last_seen   BIGINT NOT NULL,
    PRIMARY KEY (run_id, worker)
);

CREATE TABLE failures (
    id        BIGSERIAL PRIMARY KEY,
    job_id    BIGINT NOT NULL REFERENCES jobs (id),
    attempt   BIGINT NOT NULL,
    worker    TEXT   NOT NULL,
    reason    TEXT   NOT NULL,
    failed_at BIGINT NOT NULL
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
       to_timestamp(r.created_at / 1000.0)  AS created,
       to_timestamp(r.finished_at / 1000.0) AS finished
FROM runs r;

-- Results are append-only.
CREATE FUNCTION census_results_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'results are append-only';
END;
$$;
CREATE TRIGGER results_never_change BEFORE UPDATE OR DELETE ON results
FOR EACH ROW EXECUTE FUNCTION census_results_append_only();

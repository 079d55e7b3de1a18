-- Trust: credentials, fencing, votes by identity, rejected results,
-- quarantine, cancelled and prioritised runs, requeued jobs.

-- Credentials. Only the SHA-256 of a token is kept: a token is 256 random
-- bits, so a fast hash is enough and a lookup is one index probe.
CREATE TABLE api_tokens (
    id          BIGSERIAL PRIMARY KEY,
    name        TEXT   NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64),
    role        TEXT   NOT NULL CHECK (role IN ('worker', 'operator', 'reader')),
    hash        TEXT   NOT NULL UNIQUE CHECK (length(hash) = 64),
    created_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);

-- Identities whose results were rejected too often: their calls are refused.
CREATE TABLE quarantine (
    worker          TEXT   PRIMARY KEY,
    quarantined_at  BIGINT NOT NULL,
    reason          TEXT   NOT NULL
);

-- Reports that were refused because they were wrong: a count that failed
-- validation, a vote outvoted by a quorum, a job, seed or counter version
-- that is not the job's. Append-only, like results.
CREATE TABLE rejections (
    id          BIGSERIAL PRIMARY KEY,
    job_id      BIGINT  NOT NULL REFERENCES jobs (id),
    run_id      BIGINT  NOT NULL REFERENCES runs (id),
    attempt     BIGINT  NOT NULL,
    worker      TEXT    NOT NULL,
    count       NUMERIC NOT NULL,
    reason      TEXT    NOT NULL,
    rejected_at BIGINT  NOT NULL
);
CREATE INDEX rejections_worker ON rejections (worker);
CREATE TRIGGER rejections_never_change BEFORE UPDATE OR DELETE ON rejections
FOR EACH ROW EXECUTE FUNCTION census_results_append_only();

ALTER TABLE runs ADD COLUMN priority BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cancelled_at BIGINT;

-- A recount starts a new round: votes of earlier rounds no longer count.
ALTER TABLE jobs ADD COLUMN round BIGINT NOT NULL DEFAULT 0;
-- Failures since the job was last requeued; the job fails for good at the maximum.
ALTER TABLE jobs ADD COLUMN failures BIGINT NOT NULL DEFAULT 0;
-- When the current lease began: heartbeats never extend it past a maximum lifetime.
ALTER TABLE jobs ADD COLUMN lease_started_at BIGINT;
ALTER TABLE results ADD COLUMN round BIGINT NOT NULL DEFAULT 0;
CREATE INDEX jobs_lease_owner ON jobs (lease_owner) WHERE state = 'leased';
-- Leases walk one run's queue at a time, in priority order.
CREATE INDEX jobs_run_queue ON jobs (run_id, state, id);

-- Trust: credentials, fencing, votes by identity, rejected results,
-- quarantine, cancelled and prioritised runs, requeued jobs.
-- (The same tables as migrations/postgres/0002_trust.sql.)

CREATE TABLE api_tokens (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64),
    role        TEXT    NOT NULL CHECK (role IN ('worker', 'operator', 'reader')),
    hash        TEXT    NOT NULL UNIQUE CHECK (length(hash) = 64),
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);

CREATE TABLE quarantine (
    worker          TEXT    PRIMARY KEY,
    quarantined_at  INTEGER NOT NULL,
    reason          TEXT    NOT NULL
);

CREATE TABLE rejections (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      INTEGER NOT NULL REFERENCES jobs (id),
    run_id      INTEGER NOT NULL REFERENCES runs (id),
    attempt     INTEGER NOT NULL,
    worker      TEXT    NOT NULL,
    count       TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    rejected_at INTEGER NOT NULL
);
CREATE INDEX rejections_worker ON rejections (worker);
CREATE TRIGGER rejections_never_change BEFORE UPDATE ON rejections
BEGIN SELECT RAISE(ABORT, 'rejections are append-only'); END;
CREATE TRIGGER rejections_never_go BEFORE DELETE ON rejections
BEGIN SELECT RAISE(ABORT, 'rejections are append-only'); END;

ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cancelled_at INTEGER;
ALTER TABLE jobs ADD COLUMN round INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN lease_started_at INTEGER;
ALTER TABLE results ADD COLUMN round INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_lease_owner ON jobs (lease_owner) WHERE state = 'leased';
-- Leases walk one run's queue at a time, in priority order.
CREATE INDEX jobs_run_queue ON jobs (run_id, state, id);

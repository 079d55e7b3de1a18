-- Reports refused unread that name no job that exists (issue 44): kept
-- against their sender, counted with its rejections toward the
-- quarantine; append-only. Why: migrations/postgres/0017_refused_reports.sql.
-- (The same number, 0017, on SQLite and Postgres.)
CREATE TABLE refused_reports (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    worker      TEXT    NOT NULL,
    job_named   INTEGER NOT NULL,
    reason      TEXT    NOT NULL,
    refused_at  INTEGER NOT NULL
);
CREATE INDEX refused_reports_worker ON refused_reports (worker);
CREATE TRIGGER refused_reports_never_change BEFORE UPDATE ON refused_reports
BEGIN SELECT RAISE(ABORT, 'refused reports are append-only'); END;
CREATE TRIGGER refused_reports_never_go BEFORE DELETE ON refused_reports
BEGIN SELECT RAISE(ABORT, 'refused reports are append-only'); END;

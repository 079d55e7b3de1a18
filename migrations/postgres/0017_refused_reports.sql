-- Reports refused unread that name no job that exists (issue 44). An
-- identity that reported more results of leases it did not hold than it
-- honestly could has its reports refused unread, each refusal a rejection
-- against the first job of the report; a rejection names its job and run
-- (foreign keys), so a report of made-up job ids was refused but recorded
-- against nothing, and a flood of them never quarantined its sender. Such
-- a refusal is kept here instead, against its sender, and counts with its
-- rejections toward the quarantine. `job_named` is the first job id the
-- report named, as it named it: no job has it, so no foreign key.
-- Append-only, like rejections. (The same number, 0017, on SQLite and
-- Postgres.)
CREATE TABLE refused_reports (
    id          BIGSERIAL PRIMARY KEY,
    worker      TEXT   NOT NULL,
    job_named   BIGINT NOT NULL,
    reason      TEXT   NOT NULL,
    refused_at  BIGINT NOT NULL
);
CREATE INDEX refused_reports_worker ON refused_reports (worker);
CREATE TRIGGER refused_reports_never_change BEFORE UPDATE OR DELETE ON refused_reports
FOR EACH ROW EXECUTE FUNCTION census_results_append_only();

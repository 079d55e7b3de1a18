-- The jobs with an open conflict (issue 44): a job's conflict is flagged as
-- soon as distinct identities disagree on it, and the coordinator looks for
-- those that have waited long enough to count them itself
-- (`RemedyStorage::conflicts_waiting`). A partial index holds only those
-- jobs, so a look costs what is in conflict, not a scan of every job.
-- (The same number, 0016, on SQLite and Postgres.)
CREATE INDEX jobs_in_conflict ON jobs (id) WHERE conflict = 1;

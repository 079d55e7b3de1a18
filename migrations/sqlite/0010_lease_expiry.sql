-- Expired leases by their expiry (issue 21 item 2).
--
-- Every lease call looks for a run's expired leases before its pending
-- jobs. Along (run_id, state, id) that read every leased row of the run and
-- kept the few expired: with 10,000 simulated workers holding 210,000
-- leases, 95 ms a call, which starved the reports until leases expired and
-- the run stalled (BENCHMARKS.md, "The coordinator's pace"). Along this
-- index the look reads only the expired leases, oldest first.
-- (The same as migrations/postgres/0011_lease_expiry.sql.)
CREATE INDEX jobs_lease_expiry ON jobs (run_id, lease_expires_at, id) WHERE state = 'leased';

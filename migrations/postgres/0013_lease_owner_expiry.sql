-- A worker's leases by their expiry (issue 21 item 2).
--
-- Every lease call counts the caller's live leases (its cap), and every
-- heartbeat finds the caller's leases, both as `state = 'leased' AND
-- lease_owner = $1 AND lease_expires_at >= now`. Along (lease_owner) alone
-- that read an entry for every job the worker had leased since the table
-- was last vacuumed (an update that moves a job out of its lease leaves
-- its entry until then): 900-1,800 buffers a call at 1,000 workers, and a
-- worker of a 10^7-job run leases millions. Along this index the read
-- starts at the present: only leases not yet expired, live or left
-- behind by the jobs leased within the last lease TTL.
-- (The same as migrations/sqlite/0012_lease_owner_expiry.sql.)
CREATE INDEX jobs_lease_owner_expiry ON jobs (lease_owner, lease_expires_at) WHERE state = 'leased';
DROP INDEX jobs_lease_owner;

-- Each result carries its job's expected cost (issue 21 item 3).
--
-- Progress weighs the newest results by their jobs' costs (the speed in
-- cost a second, the ETA). Read from the jobs, that was a lookup in jobs
-- for each of up to 10,000 results a poll: 18-20 ms of the server's time
-- at 10^7 jobs, and most of a status poll while a run counts. The cost is
-- copied here when the result is recorded; NULL for results recorded
-- before, whose cost is still read from their job.
-- (The same as migrations/postgres/0012_result_costs.sql.)
ALTER TABLE results ADD COLUMN cost BIGINT;

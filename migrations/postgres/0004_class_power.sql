-- How a class's count sum enters the answer (census_math::census::Census::
-- class_power): a class contributes weight x (count sum)^class_power; 1 for
-- the 9x9 count and the essentially different grids, 2 for box shapes
-- (weight x F(S)^2). The audit views show each class's contribution so.

ALTER TABLE runs ADD COLUMN class_power BIGINT NOT NULL DEFAULT 1 CHECK (class_power IN (1, 2));

DROP VIEW run_progress;
DROP VIEW class_totals;
DROP VIEW group_totals;

CREATE VIEW group_totals AS
SELECT c.run_id,
       r.census,
       c.class_id,
       c.label,
       c.weight,
       c.jobs_total,
       c.jobs_done,
       c.count_sum,
       CASE WHEN r.class_power = 2 THEN c.weight * c.count_sum * c.count_sum
            ELSE c.weight * c.count_sum END AS contribution,
       c.jobs_done = c.jobs_total  AS complete
FROM classes c JOIN runs r ON r.id = c.run_id;

CREATE VIEW class_totals AS
SELECT g.run_id,
       g.class_id,
       g.label        AS representative,
       g.weight       AS size,
       g.jobs_done    AS seeds_done,
       g.count_sum    AS seed_sum,
       72 * g.count_sum AS completions,
       g.contribution,
       g.complete
FROM group_totals g WHERE g.census LIKE 'sudoku %';

CREATE VIEW run_progress AS
SELECT r.id AS run_id,
       r.census,
       r.counter_version,
       r.redundancy,
       r.jobs_total,
       r.jobs_total - r.jobs_remaining AS jobs_done,
       r.failed_jobs,
       r.open_conflicts,
       r.finished_at IS NOT NULL AS final,
       r.weighted_sum,
       r.answer,
       (SELECT sum(g.contribution) FROM group_totals g WHERE g.run_id = r.id) AS weighted_sum_so_far,
       to_timestamp(r.created_at / 1000.0)  AS created,
       to_timestamp(r.finished_at / 1000.0) AS finished
FROM runs r;

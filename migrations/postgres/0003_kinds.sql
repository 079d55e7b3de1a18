-- Any kind of census (issue 9). A run is a census description
-- (census_math::census::Census, e.g. 'essentially-different'); its classes
-- are the census's groups (a label and an exact weight); its jobs carry the
-- text key a worker counts from. The store knows nothing more of what is
-- counted: the answer and its terms come from the census's fold in Rust.
-- Counts, sums and weights are NUMERIC: a job's count may exceed 64 bits.
-- 9x9 runs of earlier versions become 'sudoku stage=S counter=C' runs; their
-- jobs' keys are 'BAND SEED'. (The same schema as migrations/sqlite/0003_kinds.sql.)

DROP VIEW run_progress;
DROP VIEW class_totals;

ALTER TABLE runs ADD COLUMN census TEXT;
UPDATE runs SET census = 'sudoku stage=' || stage || ' counter=' || counter;
ALTER TABLE runs ALTER COLUMN census SET NOT NULL;
ALTER TABLE runs ADD CHECK (length(census) BETWEEN 1 AND 200);
ALTER TABLE runs DROP COLUMN stage, DROP COLUMN counter;
ALTER TABLE runs ADD UNIQUE (census, counter_version, redundancy);
ALTER TABLE runs RENAME COLUMN s TO weighted_sum;
ALTER TABLE runs RENAME COLUMN n0 TO answer;
ALTER TABLE runs ALTER COLUMN counted TYPE NUMERIC;
-- How a class's count sum enters the answer (Census::class_power): a class
-- contributes weight x (count sum)^class_power; 2 for box shapes.
ALTER TABLE runs ADD COLUMN class_power BIGINT NOT NULL DEFAULT 1 CHECK (class_power IN (1, 2));

ALTER TABLE classes RENAME COLUMN representative TO label;
ALTER TABLE classes DROP CONSTRAINT classes_representative_check;
ALTER TABLE classes ADD CHECK (length(label) BETWEEN 1 AND 200);
ALTER TABLE classes RENAME COLUMN size TO weight;
ALTER TABLE classes ALTER COLUMN weight TYPE NUMERIC;
ALTER TABLE classes RENAME COLUMN seed_sum TO count_sum;
ALTER TABLE classes RENAME COLUMN seeds_done TO jobs_done;
ALTER TABLE classes DROP CONSTRAINT classes_seeds_done_check;
ALTER TABLE classes ADD COLUMN jobs_total BIGINT NOT NULL DEFAULT 10;
ALTER TABLE classes ALTER COLUMN jobs_total DROP DEFAULT;
ALTER TABLE classes ADD CHECK (jobs_total > 0 AND jobs_done BETWEEN 0 AND jobs_total);

ALTER TABLE jobs ADD COLUMN key TEXT;
-- The seeds in the order of census_math::SEEDS (the old jobs.seed index).
UPDATE jobs j SET key = c.label || ' ' || (ARRAY['235/689', '236/589', '238/569', '239/568', '256/389', '258/369',
                                                  '259/368', '268/359', '269/358', '289/356'])[j.seed + 1]
FROM classes c WHERE c.run_id = j.run_id AND c.class_id = j.class_id;
ALTER TABLE jobs ALTER COLUMN key SET NOT NULL;
ALTER TABLE jobs ADD CHECK (length(key) BETWEEN 1 AND 200);
ALTER TABLE jobs DROP COLUMN seed;
ALTER TABLE jobs ADD UNIQUE (run_id, key);
ALTER TABLE jobs ALTER COLUMN count TYPE NUMERIC;
ALTER TABLE results ALTER COLUMN count TYPE NUMERIC;
ALTER TABLE worker_stats ALTER COLUMN completions TYPE NUMERIC;

-- Any census: one row per class (group) of a run.
CREATE VIEW group_totals AS
SELECT c.run_id,
       r.census,
       c.class_id,
       c.label,
       c.weight,
       c.jobs_total,
       c.jobs_done,
       c.count_sum,
       -- What the class adds to the answer: weight x (count sum)^class_power.
       CASE WHEN r.class_power = 2 THEN c.weight * c.count_sum * c.count_sum
            ELSE c.weight * c.count_sum END AS contribution,
       c.jobs_done = c.jobs_total  AS complete
FROM classes c JOIN runs r ON r.id = c.run_id;

-- The 9x9 audit, with the columns of earlier versions: a class's label is
-- its representative band, its weight the class size, its jobs the 10 seeds.
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

DROP INDEX runs_by_created;
DROP INDEX runs_by_parent;
ALTER TABLE runs DROP COLUMN parent_run_id;

-- A run started again from another (the console's Re-run, `metadata.rerunOf`) records that run,
-- so each links to the other.
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
CREATE INDEX runs_by_parent ON runs (parent_run_id);
-- The run list filtered by creation date reads only the runs of those days.
CREATE INDEX runs_by_created ON runs (created_at);

-- Runs belong to the principal (the name of the API key) that started them: callers see their
-- own runs, operators every run. Runs stored before have no owner: only operators see them.
ALTER TABLE runs ADD COLUMN owner TEXT;
CREATE INDEX runs_by_owner ON runs (owner, run_id);
-- Who decided, as authenticated (next to `operator`, the operator's self-description).
ALTER TABLE hitl_decisions ADD COLUMN principal TEXT;

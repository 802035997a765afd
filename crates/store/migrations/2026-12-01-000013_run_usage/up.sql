-- A run's model usage in all (calls, tokens, cost, models: the `usage` object of its frames
-- added up, as JSON), copied from its frames for run lists as the replan counters are. NULL for
-- runs stored before usage was recorded.
ALTER TABLE runs ADD COLUMN usage TEXT;

-- Capability post-conditions: each node's latest results (JSON array of GoalConditionResult),
-- and the replans their failures asked for.
ALTER TABLE plan_nodes ADD COLUMN post_condition_results TEXT;
ALTER TABLE runs ADD COLUMN post_condition_replans INTEGER NOT NULL DEFAULT 0;

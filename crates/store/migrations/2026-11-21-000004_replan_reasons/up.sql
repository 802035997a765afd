-- Replans of a run by what asked for them, next to `replans` (all of them) and
-- `goal_condition_replans`: REPLAN signals of capabilities, runtime policies, operators.
ALTER TABLE runs ADD COLUMN signal_replans INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN policy_replans INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN operator_replans INTEGER NOT NULL DEFAULT 0;

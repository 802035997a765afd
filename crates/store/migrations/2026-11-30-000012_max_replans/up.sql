-- The replan cap a run was started with, copied from its `start` frame for run lists (as the
-- replan counters are). NULL for runs stored before `start` recorded the caps: those are read
-- from their envelope (`flexrun_core::run::legacy`).
ALTER TABLE runs ADD COLUMN max_replans INTEGER;

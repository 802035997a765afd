-- A run's nodes — each plan version's, with status, output, error, times and post-condition
-- results — are on its frames (`plan_generated`, `node_start`, `node_complete`, `node_error`, …),
-- and every reader folds them from the log (`flexrun_core::run::nodes`) in the pass that folds
-- the run's state. The table repeated every node's output and cost a run most of its statements.
DROP TABLE plan_nodes;

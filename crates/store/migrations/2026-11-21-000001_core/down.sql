DROP TABLE run_events;
DROP TABLE run_outputs;
DROP TABLE plan_nodes;
DROP TABLE plan_versions;
DROP TABLE runs;
DROP TABLE capabilities;

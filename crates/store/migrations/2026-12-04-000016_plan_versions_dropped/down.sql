-- The plans themselves stay on the log's `plan_generated` frames: the versions made again here
-- hold an empty plan, dated by their run's creation.
CREATE TABLE plan_versions (
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    version INTEGER NOT NULL,
    plan TEXT NOT NULL,
    replan_trigger TEXT,
    created_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, version)
);
INSERT INTO plan_versions (run_id, version, plan, replan_trigger, created_at)
SELECT n.run_id, n.plan_version, '{}', NULL, r.created_at
FROM (SELECT DISTINCT run_id, plan_version FROM plan_nodes) n JOIN runs r ON r.run_id = n.run_id;
CREATE TABLE plan_nodes_old (
    run_id TEXT NOT NULL,
    plan_version INTEGER NOT NULL,
    node_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    capability_id TEXT NOT NULL,
    status TEXT NOT NULL,
    output TEXT,
    error TEXT,
    started_at TIMESTAMP,
    completed_at TIMESTAMP,
    post_condition_results TEXT,
    PRIMARY KEY (run_id, plan_version, node_id),
    FOREIGN KEY (run_id, plan_version) REFERENCES plan_versions (run_id, version) ON DELETE CASCADE
);
INSERT INTO plan_nodes_old SELECT * FROM plan_nodes;
DROP TABLE plan_nodes;
ALTER TABLE plan_nodes_old RENAME TO plan_nodes;

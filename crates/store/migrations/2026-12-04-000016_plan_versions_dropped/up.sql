-- Every plan version is on its `plan_generated` frame, and the run document reads the versions
-- from the log: nothing read `plan_versions`, and every plan was written twice. The table goes.
-- `plan_nodes` pointed at it (its run and version), so it is made again pointing at its run, its
-- rows kept, and still goes when its run does.
CREATE TABLE plan_nodes_new (
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
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
    PRIMARY KEY (run_id, plan_version, node_id)
);
INSERT INTO plan_nodes_new (run_id, plan_version, node_id, position, capability_id, status, output, error,
                            started_at, completed_at, post_condition_results)
SELECT run_id, plan_version, node_id, position, capability_id, status, output, error,
       started_at, completed_at, post_condition_results
FROM plan_nodes;
DROP TABLE plan_nodes;
DROP TABLE plan_versions;
ALTER TABLE plan_nodes_new RENAME TO plan_nodes;

-- The table is made again empty: the nodes stay on the runs' frames, from which this build reads
-- them; a build that reads the table shows no nodes for the runs stored meanwhile.
CREATE TABLE plan_nodes (
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

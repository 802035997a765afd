-- flexrun core schema. Portable between SQLite and PostgreSQL: JSON is stored as TEXT, times as
-- TIMESTAMP (UTC), no backend-specific types.

CREATE TABLE capabilities (
    capability_id TEXT PRIMARY KEY NOT NULL,
    version TEXT NOT NULL,
    agent_type TEXT NOT NULL,
    kind TEXT NOT NULL,
    -- the registration as submitted (JSON)
    registration TEXT NOT NULL,
    -- "api" or "file:<path>"
    source TEXT NOT NULL,
    registered_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL
);

CREATE TABLE runs (
    run_id TEXT PRIMARY KEY NOT NULL,
    status TEXT NOT NULL,
    objective TEXT NOT NULL,
    -- the task envelope as posted (JSON)
    envelope TEXT NOT NULL,
    thread_id TEXT,
    correlation_id TEXT NOT NULL,
    -- current plan version; 0 before the first plan
    plan_version INTEGER NOT NULL,
    -- planner calls made so far (the `attempt` of plan_requested frames)
    planner_attempts INTEGER NOT NULL,
    goal_condition_replans INTEGER NOT NULL,
    -- all replans, whatever the reason
    replans INTEGER NOT NULL,
    -- final output (JSON), set when the run completes
    result TEXT,
    -- failure (JSON {code, message, ...}), set when the run fails
    error TEXT,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
CREATE INDEX runs_by_status ON runs (status, created_at);

CREATE TABLE plan_versions (
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    version INTEGER NOT NULL,
    -- {nodes, edges, metadata} (JSON)
    plan TEXT NOT NULL,
    -- why this version exists: null for the first plan, else {reason, ...} (JSON)
    replan_trigger TEXT,
    created_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, version)
);

CREATE TABLE plan_nodes (
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
    PRIMARY KEY (run_id, plan_version, node_id),
    FOREIGN KEY (run_id, plan_version) REFERENCES plan_versions (run_id, version) ON DELETE CASCADE
);

-- One row per goal-condition evaluation: the composed output and every condition's result.
CREATE TABLE run_outputs (
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    plan_version INTEGER NOT NULL,
    -- "satisfied" or "unsatisfied"
    status TEXT NOT NULL,
    output TEXT NOT NULL,
    goal_condition_results TEXT NOT NULL,
    recorded_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, plan_version)
);

-- The per-run event log: every frame, in order, before it is sent.
CREATE TABLE run_events (
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    event_type TEXT NOT NULL,
    -- the frame exactly as sent (JSON)
    frame TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, seq)
);

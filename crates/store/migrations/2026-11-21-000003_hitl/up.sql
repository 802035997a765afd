-- Operator requests of runs (plan and completion approvals, human tasks) and the decisions that
-- answered them. A run has at most one pending request.
CREATE TABLE hitl_requests (
    request_id TEXT PRIMARY KEY NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    -- "approval" or "human_task"
    kind TEXT NOT NULL,
    -- what is asked about: "plan", "completion" or "node"
    subject TEXT NOT NULL,
    plan_version INTEGER NOT NULL,
    -- the human node, for a human task
    node_id TEXT,
    question TEXT NOT NULL,
    -- the request as its hitl_request frame (or a human node's node_start assignment) shows it (JSON)
    details TEXT NOT NULL,
    -- "pending", then "resolved" (a decision answered it), "superseded" (an operator replan
    -- discarded it) or "cancelled" (the run was cancelled)
    status TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    closed_at TIMESTAMP
);
CREATE INDEX hitl_requests_by_run ON hitl_requests (run_id, created_at);
CREATE INDEX hitl_requests_by_status ON hitl_requests (status, kind, created_at);

-- One decision per request: the primary key is what lets only one of two racing operators win.
CREATE TABLE hitl_decisions (
    request_id TEXT PRIMARY KEY NOT NULL REFERENCES hitl_requests (request_id) ON DELETE CASCADE,
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    -- "approved", "rejected", "submitted" (a human task's output) or "declined"
    decision TEXT NOT NULL,
    -- who decided, as the operator described themselves ({id?, displayName?, email?}, JSON)
    operator TEXT,
    note TEXT,
    -- the operator's feedback for the planner (a rejection that asks for another plan)
    feedback TEXT,
    -- what was submitted: a human task's output, or its decline reason (JSON)
    payload TEXT,
    decided_at TIMESTAMP NOT NULL
);
CREATE INDEX hitl_decisions_by_run ON hitl_decisions (run_id, decided_at);

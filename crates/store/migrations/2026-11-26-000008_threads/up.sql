-- Threads of the LangGraph-compatible API: a group of runs (`runs.thread_id`) and what the
-- caller that made it attached to it.
CREATE TABLE threads (
    thread_id TEXT PRIMARY KEY NOT NULL,
    owner TEXT,
    metadata TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL
);
CREATE INDEX threads_by_owner ON threads (owner, updated_at);
-- A thread's runs, newest first.
CREATE INDEX runs_by_thread ON runs (thread_id, created_at);

DROP INDEX runs_by_lease_owner;
CREATE INDEX runs_by_lease_owner ON runs (lease_owner);
DROP INDEX runs_by_thread;
CREATE INDEX runs_by_thread ON runs (thread_id, created_at);
DROP INDEX runs_by_parent;
CREATE INDEX runs_by_parent ON runs (parent_run_id);

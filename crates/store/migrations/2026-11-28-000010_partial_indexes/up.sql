-- Indexes of columns most runs leave empty hold only the runs that have a value: a run with no
-- parent, no LangGraph thread and no lease (every run on SQLite, every idle run on PostgreSQL)
-- then writes no entry into them, and a commit of new runs dirties three index pages fewer. The
-- lookups (`parent_run_id = ?`, `thread_id = ?`, `lease_owner = ?`) imply the condition, so
-- SQLite and PostgreSQL still use them.
DROP INDEX runs_by_parent;
CREATE INDEX runs_by_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
DROP INDEX runs_by_thread;
CREATE INDEX runs_by_thread ON runs (thread_id, created_at) WHERE thread_id IS NOT NULL;
DROP INDEX runs_by_lease_owner;
CREATE INDEX runs_by_lease_owner ON runs (lease_owner) WHERE lease_owner IS NOT NULL;

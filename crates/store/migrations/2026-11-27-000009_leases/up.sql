-- Run leases (PostgreSQL, several nodes): which node drives a run, the fencing token every write
-- of the run checks, when the lease runs out (by the database's clock), and how often a node
-- died while driving the run. A run no node drives (new, waiting for an operator, ended, handed
-- back) has no lease_owner. SQLite (one node) leaves them at their defaults.
ALTER TABLE runs ADD COLUMN lease_owner TEXT;
ALTER TABLE runs ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN lease_expires_at TIMESTAMP;
ALTER TABLE runs ADD COLUMN crash_attempts INTEGER NOT NULL DEFAULT 0;
-- A node's renewal and hand-back find its runs by owner.
CREATE INDEX runs_by_lease_owner ON runs (lease_owner);

DROP INDEX runs_by_idempotency_key;
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (idempotency_key);

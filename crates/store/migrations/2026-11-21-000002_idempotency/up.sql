-- Idempotency keys of run.stream. The key is stored scoped to the caller that sent it
-- ("<caller>:<key>"), with the SHA-256 of the request body it came with: the same key with the
-- same body finds the run again, with another body it is refused.
ALTER TABLE runs ADD COLUMN idempotency_key TEXT;
ALTER TABLE runs ADD COLUMN request_hash TEXT;
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (idempotency_key);

DROP INDEX runs_by_idempotency_key;
ALTER TABLE runs DROP COLUMN request_hash;
ALTER TABLE runs DROP COLUMN idempotency_key;

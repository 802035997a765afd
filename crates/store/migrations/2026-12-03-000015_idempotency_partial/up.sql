-- The idempotency key's unique index holds only the runs that have a key (as the indexes of
-- 000010 do): a run started without one writes no entry, and a commit of new runs dirties an index
-- page fewer. Keys stay unique; the lookup (`idempotency_key = ?`) implies the condition, so
-- SQLite and PostgreSQL still use the index.
DROP INDEX runs_by_idempotency_key;
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (idempotency_key) WHERE idempotency_key IS NOT NULL;

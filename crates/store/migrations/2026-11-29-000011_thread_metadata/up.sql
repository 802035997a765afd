-- Each thread's metadata, a row per key, so a search by metadata finds every matching thread by
-- an index instead of reading threads' metadata one by one. `value` is the key's value as
-- canonical JSON text (object keys sorted). Filled for threads made before it when flexrun
-- starts (`store::threads::index_unindexed`).
CREATE TABLE thread_metadata (
    thread_id TEXT NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (thread_id, key)
);
CREATE INDEX thread_metadata_by_value ON thread_metadata (key, value);

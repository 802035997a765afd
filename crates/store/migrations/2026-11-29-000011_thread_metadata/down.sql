DROP TABLE thread_metadata;

DROP INDEX runs_by_thread;
DROP INDEX threads_by_owner;
DROP TABLE threads;

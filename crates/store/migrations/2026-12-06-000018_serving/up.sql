-- Whether a process serves this database now (SQLite: one process at a time). `serve` sets it on
-- starting and clears it when it stops cleanly; a process that starts and finds it still set knows
-- the one before it died while serving, and counts a crash attempt for each run that was active
-- then (`runs.crash_attempts`, as a node taking over a lease that was not handed back does on
-- PostgreSQL). One row at most.
CREATE TABLE serving (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    held BOOLEAN NOT NULL
);

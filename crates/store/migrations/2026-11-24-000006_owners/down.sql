DROP INDEX runs_by_owner;
ALTER TABLE runs DROP COLUMN owner;
ALTER TABLE hitl_decisions DROP COLUMN principal;

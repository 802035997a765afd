ALTER TABLE runs DROP COLUMN max_replans;

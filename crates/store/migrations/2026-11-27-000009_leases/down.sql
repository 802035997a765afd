DROP INDEX runs_by_lease_owner;
ALTER TABLE runs DROP COLUMN crash_attempts;
ALTER TABLE runs DROP COLUMN lease_expires_at;
ALTER TABLE runs DROP COLUMN lease_epoch;
ALTER TABLE runs DROP COLUMN lease_owner;

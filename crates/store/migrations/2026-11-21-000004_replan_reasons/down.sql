ALTER TABLE runs DROP COLUMN operator_replans;
ALTER TABLE runs DROP COLUMN policy_replans;
ALTER TABLE runs DROP COLUMN signal_replans;

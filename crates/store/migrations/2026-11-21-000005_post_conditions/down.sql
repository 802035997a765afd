ALTER TABLE runs DROP COLUMN post_condition_replans;
ALTER TABLE plan_nodes DROP COLUMN post_condition_results;

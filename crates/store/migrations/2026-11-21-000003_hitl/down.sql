DROP TABLE hitl_decisions;
DROP TABLE hitl_requests;

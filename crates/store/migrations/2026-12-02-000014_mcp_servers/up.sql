-- Registered MCP servers (their tools become capabilities): the registration as submitted, which
-- may carry header values (credentials); never returned by the API. `tools` is the server's tool
-- list as last read (JSON, `tools/list`'s items), offered at start before the server answers, so
-- that runs resumed after a restart find their tools; NULL until it was first read.
CREATE TABLE mcp_servers (
    server_id TEXT PRIMARY KEY NOT NULL,
    registration TEXT NOT NULL,
    source TEXT NOT NULL,
    registered_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL,
    tools TEXT
);

-- Registered MCP servers (their tools become capabilities): the registration as submitted, which
-- may carry header values (credentials); never returned by the API.
CREATE TABLE mcp_servers (
    server_id TEXT PRIMARY KEY NOT NULL,
    registration TEXT NOT NULL,
    source TEXT NOT NULL,
    registered_at TIMESTAMP NOT NULL,
    updated_at TIMESTAMP NOT NULL
);

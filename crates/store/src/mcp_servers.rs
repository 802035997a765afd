//! The `mcp_servers` table: registered MCP servers, kept so that a restarted node offers their
//! tools again. A registration may hold header values (credentials): it is read only to connect.

use chrono::NaiveDateTime;
use diesel::prelude::*;

use super::schema::mcp_servers;
use super::{DbConn, StoreError};

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = mcp_servers)]
pub struct McpServerRow {
    pub server_id: String,
    pub registration: String,
    pub source: String,
    pub registered_at: NaiveDateTime,
    pub updated_at: NaiveDateTime,
    /// The tools as last listed (JSON array), if they were.
    pub tools: Option<String>,
}

/// Inserts a registration, or replaces one with the same id (keeping its first registration time;
/// the tools listed under the old one are forgotten).
pub fn save(conn: &mut DbConn, row: McpServerRow) -> Result<(), StoreError> {
    super::on_backend!(conn, |c| diesel::insert_into(mcp_servers::table)
        .values(&row)
        .on_conflict(mcp_servers::server_id)
        .do_update()
        .set((
            mcp_servers::registration.eq(&row.registration),
            mcp_servers::source.eq(&row.source),
            mcp_servers::updated_at.eq(row.updated_at),
            mcp_servers::tools.eq(&row.tools),
        ))
        .execute(c))?;
    Ok(())
}

pub fn all(conn: &mut DbConn) -> Result<Vec<McpServerRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| mcp_servers::table
        .order(mcp_servers::server_id)
        .select(McpServerRow::as_select())
        .load(c))?)
}

/// Records the tools `server_id` listed (a JSON array).
pub fn set_tools(conn: &mut DbConn, server_id: &str, tools: &str) -> Result<(), StoreError> {
    super::on_backend!(conn, |c| diesel::update(mcp_servers::table.find(server_id))
        .set(mcp_servers::tools.eq(tools))
        .execute(c))?;
    Ok(())
}

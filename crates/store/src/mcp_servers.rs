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
}

/// Inserts or replaces a registration, keeping the first registration time.
pub fn save(conn: &mut DbConn, mut row: McpServerRow) -> Result<(), StoreError> {
    let first: Option<NaiveDateTime> = super::on_backend!(conn, |c| mcp_servers::table
        .find(&row.server_id)
        .select(mcp_servers::registered_at)
        .first(c))
    .optional()?;
    if let Some(first) = first {
        row.registered_at = first;
        super::on_backend!(conn, |c| diesel::delete(mcp_servers::table.find(&row.server_id)).execute(c))?;
    }
    super::on_backend!(conn, |c| diesel::insert_into(mcp_servers::table).values(&row).execute(c))?;
    Ok(())
}

pub fn all(conn: &mut DbConn) -> Result<Vec<McpServerRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| mcp_servers::table
        .order(mcp_servers::server_id)
        .select(McpServerRow::as_select())
        .load(c))?)
}

//! The `capabilities` table.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use flexrun_core::capability::{CapabilityKind, ExecutorType};

use super::schema::capabilities;
use super::{DbConn, StoreError};

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = capabilities)]
pub struct CapabilityRow {
    pub capability_id: String,
    pub version: String,
    pub agent_type: ExecutorType,
    pub kind: CapabilityKind,
    pub registration: String,
    pub source: String,
    pub registered_at: NaiveDateTime,
    pub updated_at: NaiveDateTime,
}

/// Inserts or replaces a registration, keeping the first registration time.
pub fn save(conn: &mut DbConn, mut row: CapabilityRow) -> Result<(), StoreError> {
    let first: Option<NaiveDateTime> = super::on_backend!(conn, |c| capabilities::table
        .find(&row.capability_id)
        .select(capabilities::registered_at)
        .get_result(c))
    .optional()?;
    if let Some(first) = first {
        row.registered_at = first;
        super::on_backend!(conn, |c| diesel::delete(capabilities::table.find(&row.capability_id)).execute(c))?;
    }
    super::on_backend!(conn, |c| diesel::insert_into(capabilities::table).values(&row).execute(c))?;
    Ok(())
}

/// Deletes a registration; whether there was one.
pub fn remove(conn: &mut DbConn, capability_id: &str) -> Result<bool, StoreError> {
    let deleted = super::on_backend!(conn, |c| diesel::delete(capabilities::table.find(capability_id)).execute(c))?;
    Ok(deleted > 0)
}

pub fn all(conn: &mut DbConn) -> Result<Vec<CapabilityRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| capabilities::table
        .order(capabilities::capability_id)
        .select(CapabilityRow::as_select())
        .load(c))?)
}

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

/// How many registrations are stored and when the newest was written: it changes with every
/// registration written or deleted (each write sets `updated_at` to its time), so a node compares
/// it with the summary of the rows it last read to tell, without reading them, whether to read
/// them again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub count: i64,
    pub newest: Option<NaiveDateTime>,
}

impl Summary {
    /// The summary of `rows`, as [`summary`] reads it for the same rows.
    pub fn of(rows: &[CapabilityRow]) -> Self {
        Self {
            count: i64::try_from(rows.len()).unwrap_or(i64::MAX),
            newest: rows.iter().map(|row| row.updated_at).max(),
        }
    }
}

/// The [`Summary`] of the stored registrations.
pub fn summary(conn: &mut DbConn) -> Result<Summary, StoreError> {
    use diesel::dsl::{count_star, max};
    let (count, newest) = super::on_backend!(conn, |c| capabilities::table
        .select((count_star(), max(capabilities::updated_at)))
        .get_result::<(i64, Option<NaiveDateTime>)>(c))?;
    Ok(Summary { count, newest })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Store, now};

    fn row(id: &str, at: NaiveDateTime) -> CapabilityRow {
        CapabilityRow {
            capability_id: id.into(),
            version: "1".into(),
            agent_type: ExecutorType::Ai,
            kind: CapabilityKind::Execution,
            registration: "{}".into(),
            source: "api".into(),
            registered_at: at,
            updated_at: at,
        }
    }

    /// The summary read from the database is the summary of the rows read, and it moves with
    /// every registration written or deleted.
    #[tokio::test]
    async fn the_summary_follows_every_write_and_delete() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}", dir.path().join("t.db").display())).unwrap();
        let read = || store.read(|conn| Ok((summary(conn)?, Summary::of(&all(conn)?))));
        let (empty, of_rows) = read().await.unwrap();
        assert_eq!(empty, Summary { count: 0, newest: None });
        assert_eq!(empty, of_rows);
        let first = now();
        store.write(move |conn| save(conn, row("a", first))).await.unwrap();
        store.write(move |conn| save(conn, row("b", first))).await.unwrap();
        let (two, of_rows) = read().await.unwrap();
        assert_eq!((two, of_rows), (Summary { count: 2, newest: Some(first) }, two));
        let later = first + chrono::Duration::milliseconds(5);
        store.write(move |conn| save(conn, row("a", later))).await.unwrap();
        let (replaced, of_rows) = read().await.unwrap();
        assert_eq!((replaced, of_rows), (Summary { count: 2, newest: Some(later) }, replaced));
        assert!(store.write(|conn| remove(conn, "b")).await.unwrap());
        let (removed, of_rows) = read().await.unwrap();
        assert_eq!((removed, of_rows), (Summary { count: 1, newest: Some(later) }, removed));
    }
}

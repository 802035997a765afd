//! A prepared-statement cache keyed by call site: statements whose SQL text never varies, each
//! prepared once per connection and found again in diesel's statement cache without building
//! their SQL.
//!
//! diesel keys its statement cache by a statement's SQL text unless the statement's type names
//! it, and it never caches an `UPDATE` or an upsert, because a changeset of `Option`s changes the
//! SQL from call to call. Without help each update would be parsed by SQLite again on every call
//! and each insert would have its SQL built just to look it up. The statements flexrun makes per
//! frame and per node have a fixed shape: `prepared!` wraps one in a [`Prepared`] whose marker
//! type, declared at the call site, is its cache key. Updates and upserts are written with
//! [`update`] and [`upsert`], which build the same SQL as diesel without marking it uncacheable.
//!
//! Only use it where the SQL cannot vary: no `Option<Eq<…>>` changesets (`col.eq(option)` is
//! fine: it binds NULL), no `eq_any`, and an insert only of a row type declared
//! `treat_none_as_default_value = false` (diesel otherwise leaves a `None` column out of the SQL;
//! with it, `None` binds NULL, which a nullable column without a default gets anyway). Nor inside
//! a generic function whose type parameters shape the statement (say, a helper taking the
//! changeset): the marker declared in its body is one type for every instantiation, so two
//! statements would share one cache entry. That is why the run row's updates in `runs.rs` each
//! write their own `prepared!` rather than sharing a helper. Debug builds check all this on every
//! execution and panic if a call site produces a second SQL text, or wraps a statement diesel
//! would not cache anyway.

use std::any::TypeId;
use std::marker::PhantomData;

use diesel::backend::Backend;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::{AsChangeset, QueryResult, Table};

/// A statement keyed in the statement cache by its call site's marker type `K`; see `prepared!`.
#[derive(Debug, Clone, Copy)]
pub struct Prepared<K, Q> {
    site: PhantomData<K>,
    query: Q,
}

/// Wraps `query` as the statement of call site `K`; use `prepared!`, which declares `K`.
pub fn prepared_at<K, Q>(query: Q) -> Prepared<K, Q> {
    Prepared { site: PhantomData, query }
}

/// `prepared!(statement)`: the statement as a [`Prepared`] keyed by this call site.
macro_rules! prepared {
    ($query:expr $(,)?) => {{
        /// This call site, as the statement cache's key for the statement it builds.
        enum Site {}
        $crate::prepared::prepared_at::<Site, _>($query)
    }};
}
pub(crate) use prepared;

impl<K: 'static, Q, DB> QueryFragment<DB> for Prepared<K, Q>
where
    DB: Backend + 'static,
    DB::QueryBuilder: Default,
    Q: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        #[cfg(debug_assertions)]
        checks::one_sql_text_and_cacheable::<K, Q, DB>(&self.query, out.backend())?;
        self.query.walk_ast(out)
    }

    /// diesel asks this of every statement it runs, walking the whole statement to find out. On
    /// SQLite a `prepared!` statement is cacheable by construction (debug builds check it on
    /// every execution), so the walk is skipped; on PostgreSQL diesel's answer stands (it caches
    /// no insert, see `checks`).
    fn is_safe_to_cache_prepared(&self, backend: &DB) -> QueryResult<bool> {
        if TypeId::of::<DB>() == TypeId::of::<diesel::sqlite::Sqlite>() {
            return Ok(true);
        }
        self.query.is_safe_to_cache_prepared(backend)
    }
}

/// The call site's marker: one call site, one SQL text.
impl<K: 'static, Q> QueryId for Prepared<K, Q> {
    type QueryId = K;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<K, Q, C> diesel::RunQueryDsl<C> for Prepared<K, Q> {}

/// `UPDATE <table> SET <values> WHERE <predicate>`, as diesel writes it.
#[derive(Debug, Clone, Copy)]
pub struct Update<F, V, P> {
    from: F,
    values: V,
    predicate: P,
}

/// An [`Update`] of the rows of `table` that match `predicate`.
pub fn update<T, V, P>(table: T, values: V, predicate: P) -> Update<T::FromClause, V::Changeset, P>
where
    T: Table,
    V: AsChangeset<Target = T>,
{
    Update { from: table.from_clause(), values: values.as_changeset(), predicate }
}

impl<F, V, P, DB> QueryFragment<DB> for Update<F, V, P>
where
    DB: Backend,
    F: QueryFragment<DB>,
    V: QueryFragment<DB>,
    P: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql("UPDATE ");
        self.from.walk_ast(out.reborrow())?;
        out.push_sql(" SET ");
        self.values.walk_ast(out.reborrow())?;
        out.push_sql(" WHERE ");
        self.predicate.walk_ast(out)
    }
}

/// `<insert> ON CONFLICT (<key>) DO UPDATE SET <values>`: an insert that replaces the columns
/// in `values` of the row already stored under the same `key` (SQLite and PostgreSQL alike).
#[derive(Debug, Clone, Copy)]
pub struct Upsert<I, V> {
    insert: I,
    key: &'static [&'static str],
    values: V,
}

/// An [`Upsert`]; `key` names the columns of the unique index the conflict is on.
pub fn upsert<I, V: AsChangeset>(insert: I, key: &'static [&'static str], values: V) -> Upsert<I, V::Changeset> {
    Upsert { insert, key, values: values.as_changeset() }
}

impl<I, V, DB> QueryFragment<DB> for Upsert<I, V>
where
    DB: Backend,
    I: QueryFragment<DB>,
    V: QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.insert.walk_ast(out.reborrow())?;
        out.push_sql(" ON CONFLICT (");
        for (i, column) in self.key.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            out.push_identifier(column)?;
        }
        out.push_sql(") DO UPDATE SET ");
        self.values.walk_ast(out)
    }
}

#[cfg(debug_assertions)]
mod checks {
    use std::any::TypeId;
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex, PoisonError};

    use diesel::QueryResult;
    use diesel::backend::Backend;
    use diesel::query_builder::{QueryBuilder, QueryFragment};

    /// Panics if call site `K` has produced another SQL text on backend `DB` before (the cache
    /// would run the first text's prepared statement with this one's binds), or if diesel would
    /// not cache its statement at all on SQLite. (On PostgreSQL diesel caches no insert, since
    /// any of its values may be `DEFAULT`; PostgreSQL then plans it as an unnamed statement.)
    pub(super) fn one_sql_text_and_cacheable<K: 'static, Q, DB>(query: &Q, backend: &DB) -> QueryResult<()>
    where
        DB: Backend + 'static,
        DB::QueryBuilder: Default,
        Q: QueryFragment<DB>,
    {
        static SEEN: LazyLock<Mutex<HashMap<(TypeId, TypeId), String>>> = LazyLock::new(Default::default);
        let sqlite = TypeId::of::<DB>() == TypeId::of::<diesel::sqlite::Sqlite>();
        assert!(
            !sqlite || query.is_safe_to_cache_prepared(backend)?,
            "a prepared!() statement that diesel marks uncacheable; write it with store::prepared::update or upsert"
        );
        let mut builder = DB::QueryBuilder::default();
        query.to_sql(&mut builder, backend)?;
        let sql = builder.finish();
        let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
        let first = seen.entry((TypeId::of::<K>(), TypeId::of::<DB>())).or_insert_with(|| sql.clone());
        assert_eq!(*first, sql, "a prepared!() statement changed its SQL text; it must not (see store::prepared)");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use diesel::prelude::*;

    use crate::schema::runs;
    use crate::{DbConn, runs as run_rows, tests::run_row};

    fn connection(dir: &tempfile::TempDir) -> DbConn {
        use diesel_migrations::MigrationHarness;
        let mut conn = DbConn::establish(dir.path().join("t.db").to_str().unwrap()).unwrap();
        conn.run_pending_migrations(crate::MIGRATIONS).unwrap();
        run_rows::insert(&mut conn, &run_row("a")).unwrap();
        conn
    }

    /// Sets a run's `thread_id` at one call site, as `Some` (a bound value) or `None` (which
    /// diesel's `Option` changeset leaves out of the SQL).
    fn set_thread(conn: &mut DbConn, thread: Option<&str>) -> QueryResult<usize> {
        let values = (runs::status.eq("running"), thread.map(|t| runs::thread_id.eq(t)));
        let statement = prepared!(super::update(runs::table, values, runs::run_id.eq("a")));
        crate::on_backend!(conn, |c| statement.execute(c))
    }

    #[test]
    fn an_update_changes_the_rows_its_predicate_selects() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = connection(&dir);
        for thread in ["t1", "t2"] {
            assert_eq!(set_thread(&mut conn, Some(thread)).unwrap(), 1);
            assert_eq!(run_rows::get(&mut conn, "a").unwrap().thread_id.as_deref(), Some(thread));
        }
    }

    /// Rows whose nullable columns are `None` in one insert and set in the next go through one
    /// prepared statement: `None` binds NULL (`treat_none_as_default_value = false`) instead of
    /// leaving its column out of the SQL, which would make the second insert run the first one's
    /// SQL with other binds (and debug builds panic).
    #[test]
    fn inserts_with_and_without_optional_values_store_each_value() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = connection(&dir);
        let set = run_rows::RunRow {
            thread_id: Some("t".into()),
            result: Some("r".into()),
            error: Some("e".into()),
            idempotency_key: Some("k".into()),
            request_hash: Some("h".into()),
            owner: Some("o".into()),
            parent_run_id: Some("a".into()),
            max_replans: None,
            usage: Some("{}".into()),
            ..run_row("b")
        };
        run_rows::insert(&mut conn, &set).unwrap();
        run_rows::insert(&mut conn, &run_row("c")).unwrap();
        let b = run_rows::get(&mut conn, "b").unwrap();
        let stored = (b.thread_id, b.result, b.error, b.idempotency_key, b.request_hash, b.owner, b.parent_run_id);
        let some = |s: &str| Some(s.to_string());
        assert_eq!(stored, (some("t"), some("r"), some("e"), some("k"), some("h"), some("o"), some("a")));
        assert_eq!((b.max_replans, b.usage.as_deref()), (None, Some("{}")));
        let c = run_rows::get(&mut conn, "c").unwrap();
        assert_eq!((c.thread_id, c.owner, c.usage, c.max_replans), (None, None, None, Some(4)));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a prepared!() statement changed its SQL text")]
    fn a_call_site_whose_sql_varies_is_caught_in_debug_builds() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = connection(&dir);
        let _ = set_thread(&mut conn, Some("t1"));
        let _ = set_thread(&mut conn, None);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a prepared!() statement that diesel marks uncacheable")]
    fn a_statement_diesel_would_not_cache_is_caught_in_debug_builds() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = connection(&dir);
        let statement = prepared!(diesel::update(runs::table).set(runs::status.eq("running")));
        let _ = crate::on_backend!(&mut conn, |c| statement.execute(c));
    }
}

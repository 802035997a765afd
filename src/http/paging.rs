//! How much one page of a list may hold, and where it starts: read from a request and refused
//! with the allowed range when out of it, never clamped or ignored (a client asking for 5,000
//! items and silently getting 500 pages wrongly).

use super::error::ApiError;
use crate::error_code::ErrorCode;
use crate::run::RunId;

/// The size of a list's pages: `default` when the request names none, at most `max`.
#[derive(Debug, Clone, Copy)]
pub struct PageSize {
    pub default: i64,
    pub max: i64,
}

impl PageSize {
    /// The `limit` of a query string (400 `invalid_query` out of range).
    pub fn of_query(self, limit: Option<i64>) -> Result<i64, ApiError> {
        self.check(limit, ErrorCode::InvalidQuery)
    }

    /// The `limit` of a request body (400 `invalid_request` out of range).
    pub fn of_body(self, limit: Option<i64>) -> Result<i64, ApiError> {
        self.check(limit, ErrorCode::InvalidRequest)
    }

    fn check(self, limit: Option<i64>, code: ErrorCode) -> Result<i64, ApiError> {
        match limit {
            None => Ok(self.default),
            Some(limit) if (1..=self.max).contains(&limit) => Ok(limit),
            Some(limit) => Err(ApiError::new(code, format!("limit must be from 1 to {} (was {limit})", self.max))),
        }
    }
}

/// A run list's `cursor`: the `nextCursor` of the page before — the id of a run flexrun made, a
/// UUID. Anything else is refused rather than compared: as text, a mistyped cursor would
/// silently start the list over or end it.
pub fn run_cursor(cursor: Option<&str>) -> Result<Option<RunId>, ApiError> {
    cursor
        .map(|cursor| {
            let refused = || ApiError::new(ErrorCode::InvalidQuery, "cursor must be the nextCursor of the page before");
            uuid::Uuid::try_parse(cursor).map_err(|_| refused())?;
            RunId::parse(cursor).map_err(|_| refused())
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_is_refused_with_the_range() {
        let size = PageSize { default: 50, max: 500 };
        assert_eq!(size.of_query(None).unwrap(), 50);
        assert_eq!(size.of_query(Some(1)).unwrap(), 1);
        assert_eq!(size.of_query(Some(500)).unwrap(), 500);
        for bad in [0, -1, 501, i64::MAX] {
            let error = size.of_query(Some(bad)).unwrap_err();
            assert!(error.to_string().contains("from 1 to 500"), "{bad}: {error}");
        }
        assert!(run_cursor(Some("not a run")).is_err());
        for mistyped in ["zzz", "123", "01936b2e-1111-7000-8000", "run-1"] {
            assert!(run_cursor(Some(mistyped)).is_err(), "{mistyped}");
        }
        let id = RunId::generate();
        assert_eq!(run_cursor(Some(id.as_str())).unwrap(), Some(id));
        assert_eq!(run_cursor(None).unwrap(), None);
    }
}

//! A server's tool list, read page by page within bounds: at most the [`MAX_TOOLS`] tools its
//! registration would offer, at most [`MAX_LISTING_BYTES`] of them, at most [`MAX_PAGES`] pages.
//!
//! Why not the SDK's `list_all_tools`: it follows every `nextCursor` and keeps every page, so a
//! server that lists without end (a fresh cursor on every page) fills memory until the listing's
//! deadline, and one listing thousands of tools has all of them kept, stored with its
//! registration and quoted in its listing. Here reading stops at a bound, and the listing says so
//! — quoting the first tool not read as an excerpt, whatever the length of its name.

use serde_json::Value;

use super::client::{McpError, Session};
use flexrun_core::excerpt;
use flexrun_core::mcp::McpServer;
use flexrun_core::mcp::tool::{MAX_TOOLS, NAME_SHOWN};

/// The most bytes (as JSON) of the tools kept of one listing: what is stored with the
/// registration and held in memory.
pub const MAX_LISTING_BYTES: usize = 8 * 1024 * 1024;

/// The most pages read of one listing (a server listing nothing but cursors ends here too).
pub const MAX_PAGES: usize = 1_000;

/// The tools read of a server's list, and why reading stopped before its end, if it did.
#[derive(Debug, Default)]
pub struct Listing {
    /// The tools the registration would offer (by its allow and deny lists), as listed (JSON).
    pub tools: Vec<Value>,
    /// Why the tools after these were not read.
    pub stopped: Option<String>,
    bytes: usize,
    pages: usize,
}

/// Reads `server`'s tools over `session`, page after page, until the list ends or a bound is
/// reached.
pub async fn read(session: &Session, server: &McpServer) -> Result<Listing, McpError> {
    let mut listing = Listing::default();
    let mut cursor = None;
    loop {
        let (page, next) = session.tools_page(cursor).await?;
        cursor = listing.take(page, next, |name| server.tools.offers(name));
        if cursor.is_none() {
            return Ok(listing);
        }
    }
}

impl Listing {
    /// Keeps the tools of a page that `offers` names, and returns the cursor of the page to read
    /// next: none when the list ends or a bound is reached.
    fn take(&mut self, page: Vec<Value>, next: Option<String>, offers: impl Fn(&str) -> bool) -> Option<String> {
        self.pages += 1;
        for tool in page {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            if !offers(name) {
                continue;
            }
            let size = serde_json::to_string(&tool).map_or(usize::MAX, |text| text.len());
            if let Some(bound) = self.exceeded(size) {
                let name = excerpt::excerpt(name, NAME_SHOWN);
                self.stopped =
                    Some(format!("the server lists {bound}: `{name}` and the tools after it are not offered"));
                return None;
            }
            self.bytes += size;
            self.tools.push(tool);
        }
        if next.is_some() && self.pages == MAX_PAGES {
            self.stopped = Some(format!(
                "the server lists its tools over more than {MAX_PAGES} pages: those after are not offered"
            ));
            return None;
        }
        next
    }

    /// The bound one more tool of `size` bytes would exceed, if any.
    fn exceeded(&self, size: usize) -> Option<String> {
        if self.tools.len() == MAX_TOOLS {
            return Some(format!("more than {MAX_TOOLS} tools"));
        }
        let over = self.bytes.saturating_add(size) > MAX_LISTING_BYTES;
        over.then(|| format!("more than {MAX_LISTING_BYTES} bytes of tools"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tools(names: impl IntoIterator<Item = String>) -> Vec<Value> {
        names.into_iter().map(|name| json!({"name": name, "inputSchema": {"type": "object"}})).collect()
    }

    #[test]
    fn reading_stops_past_the_most_tools_quoting_the_next_ones_name_bounded() {
        let mut listing = Listing::default();
        let first = tools((0..MAX_TOOLS).map(|i| format!("t{i}")));
        assert_eq!(listing.take(first, Some("1".into()), |_| true), Some("1".into()));
        let huge = "x".repeat(300_000);
        assert_eq!(listing.take(tools([huge, "after".into()]), Some("2".into()), |_| true), None);
        assert_eq!(listing.tools.len(), MAX_TOOLS);
        let stopped = listing.stopped.unwrap();
        assert!(stopped.starts_with(&format!("the server lists more than {MAX_TOOLS} tools: `xxx")), "{stopped}");
        assert!(stopped.len() < 200, "{stopped}");
    }

    #[test]
    fn tools_not_offered_are_neither_kept_nor_counted() {
        let mut listing = Listing::default();
        let page = tools((0..2 * MAX_TOOLS).map(|i| format!("t{i}")));
        assert_eq!(listing.take(page, None, |name| name.ends_with('7')), None);
        assert_eq!((listing.tools.len(), listing.stopped), (MAX_TOOLS / 5, None));
    }

    #[test]
    fn reading_stops_at_the_most_bytes_and_the_most_pages() {
        let mut listing = Listing::default();
        let big = |i: usize| json!({"name": format!("t{i}"), "description": "d".repeat(MAX_LISTING_BYTES / 4)});
        assert_eq!(listing.take((0..5).map(big).collect(), None, |_| true), None);
        assert_eq!(listing.tools.len(), 3);
        assert!(listing.stopped.unwrap().contains("bytes of tools: `t3`"));

        let mut listing = Listing::default();
        for page in 1..MAX_PAGES {
            assert_eq!(listing.take(Vec::new(), Some(page.to_string()), |_| true), Some(page.to_string()));
        }
        assert_eq!(listing.take(Vec::new(), Some("last".into()), |_| true), None);
        assert!(listing.stopped.unwrap().contains(&format!("more than {MAX_PAGES} pages")));
    }
}

//! The hash maps and sets flexrun keeps: std's, with a faster hasher.
//!
//! A run's path looks up plan nodes, completed work, claims and streams by short keys many times
//! per step, and std's default hasher (SipHash-1-3) was a visible share of that work. foldhash is
//! several times cheaper on short keys and still seeded per process, so keys a client or the model
//! chooses (node ids, run ids) cannot be picked in advance to collide.

/// [`std::collections::HashMap`] with foldhash. Build one with `default()` or `collect()`.
pub type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// [`std::collections::HashSet`] with foldhash. Build one with `default()` or `collect()`.
pub type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

//! The one redaction policy: a value whose key names a secret never leaves the server, on any
//! read path — a run, a page of its events, its live frames, a capability's registration, what
//! the command line and the console show (the composer's Re-run included). The log keeps every
//! value (a run needs them); what is read out of it is redacted.
//!
//! A key is made of words, split at `_`, `-`, `.`, spaces and lower→upper case changes
//! (`X-Api-Key`, `api_key` and `apiKey` are the words `api` and `key`). It names a secret when:
//!
//! - a run of its words spells one of the marker words, or its plural: `apiKey`, `X-Api-Key`,
//!   `client_secret`, `refresh_token`, `Auth-Token`, `sessionId`, `clientId`, `jwt` and
//!   `credentials` do (plurals count, so `accessTokens` does too: hiding a harmless value is the
//!   safer mistake); `author`, `tokenizer` and `clientIdentifier` do not;
//! - or its words end with a last-word marker (`key`), or its plural: `key`, `keys`, `signingKey`,
//!   `ssh_key`, `primaryKey` do. `key` only counts as the last word, because a key that begins
//!   with it names what is key, not a key: `keyPoints`, `key_findings` and `keyId` are shown, and
//!   so are `keyword`, `keyboard` and `monkey`, where it is not a word of its own.
//!
//! Except the keys that count tokens ([`TOKEN_COUNTS`]: `inputTokens`, `max_tokens`, …): they
//! spell `tokens`, but name a number of them — a model call's usage, a budget — which the
//! usage and budget views exist to show. Only these exact keys are exempt: `accessTokens` or
//! `refresh_tokens` still name secrets.

use std::borrow::Cow;
use std::sync::Arc;

use memchr::{memchr_iter, memrchr};
use serde_json::Value;

mod verdicts;

/// What a redacted value is replaced by.
pub const REDACTED: &str = "[redacted]";

/// The marker words flexrun always redacts, wherever a run of a key's words spells them (or
/// their plural).
pub const DEFAULT_MARKERS: [&str; 18] = [
    "token",
    "secret",
    "apikey",
    "authorization",
    "auth",
    "password",
    "passwd",
    "pwd",
    "bearer",
    "credential",
    "privatekey",
    "cookie",
    "session",
    "signature",
    "accesskey",
    "passphrase",
    "jwt",
    "clientid",
];

/// Keys that count tokens, shown whatever their words spell: the usage of model calls as flexrun
/// and Chat Completions write it (with its breakdowns of counts), LangChain's `usage_metadata`,
/// and token budgets.
pub const TOKEN_COUNTS: [&str; 18] = [
    "inputTokens",
    "totalTokens",
    "outputTokens",
    "cachedInputTokens",
    "reasoningTokens",
    "maxTokens",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "max_tokens",
    "prompt_tokens_details",
    "completion_tokens_details",
    "input_token_details",
    "output_token_details",
];

/// The marker words flexrun redacts when a key's words end with them (or their plural): see the
/// module's doc for why `key` is one.
pub const DEFAULT_LAST_WORD_MARKERS: [&str; 1] = ["key"];

/// The markers in force: the defaults and those an operator added (`redaction.extra_keys`).
/// Shared, not copied, by every stream that redacts with them.
#[derive(Debug, Clone)]
pub struct Redaction {
    markers: Arc<[Marker]>,
    /// The letters each marker is spelled with, in the order of `markers` ([`letters`]): a key
    /// that lacks one of them cannot spell that marker, which settles most keys at once.
    letters: Arc<[u32]>,
    /// The first letters of the markers ([`letters`]): where a word of a key starts with none
    /// of them, no marker is spelled from there.
    firsts: u32,
    /// The number verdicts reached with these markers are remembered under ([`verdicts`]).
    number: u64,
}

/// One marker word, and where in a key it counts.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Marker {
    /// Lowercase letters and digits only, never empty.
    word: String,
    /// Counts only as the key's last words ([`DEFAULT_LAST_WORD_MARKERS`]).
    last_word: bool,
}

impl Default for Redaction {
    fn default() -> Self {
        Self::new(&[])
    }
}

impl Redaction {
    /// The defaults plus `extra` marker words (compared without case, `_` and `-`), which count
    /// wherever a run of a key's words spells them.
    pub fn new(extra: &[String]) -> Self {
        let marker = |m: &str, last_word| Marker {
            word: m.chars().filter(char::is_ascii_alphanumeric).collect::<String>().to_ascii_lowercase(),
            last_word,
        };
        let anywhere = DEFAULT_MARKERS.iter().copied().chain(extra.iter().map(String::as_str));
        let mut markers: Vec<Marker> = anywhere
            .map(|m| marker(m, false))
            .chain(DEFAULT_LAST_WORD_MARKERS.iter().map(|m| marker(m, true)))
            .filter(|m| !m.word.is_empty())
            .collect();
        markers.sort();
        markers.dedup();
        let firsts =
            markers.iter().fold(0, |firsts, m| firsts | letters(m.word.as_bytes().get(..1).unwrap_or_default()));
        let letters = markers.iter().map(|m| letters(m.word.as_bytes())).collect();
        Self { markers: markers.into(), letters, firsts, number: verdicts::number() }
    }

    /// Whether a value under `key` is a secret: some run of its words, from a word's start to a
    /// word's end (to the key's end, for a last-word marker), spells a marker or its plural.
    pub fn is_secret(&self, key: &str) -> bool {
        self.judged(key.as_bytes())
    }

    /// [`Self::is_secret`] for a key's text (as it reads, no escapes): every key of every streamed
    /// frame is asked about, mostly the same few dozen, whose verdicts are remembered.
    fn judged(&self, key: &[u8]) -> bool {
        verdicts::remembered(self.number, key, || self.spelled(key, letters(key) & !ESCAPE))
    }

    /// Whether `key`, with the letters `present`, spells a marker. A key that lacks a letter of
    /// each marker is answered without finding its words.
    fn spelled(&self, key: &[u8], present: u32) -> bool {
        // Most keys lack a letter of every marker: settled by one pass over the markers' letter
        // sets without a branch or a compare (which SSE2 lacks for these), four markers at a time:
        // a marker's missing letters `m` are below 2^31 (no marker has the escape bit), so the top
        // bit of `m - 1` is set exactly when none is missing.
        let absent = !present;
        let spellable = self.letters.iter().fold(0u32, |any, letters| any | ((letters & absent).wrapping_sub(1) >> 31));
        // The keys that count tokens spell `token` and are in every frame with usage: named
        // exactly, they are let through before their words are looked at.
        if spellable == 0 || TOKEN_COUNTS.iter().any(|count| count.as_bytes() == key) {
            return false;
        }
        // A marker is spelled from the start of a word: look only there, and only where the word
        // starts with a marker's first letter.
        (0..key.len())
            .filter(|&at| key.get(at).is_some_and(|&b| LETTER_BITS[usize::from(b)] & self.firsts != 0))
            .filter(|&at| starts_word(key, at))
            .any(|at| {
                let first = key.get(at).map(u8::to_ascii_lowercase);
                self.markers.iter().zip(self.letters.iter()).any(|(marker, letters)| {
                    let word = marker.word.as_bytes();
                    letters & absent == 0 && word.first().copied() == first && spells(key, at, word, marker.last_word)
                })
            })
    }

    /// `value` with every secret replaced by [`REDACTED`].
    pub fn value(&self, value: Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(key, value)| {
                        let value =
                            if self.is_secret(&key) { Value::String(REDACTED.into()) } else { self.value(value) };
                        (key, value)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.value(v)).collect()),
            other => other,
        }
    }

    /// The text values under secret keys anywhere in `value`: for scrubbing them out of text
    /// made from it (a prompt quoting a run's inputs), where no key is left to judge by.
    pub fn secret_values(&self, value: &Value) -> Vec<String> {
        let mut found = Vec::new();
        self.collect_secrets(value, &mut found);
        found
    }

    fn collect_secrets(&self, value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    match value {
                        Value::String(text) if !text.is_empty() && self.is_secret(key) => found.push(text.clone()),
                        other => self.collect_secrets(other, found),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| self.collect_secrets(item, found)),
            _ => {}
        }
    }

    /// A formatter that writes JSON as `serde_json` writes it compactly, and notes whether an
    /// object key it writes may name a secret ([`KeyWatch::found`]). A frame is judged so as it is
    /// encoded: its live streams need not search its text again ([`Self::text`]).
    pub fn watch(&self) -> KeyWatch<'_> {
        KeyWatch { redaction: self, pieces: None, found: false }
    }

    /// A JSON text (a frame) with every secret replaced: the same text when it has no secret
    /// key — found in one pass without parsing, so the common frame costs no copy.
    pub fn text<'a>(&self, json: &'a str) -> Cow<'a, str> {
        if !self.has_secret_key(json) {
            return Cow::Borrowed(json);
        }
        match serde_json::from_str::<Value>(json) {
            Ok(value) => Cow::Owned(self.value(value).to_string()),
            // Not JSON: nothing flexrun wrote; show nothing of it.
            Err(_) => Cow::Owned(format!("\"{REDACTED}\"")),
        }
    }

    /// Whether an object key of a JSON text names a secret. A key is found from the `:` after it:
    /// in JSON a `:` follows a string only when that string is a key (a quote inside a string is
    /// escaped), so the text is searched for colons alone and each key looked at once. A key
    /// without its opening quote (not JSON) counts as a secret: the text is then parsed.
    fn has_secret_key(&self, json: &str) -> bool {
        let bytes = json.as_bytes();
        memchr_iter(b':', bytes).any(|colon| {
            let before = bytes.get(..colon).unwrap_or_default();
            let close = before.len() - before.iter().rev().take_while(|b| b.is_ascii_whitespace()).count();
            let Some(close) = close.checked_sub(1).filter(|&q| before.get(q) == Some(&b'"') && !escaped(bytes, q))
            else {
                return false;
            };
            let Some(open) = opening_quote(bytes, close) else { return true };
            let key = bytes.get(open + 1..close).unwrap_or_default();
            if letters(key) & ESCAPE == 0 {
                return self.judged(key);
            }
            // A key written with escapes is judged by what it says once unescaped.
            json.get(open..=close)
                .and_then(|quoted| serde_json::from_str::<String>(quoted).ok())
                .is_none_or(|key| self.is_secret(&key))
        })
    }
}

/// See [`Redaction::watch`].
pub struct KeyWatch<'r> {
    redaction: &'r Redaction,
    /// Pieces of the key being written so far (`None`: not in a key). serde_json writes a key
    /// without escapes as one piece, which is judged as it is written, without a copy.
    pieces: Option<u32>,
    found: bool,
}

impl KeyWatch<'_> {
    /// Whether a key written so far may name a secret: `false` only when none does. A key written
    /// in several pieces (with escapes, which keys flexrun writes never have) counts, and is left
    /// to [`Redaction::text`], which reads keys unescaped.
    pub fn found(&self) -> bool {
        self.found
    }

    /// Notes one piece of a key; `text` is its text when it is not an escape.
    fn piece(&mut self, text: Option<&str>) {
        let Some(pieces) = self.pieces.as_mut().filter(|_| !self.found) else { return };
        *pieces += 1;
        self.found = match text {
            Some(text) if *pieces == 1 => self.redaction.judged(text.as_bytes()),
            _ => true,
        };
    }
}

/// For a borrowed watch: [`serde_json::Serializer`] keeps its formatter, and the verdict is read after.
impl serde_json::ser::Formatter for &mut KeyWatch<'_> {
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        self.pieces = Some(0);
        serde_json::ser::CompactFormatter.begin_object_key(writer, first)
    }

    fn end_object_key<W: ?Sized + std::io::Write>(&mut self, _writer: &mut W) -> std::io::Result<()> {
        self.pieces = None;
        Ok(())
    }

    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        self.piece(Some(fragment));
        writer.write_all(fragment.as_bytes())
    }

    fn write_char_escape<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        char_escape: serde_json::ser::CharEscape,
    ) -> std::io::Result<()> {
        self.piece(None);
        serde_json::ser::CompactFormatter.write_char_escape(writer, char_escape)
    }
}

/// The bit [`letters`] sets for a backslash: the key has escapes.
const ESCAPE: u32 = 1 << 31;

/// Bits for the bytes of a key: a–z and A–Z as 0–25, every digit as 26, `\\` as [`ESCAPE`]. A
/// marker's set is only a test a key must pass before its words are looked at, so digits may
/// share a bit: a key with another digit than a marker's is then looked at, never passed over.
#[expect(clippy::as_conversions, reason = "bytes as indices of a table built at compile time, where From is not const")]
static LETTER_BITS: [u32; 256] = {
    let mut bits = [0; 256];
    let mut b = 0;
    while b < 26 {
        bits[b'a' as usize + b] = 1 << b;
        bits[b'A' as usize + b] = 1 << b;
        b += 1;
    }
    let mut d = 0;
    while d < 10 {
        bits[b'0' as usize + d] = 1 << 26;
        d += 1;
    }
    bits[b'\\' as usize] = ESCAPE;
    bits
};

/// The letters and digits in `text` as a set of bits, without case ([`LETTER_BITS`]).
fn letters(text: &[u8]) -> u32 {
    text.iter().fold(0, |bits, &b| bits | LETTER_BITS[usize::from(b)])
}

/// The unescaped quote that opens the string whose closing quote is at `close`.
fn opening_quote(bytes: &[u8], close: usize) -> Option<usize> {
    let mut end = close;
    loop {
        let quote = memrchr(b'"', bytes.get(..end)?)?;
        if !escaped(bytes, quote) {
            return Some(quote);
        }
        end = quote;
    }
}

/// Whether the byte at `at` is escaped: an odd number of backslashes before it.
fn escaped(bytes: &[u8], at: usize) -> bool {
    bytes.get(..at).unwrap_or_default().iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
}

/// Whether the letters and digits of `key` from `at` on spell `marker` (the words between are
/// joined, their separators skipped), or its plural, and end where a word ends — or, for a
/// `last_word` marker, where the key's last word ends.
fn spells(key: &[u8], mut at: usize, marker: &[u8], last_word: bool) -> bool {
    for &expected in marker {
        while key.get(at).is_some_and(|b| !b.is_ascii_alphanumeric()) {
            at += 1;
        }
        if key.get(at).map(u8::to_ascii_lowercase) != Some(expected) {
            return false;
        }
        at += 1;
    }
    let ends = |at: usize| {
        if last_word {
            key.get(at..).unwrap_or_default().iter().all(|b| !b.is_ascii_alphanumeric())
        } else {
            word_boundary(key, at)
        }
    };
    if ends(at) {
        return true;
    }
    // The plural's `s` may be a word of its own (`KEY_s`): the words are joined, as above.
    while key.get(at).is_some_and(|b| !b.is_ascii_alphanumeric()) {
        at += 1;
    }
    key.get(at).map(u8::to_ascii_lowercase) == Some(b's') && ends(at + 1)
}

/// Whether a word of `key` starts at byte `at`.
fn starts_word(key: &[u8], at: usize) -> bool {
    key.get(at).is_some_and(u8::is_ascii_alphanumeric) && word_boundary(key, at)
}

/// Whether `at` lies between two words of `key` (or at its start or end). Words are split at
/// every byte that is not an ASCII letter or digit, and where a lowercase letter or a digit is
/// followed by an uppercase letter: `apiKey`, `X-Api-Key` and `api_key` are the words `api` and
/// `key`.
fn word_boundary(key: &[u8], at: usize) -> bool {
    let before = at.checked_sub(1).and_then(|b| key.get(b));
    match (before, key.get(at)) {
        (Some(before), Some(after)) => {
            !before.is_ascii_alphanumeric()
                || !after.is_ascii_alphanumeric()
                || (after.is_ascii_uppercase() && (before.is_ascii_lowercase() || before.is_ascii_digit()))
        }
        _ => true,
    }
}

/// A URL as callers are shown it: no credentials (`user:pass@`), no query string or fragment
/// (where tokens travel).
pub fn url(raw: &str) -> String {
    let without_query = raw.split(['?', '#']).next().unwrap_or_default();
    match without_query.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
            let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
            if path.is_empty() && !rest.contains('/') {
                format!("{scheme}://{host}")
            } else {
                format!("{scheme}://{host}/{path}")
            }
        }
        None => without_query.to_string(),
    }
}

/// `text` — what a remote server answered, an error's message — with each of `secrets` (the
/// credentials flexrun sent it) replaced by [`REDACTED`], then bounded to `max` characters. A
/// server may echo what it was sent ("Incorrect API key provided: sk-…"), and its message is
/// shown to callers and logged. Cut before bounding, so no bound leaves half a secret behind;
/// secrets shorter than four characters are left alone, as cutting them would cut ordinary words.
pub fn cut_secrets(text: &str, secrets: &[String], max: usize) -> String {
    let mut text = Cow::Borrowed(text);
    for secret in secrets.iter().filter(|s| s.chars().count() >= 4) {
        if text.contains(secret.as_str()) {
            text = Cow::Owned(text.replace(secret.as_str(), REDACTED));
        }
    }
    crate::excerpt::excerpt(&text, max).into_owned()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_are_cut_out_of_a_text_before_it_is_bounded() {
        let secret = "sk-live-0123456789".to_string();
        let text = format!("Incorrect API key provided: Bearer {secret}. {}", "x".repeat(2000));
        let cut = cut_secrets(&text, &[secret.clone(), "ab".into()], 60);
        assert!(cut.starts_with("Incorrect API key provided: Bearer [redacted]. xx"), "{cut}");
        assert!(cut.ends_with("more characters)") && cut.chars().count() < 100, "bounded: {cut}");
        // A secret the bound would have cut in half is gone whole, not half shown.
        let at_the_edge = format!("{}{secret}", "y".repeat(30));
        assert!(!cut_secrets(&at_the_edge, &[secret], 40).contains("sk-"));
        assert_eq!(cut_secrets("a b ab", &["ab".into()], 100), "a b ab", "too short to cut");
    }

    #[test]
    fn secret_keys_are_found_by_their_words() {
        let r = Redaction::default();
        for secret in [
            "apiKey",
            "X-Api-Key",
            "api_key",
            "client_secret",
            "Auth-Token",
            "accessToken",
            "sessionId",
            "privateKey",
            "passwd",
            "pwd",
            "Set-Cookie",
            "authorization",
            "credentials",
            "AWS_SECRET_ACCESS_KEY",
            "api.key",
            "APIKey",
            "accessTokens",
            "refresh_tokens",
            "MaxTokens",
            "tokenId",
            "refresh_token",
            "jwt",
            "id_jwt",
            "clientId",
            "client_id",
            "ClientID",
            "key",
            "Key",
            "KEY",
            "keys",
            "signingKey",
            "ssh_key",
            "primaryKey",
            "x-api-key",
            "key_",
            "KEY_s",
        ] {
            assert!(r.is_secret(secret), "{secret}");
        }
        for plain in [
            "author",
            "tokenizer",
            "topic",
            "keyPoints",
            "key_findings",
            "keyId",
            "keyword",
            "keyboard",
            "monkey",
            "turkeys",
            "authors_note",
            "subtoken",
            "XMLHttpRequest",
            "clientIdentifier",
            "client",
            "",
            "inputTokens",
            "cachedInputTokens",
            "maxTokens",
            "prompt_tokens",
            "total_tokens",
        ] {
            assert!(!r.is_secret(plain), "{plain}");
        }
        assert!(!r.is_secret("tenant"));
        assert!(Redaction::new(&["tenant".into()]).is_secret("tenantId"), "operators add markers");
    }

    #[test]
    fn the_values_of_secret_keys_are_found_at_any_depth() {
        let redaction = Redaction::new(&[]);
        let value = json!({"apiKey": "k1", "nested": [{"password": "p2", "name": "shown"}], "token": 5, "secret": ""});
        assert_eq!(redaction.secret_values(&value), vec!["k1".to_string(), "p2".to_string()]);
    }

    #[test]
    fn values_and_texts_lose_their_secrets_only() {
        let r = Redaction::default();
        let value = json!({"inputs": {"apiKey": "sk-1", "list": [{"Auth-Token": "t"}], "topic": "x"}});
        let redacted = json!({"inputs": {"apiKey": REDACTED, "list": [{"Auth-Token": REDACTED}], "topic": "x"}});
        assert_eq!(r.value(value.clone()), redacted);
        let clean = r#"{"type":"log","payload":{"message":"token: not a key"}}"#;
        assert!(matches!(r.text(clean), Cow::Borrowed(_)), "no secret key: the same text");
        let text = value.to_string();
        let out = r.text(&text);
        assert!(!out.contains("sk-1") && out.contains(REDACTED), "{out}");
        assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), redacted);
        let compounds = r#"{"X-Api-Key":"k1","private_key":"k2","AccessKey":"k3","Tenant-ID":"k4"}"#;
        let out = Redaction::new(&["tenant".into()]).text(compounds).into_owned();
        assert!(["k1", "k2", "k3", "k4"].iter().all(|k| !out.contains(k)), "{out}");
        let escaped = r#"{"a\"b":1,"password":"p"}"#;
        assert!(!r.text(escaped).contains("\"p\""));
        let unescaped = r#"{"\u0074oken":"t1","api.key":"k1","Access Key":"k2"}"#;
        let out = r.text(unescaped).into_owned();
        assert!(!out.contains("t1") && !out.contains("k1") && !out.contains("k2"), "{out}");
        assert_eq!(r.text(r#"{"a":"x\":1","b":2}"#), r#"{"a":"x\":1","b":2}"#, "a colon in a value is no key");
        assert_eq!(r.text(r#"a":1"#), format!("\"{REDACTED}\""), "not JSON: nothing shown");
    }

    /// The words of a key as the policy defines them (the module's doc): split at
    /// non-alphanumerics and where a lowercase letter or digit is followed by an uppercase one.
    fn words(key: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word = String::new();
        let mut previous_lower = false;
        for c in key.chars() {
            if !c.is_ascii_alphanumeric() {
                words.extend((!word.is_empty()).then(|| std::mem::take(&mut word)));
                previous_lower = false;
                continue;
            }
            if c.is_ascii_uppercase() && previous_lower {
                words.push(std::mem::take(&mut word));
            }
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
            word.push(c.to_ascii_lowercase());
        }
        words.extend((!word.is_empty()).then_some(word));
        words
    }

    /// The policy spelled out: some run of the key's words spells a marker or its plural, or the
    /// run of its last words spells a last-word marker or its plural.
    fn secret_by_words(markers: &[&str], key: &str) -> bool {
        let words = words(key);
        let is = |spelled: &str, m: &str| spelled == m || spelled.strip_suffix('s') == Some(m);
        (0..words.len()).any(|start| {
            let mut spelled = String::new();
            let anywhere = words[start..].iter().any(|word| {
                spelled.push_str(word);
                markers.iter().any(|m| is(&spelled, m))
            });
            anywhere || DEFAULT_LAST_WORD_MARKERS.iter().any(|m| is(&spelled, m))
        })
    }

    /// Keys made of marker fragments, other words, separators and case changes.
    fn key() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "api", "Api", "KEY", "key", "token", "Token", "s", "S", "tok", "en", "pass", "word", "auth", "or",
            "cookie", "session", "Id", "id", "2", "3", "x", "_", "-", ".", " ", "é", "tenant", "priv", "ateKey", "jwt",
            "client", "Client", "words", "mon",
        ]);
        prop::collection::vec(piece, 0..6).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #[test]
        fn bytes_walked_find_what_the_words_spell(key in key()) {
            // Operators' markers, one with a digit: digits share one bit of the letter sets, so
            // `x3` passes that test for `x2` and its words decide.
            let mut markers = DEFAULT_MARKERS.to_vec();
            markers.extend(["tenant", "x2"]);
            let r = Redaction::new(&["tenant".into(), "x2".into()]);
            prop_assert_eq!(r.is_secret(&key), secret_by_words(&markers, &key), "{}", key);
        }

        #[test]
        fn a_watched_encoding_finds_what_the_text_search_finds(
            keys in prop::collection::vec(key(), 1..5),
            escaped_key in any::<bool>(),
        ) {
            let r = Redaction::default();
            let mut value = json!({"kept": "value"});
            let beside = if escaped_key { json!({"line\nbreak": 1}) } else { json!({"line break": "a\nb"}) };
            for key in keys.iter().rev() {
                value = json!({"type": "log", key.as_str(): [value, beside]});
            }
            let mut watch = r.watch();
            let mut out = Vec::new();
            serde::Serialize::serialize(&value, &mut serde_json::Serializer::with_formatter(&mut out, &mut watch)).unwrap();
            let text = String::from_utf8(out).unwrap();
            prop_assert_eq!(&text, &value.to_string(), "written as serde_json writes it");
            let secret = matches!(r.text(&text), Cow::Owned(_));
            // A key written with escapes is left to the text search; others are judged exactly.
            prop_assert_eq!(watch.found(), secret || escaped_key, "{}", text);
        }

        #[test]
        fn a_text_is_redacted_as_its_value(keys in prop::collection::vec(key(), 1..5)) {
            let r = Redaction::default();
            let mut value = json!({"kept": "value"});
            for key in keys.iter().rev() {
                value = json!({"type": "log", key.as_str(): [value, "token: a value"]});
            }
            let text = value.to_string();
            match r.text(&text) {
                Cow::Borrowed(same) => prop_assert_eq!(r.value(value), serde_json::from_str::<Value>(same).unwrap()),
                Cow::Owned(redacted) => {
                    prop_assert!(redacted.contains(REDACTED));
                    prop_assert_eq!(r.value(value), serde_json::from_str::<Value>(&redacted).unwrap());
                }
            }
        }
    }

    #[test]
    fn remembered_verdicts_belong_to_the_markers_they_were_reached_with() {
        let (plain, tenant) = (Redaction::default(), Redaction::new(&["tenant".into()]));
        for _ in 0..3 {
            assert!(!plain.is_secret("tenantId"));
            assert!(tenant.is_secret("tenantId"));
            assert!(tenant.clone().is_secret("tenantId"), "a clone shares its markers' verdicts");
        }
        // Past the keys a thread remembers, and past the longest it remembers, keys are still judged.
        for i in 0..2_000 {
            assert!(!plain.is_secret(&format!("field{i}")));
        }
        assert!(plain.is_secret("apiKey") && !plain.is_secret("tenantId"));
        let long = format!("{}_password", "x".repeat(60));
        assert!(plain.is_secret(&long) && plain.is_secret(&long));
    }

    #[test]
    fn keys_written_with_escapes_are_left_to_the_text_search() {
        let r = Redaction::default();
        for (value, found) in [
            (json!({"api\nkey": 1}), true),
            (json!({"a": {"b": [{"Auth-Token": "t"}]}}), true),
            (json!({"topic": "apiKey", "n": {"author": 1}}), false),
            (json!({"say \"password\"": 1}), true),
            // Not a secret, but written in pieces: the text search decides.
            (json!({"line\nbreak": 1}), true),
            (json!({"": 1, "é": {"notes": "a\"b"}}), false),
        ] {
            let mut watch = r.watch();
            serde::Serialize::serialize(&value, &mut serde_json::Serializer::with_formatter(Vec::new(), &mut watch))
                .unwrap();
            assert_eq!(watch.found(), found, "{value}");
        }
    }

    #[test]
    fn urls_lose_credentials_and_query_strings() {
        assert_eq!(url("https://user:pw@tools.example/run?token=abc#x"), "https://tools.example/run");
        assert_eq!(url("http://127.0.0.1:9000/capability"), "http://127.0.0.1:9000/capability");
        assert_eq!(url("http://host"), "http://host");
        assert_eq!(url("http://host?key=1"), "http://host");
    }
}

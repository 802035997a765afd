//! The settings the core reads. The server's `config` loads them with the rest of its settings
//! (defaults, file, environment); here they are plain data — and [`integer`], how every integer
//! setting, these and the server's, is read.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde_json::Value;

/// How the planner asks the model for JSON; not every OpenAI-compatible server supports every form.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PlannerResponseFormat {
    JsonSchema,
    JsonObject,
    None,
}

/// Replanning when the configured defaults apply (an envelope's `policies.replan` overrides them).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplanSettings {
    pub enabled: bool,
    #[serde(deserialize_with = "integer")]
    pub max_goal_condition_replans: u32,
    #[serde(deserialize_with = "integer")]
    pub max_replans: u32,
}

/// Retries of failed model and capability calls (an envelope's `policies.retry` overrides them).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySettings {
    #[serde(deserialize_with = "integer")]
    pub max_retries: u32,
    pub base_delay_secs: f64,
}

/// One entry of the optional facet catalog.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacetDefinition {
    pub description: Option<String>,
    pub schema: Option<Value>,
}

/// The longest part of a refused text a message quotes: an environment variable may be long.
const QUOTED_CHARS: usize = 40;

/// An integer setting (`#[serde(deserialize_with = "integer")]`): a TOML integer, or the decimal
/// digits an environment variable gives. Nothing else is taken, not even `2.0`: the `config`
/// crate underneath would round `1.5` to 2 and read `true`, `yes` or `on` as 1, so a typo would
/// quietly become another limit than the one written. The refusal names the value, and the
/// loader adds the key.
pub fn integer<'de, D: Deserializer<'de>, T: Integer>(deserializer: D) -> Result<T, D::Error> {
    deserializer.deserialize_any(IntegerVisitor(PhantomData))
}

/// An optional integer setting: as [`integer`] when it is set (`#[serde(default, deserialize_with
/// = "optional_integer")]`).
pub fn optional_integer<'de, D: Deserializer<'de>, T: Integer>(deserializer: D) -> Result<Option<T>, D::Error> {
    struct Set<T>(T);
    impl<'de, T: Integer> Deserialize<'de> for Set<T> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            integer(deserializer).map(Set)
        }
    }
    Ok(Option::<Set<T>>::deserialize(deserializer)?.map(|Set(value)| value))
}

/// The types integer settings have: unsigned, with the largest value a message names.
pub trait Integer: TryFrom<u64> {
    const MAX: u64;
}

macro_rules! integer_types {
    ($($t:ty),*) => {$(
        impl Integer for $t {
            // Widening only: every one of these fits in a u64.
            #[allow(clippy::as_conversions)]
            const MAX: u64 = <$t>::MAX as u64;
        }
    )*};
}
integer_types!(u16, u32, u64, usize);

struct IntegerVisitor<T>(PhantomData<T>);

/// "An integer from 0 to N", N the type's largest.
struct InRange<T>(PhantomData<T>);

impl<T: Integer> de::Expected for InRange<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an integer from 0 to {}", T::MAX)
    }
}

impl<T: Integer> Visitor<'_> for IntegerVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<T, E> {
        T::try_from(value).map_err(|_| E::invalid_value(Unexpected::Unsigned(value), &InRange::<T>(PhantomData)))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<T, E> {
        match u64::try_from(value) {
            Ok(value) => self.visit_u64(value),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(value), &InRange::<T>(PhantomData))),
        }
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        if let Ok(value) = text.parse::<u64>() {
            return self.visit_u64(value);
        }
        let shown = crate::excerpt::excerpt(text, QUOTED_CHARS);
        let digits = text.strip_prefix('-').unwrap_or(text);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            // An integer, but no setting's: below 0, or more than a u64 holds.
            return Err(E::invalid_value(Unexpected::Str(&shown), &InRange::<T>(PhantomData)));
        }
        Err(E::invalid_type(Unexpected::Str(&shown), &self))
    }
}

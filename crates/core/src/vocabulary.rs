//! The words of the run's vocabulary that are stored — statuses and kinds — each an enum with
//! one name per variant (`as_str`, and `FromStr` back). [`stored_as_text!`] declares, next to
//! the enum, that the enum is a text column's value: with the `diesel` feature (the store's), it
//! implements diesel's `ToSql`/`FromSql` for text through those names, so a row holds the enum and
//! no status or kind is compared as a string anywhere.

/// Why a stored word is not one of the enum's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{word}`")]
pub struct UnknownWord {
    pub what: &'static str,
    pub word: String,
}

/// Makes `$enum` (with `as_str` and an `ALL` list of its variants) display as and parse from its
/// names and,
/// with the `diesel` feature, a text column's value.
#[macro_export]
macro_rules! stored_as_text {
    ($enum:ty, $what:literal) => {
        impl ::std::fmt::Display for $enum {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $enum {
            type Err = $crate::vocabulary::UnknownWord;

            fn from_str(word: &str) -> Result<Self, Self::Err> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|known| known.as_str() == word)
                    .ok_or_else(|| $crate::vocabulary::UnknownWord { what: $what, word: word.to_string() })
            }
        }

        #[cfg(feature = "diesel")]
        impl<DB> ::diesel::serialize::ToSql<::diesel::sql_types::Text, DB> for $enum
        where
            DB: ::diesel::backend::Backend,
            str: ::diesel::serialize::ToSql<::diesel::sql_types::Text, DB>,
        {
            fn to_sql<'b>(&'b self, out: &mut ::diesel::serialize::Output<'b, '_, DB>) -> ::diesel::serialize::Result {
                self.as_str().to_sql(out)
            }
        }

        #[cfg(feature = "diesel")]
        impl<DB> ::diesel::deserialize::FromSql<::diesel::sql_types::Text, DB> for $enum
        where
            DB: ::diesel::backend::Backend,
            String: ::diesel::deserialize::FromSql<::diesel::sql_types::Text, DB>,
        {
            fn from_sql(bytes: DB::RawValue<'_>) -> ::diesel::deserialize::Result<Self> {
                let word = String::from_sql(bytes)?;
                Ok(word.parse()?)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use std::fmt::{Debug, Display};
    use std::str::FromStr;

    use serde::Serialize;
    use serde::de::DeserializeOwned;

    use crate::capability::{CapabilityKind, ExecutorType};
    use crate::events::payload::{HitlKind, RequestStatus, Verdict};
    use crate::plan::StoredNodeStatus;
    use crate::run::RunStatus;
    use crate::run::decide::goals::EvaluationStatus;

    /// Every word of `all` is unique, reads back as itself, and is its name in JSON too (frames
    /// and documents show the words the columns hold).
    fn round_trips<T>(all: &[T])
    where
        T: Copy + Debug + PartialEq + Display + FromStr + Serialize + DeserializeOwned,
        T::Err: Debug,
    {
        let mut names = crate::hash::HashSet::default();
        for &word in all {
            let name = word.to_string();
            assert!(names.insert(name.clone()), "{name} twice");
            assert_eq!(name.parse::<T>().unwrap(), word);
            assert_eq!(serde_json::to_value(word).unwrap(), name.as_str());
            assert_eq!(serde_json::from_value::<T>(name.as_str().into()).unwrap(), word);
        }
    }

    #[test]
    fn every_stored_word_reads_back_and_is_its_json_name() {
        round_trips(&RunStatus::ALL);
        round_trips(&HitlKind::ALL);
        round_trips(&RequestStatus::ALL);
        round_trips(&Verdict::ALL);
        round_trips(&StoredNodeStatus::ALL);
        round_trips(&EvaluationStatus::ALL);
        round_trips(&CapabilityKind::ALL);
        round_trips(&ExecutorType::ALL);
        assert!("paused".parse::<StoredNodeStatus>().is_err());
    }
}

//! The one way a configuration choice (an enum such as `processor.guarantee`) is spelt: its
//! serde name, so a file, an environment variable, `--mode` and the generated reference all
//! accept and print the same strings.

use serde::de::value::{Error as ValueError, StrDeserializer};
use serde::de::IntoDeserializer;
use serde::Deserialize;

/// Parses `text` as the choice `T` by its serde names; the error lists the accepted values
/// (serde's "unknown variant `x`, expected one of …").
pub(crate) fn parse<'de, T: Deserialize<'de>>(text: &'de str) -> Result<T, String> {
    let de: StrDeserializer<'de, ValueError> = text.into_deserializer();
    T::deserialize(de).map_err(|e| e.to_string())
}

/// `Display` (the serde name) and `FromStr` (by serde names) for configuration choices.
macro_rules! choice_strings {
    ($($ty:ty),* $(,)?) => {$(
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                $crate::config::choice::parse(s)
            }
        }
    )*};
}
pub(crate) use choice_strings;

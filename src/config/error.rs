//! Errors raised while reading and checking input files.

use std::fmt;

/// An input file could not be read, parsed or validated.
///
/// Every variant names the file; parse and validation errors also name the field path
/// (`area.breakdown.core`), the offending value and what was expected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read at all.
    #[error("{file}: cannot read file: {message}")]
    Unreadable { file: String, message: String },
    /// The file is not well-formed YAML of the expected shape (unknown field, missing field,
    /// wrong type). `path` is the field path where the parser stopped.
    #[error("{file}: {path}: {message}")]
    Parse {
        file: String,
        path: String,
        message: String,
    },
    /// A field parsed but its value is not acceptable.
    #[error("{file}: {path} = {value}: {expected}")]
    Invalid {
        file: String,
        path: String,
        value: String,
        expected: String,
    },
}

impl ConfigError {
    /// This error re-attributed to where a system's device count came from (`file`'s
    /// field `path`, or a command-line flag) when it is the system's complaint about that
    /// count (its field `devices`); the system file stays named in what was expected.
    /// Other errors are returned unchanged.
    pub fn given_as(self, file: &str, path: &str) -> Self {
        match self {
            ConfigError::Invalid {
                file: system,
                path: field,
                value,
                expected,
            } if field == "devices" => ConfigError::Invalid {
                file: file.to_string(),
                path: path.to_string(),
                value,
                expected: format!("{expected} (the system in {system})"),
            },
            other => other,
        }
    }

    /// Shorthand for [`ConfigError::Invalid`].
    pub fn invalid(
        file: &str,
        path: impl Into<String>,
        value: impl fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        ConfigError::Invalid {
            file: file.to_string(),
            path: path.into(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }
}

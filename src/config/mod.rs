//! Reading input files: the one module that calls `serde_yaml`.
//!
//! Files are parsed into the raw structs of [`raw`] (unit-suffixed keys, unknown fields
//! rejected) and then checked and converted into the model's domain types by
//! [`crate::tech`], [`crate::template`] and [`crate::budget`]. Errors name the file, the field
//! path, the value and what was expected.
//!
//! Imports only [`crate::domain`]. A new input file kind: its raw struct in [`raw`]
//! (`deny_unknown_fields`, unit in every key), then its checked type in the stage that owns it.

mod error;
pub mod raw;
mod source;

pub use error::ConfigError;
pub use source::{is_file, normalize, reads, InMemoryFiles, Source, SHIPPED};

use std::any::{Any, TypeId};
use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};

use rustc_hash::FxHashMap;
use serde::de::DeserializeOwned;

/// The only file-format version this build reads.
pub const VERSION: u32 = 1;

/// The most parsed texts [`parse_yaml`] keeps; when full it forgets them all.
pub const MAX_PARSED: usize = 256;

/// The longest text [`parse_yaml`] keeps (the shipped files are under 20 KiB): at most
/// [`MAX_PARSED`] x 256 KiB = 64 MiB kept.
pub const MAX_PARSED_TEXT_BYTES: usize = 256 << 10;

/// Parsed texts, by the type they were parsed into and the text's hash: the text itself, to
/// tell texts of one hash apart, and its value.
type Parsed = FxHashMap<(TypeId, u64), (String, Box<dyn Any + Send + Sync>)>;

/// Texts parsed before, so that a program calling the commands again and again (the Python
/// package, a sweep's workers) parses each input once: YAML parsing costs more than a
/// prediction (about 0.1 ms per kilobyte). Only successful parses are kept; a value depends
/// on the text alone, so the answer is the same bytes.
static PARSED: Mutex<Option<Parsed>> = Mutex::new(None);

/// Parses YAML text from `file` into `T`, reporting the field path of any error. A text
/// parsed into `T` before is not parsed again ([`MAX_PARSED`]).
pub fn parse_yaml<T>(file: &str, text: &str) -> Result<T, ConfigError>
where
    T: DeserializeOwned + Clone + Send + Sync + 'static,
{
    let key = (TypeId::of::<T>(), rustc_hash::FxBuildHasher.hash_one(text));
    let known = PARSED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|parsed| parsed.get(&key))
        .filter(|(known, _)| known == text)
        .and_then(|(_, value)| value.downcast_ref::<T>())
        .cloned();
    if let Some(value) = known {
        return Ok(value);
    }
    let value: T = parse_yaml_text(file, text)?;
    if text.len() > MAX_PARSED_TEXT_BYTES {
        return Ok(value);
    }
    let mut parsed = PARSED.lock().unwrap_or_else(PoisonError::into_inner);
    let parsed = parsed.get_or_insert_with(FxHashMap::default);
    if parsed.len() >= MAX_PARSED {
        parsed.clear();
    }
    parsed.insert(key, (text.to_string(), Box::new(value.clone())));
    Ok(value)
}

/// [`parse_yaml`] without the memo.
fn parse_yaml_text<T: DeserializeOwned>(file: &str, text: &str) -> Result<T, ConfigError> {
    check_shape(file, text)?;
    let deserializer = serde_yaml::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let mut path = e.path().to_string();
        let mut message = e.into_inner().to_string();
        // serde_yaml already prefixes nested errors with the path; keep it once. Where the
        // tracked path has a `?` (a map keyed by an enum, such as a precision), serde_yaml's
        // own names the key: take it.
        if let Some((head, rest)) = message.split_once(": ") {
            let known = path.split(".?").next().unwrap_or("");
            if !head.contains(' ') && path.starts_with(head) {
                message = rest.to_string();
            } else if !head.contains(' ') && path.contains('?') && head.starts_with(known) {
                path = head.to_string();
                message = rest.to_string();
            }
        }
        ConfigError::Parse {
            file: file.to_string(),
            path: field_path(path),
            message,
        }
    })?;
    Ok(value)
}

/// The largest configuration file read, bytes (the shipped ones are under 20 KiB).
pub const MAX_FILE_BYTES: usize = 16 << 20;

/// The deepest nesting of flow collections (`[`, `{`) and the widest indentation a
/// configuration file may have: the YAML parser's time grows with the square of the depth
/// (100,000 levels took over a minute), and no configuration needs more than a few.
pub const MAX_NESTING: usize = 64;
pub const MAX_INDENT: usize = 256;

/// Refuses, before parsing, a file too large or nested too deep to be a configuration.
fn check_shape(file: &str, text: &str) -> Result<(), ConfigError> {
    let fail = |what: String, expected: String| {
        Err(ConfigError::invalid(file, "(top level)", what, expected))
    };
    if text.len() > MAX_FILE_BYTES {
        return fail(
            format!("{} bytes", text.len()),
            format!("a file of at most {MAX_FILE_BYTES} bytes"),
        );
    }
    let (mut depth, mut deepest) = (0usize, 0usize);
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        if indent > MAX_INDENT {
            return fail(
                format!("line {} indented {indent} columns", n + 1),
                format!("at most {MAX_INDENT} columns of indentation"),
            );
        }
        // Flow brackets outside quotes and comments.
        let mut quote: Option<char> = None;
        let mut previous = ' ';
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '#') if previous.is_whitespace() => break,
                (None, '[' | '{') => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
            previous = c;
        }
        if deepest > MAX_NESTING {
            return fail(
                format!("line {} nested {deepest} levels deep", n + 1),
                format!("at most {MAX_NESTING} levels of [ ] and {{ }}"),
            );
        }
    }
    Ok(())
}

/// A serde_path_to_error path as errors print it.
fn field_path(path: String) -> String {
    if path.is_empty() || path == "." {
        "(top level)".to_string()
    } else {
        path
    }
}

/// Parses JSON text from `file` into `T` (architectures written by `generate --json`, a
/// sweep's journal lines), reporting the field path of any error; nothing but whitespace
/// may follow the value.
pub fn parse_json<T: DeserializeOwned>(file: &str, text: &str) -> Result<T, ConfigError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        ConfigError::Parse {
            file: file.to_string(),
            path: field_path(path),
            message: e.into_inner().to_string(),
        }
    })?;
    deserializer.end().map_err(|e| ConfigError::Parse {
        file: file.to_string(),
        path: "(after the value)".to_string(),
        message: e.to_string(),
    })?;
    Ok(value)
}

/// A number as an error message shows it: in scientific notation when very large or very
/// small (`1e308`, not three hundred digits).
pub fn number(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-4..1e15).contains(&a) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// Checks numeric fields of one file, building errors that name the file and field path.
pub struct Checker<'a> {
    pub file: &'a str,
}

impl Checker<'_> {
    /// `version` must be [`VERSION`].
    pub fn version(&self, version: u32) -> Result<(), ConfigError> {
        if version == VERSION {
            Ok(())
        } else {
            Err(ConfigError::invalid(
                self.file,
                "version",
                version,
                format!("this build reads version {VERSION}"),
            ))
        }
    }

    /// A finite number `>= 0`.
    pub fn non_negative(&self, path: &str, value: f64) -> Result<f64, ConfigError> {
        if value.is_finite() && value >= 0.0 {
            Ok(value)
        } else {
            Err(ConfigError::invalid(
                self.file,
                path,
                number(value),
                "expected a finite number >= 0",
            ))
        }
    }

    /// A finite number `> 0`.
    pub fn positive(&self, path: &str, value: f64) -> Result<f64, ConfigError> {
        if value.is_finite() && value > 0.0 {
            Ok(value)
        } else {
            Err(ConfigError::invalid(
                self.file,
                path,
                number(value),
                "expected a finite number > 0",
            ))
        }
    }

    /// A finite number in `[lo, hi]`.
    pub fn within(&self, path: &str, value: f64, lo: f64, hi: f64) -> Result<f64, ConfigError> {
        if value.is_finite() && value >= lo && value <= hi {
            Ok(value)
        } else {
            Err(ConfigError::invalid(
                self.file,
                path,
                number(value),
                format!("expected a number in [{}, {}]", number(lo), number(hi)),
            ))
        }
    }

    /// `[threshold, efficiency]` steps of an efficiency table (a pinned processor's):
    /// thresholds >= 0 strictly descending to 0, so that every size has an efficiency, and
    /// efficiencies in (0, 1]. Returns `(threshold x unit, efficiency)`.
    pub fn steps(
        &self,
        path: &str,
        steps: &[[f64; 2]],
        unit: f64,
    ) -> Result<Vec<(f64, f64)>, ConfigError> {
        let mut out: Vec<(f64, f64)> = Vec::with_capacity(steps.len());
        for (i, [from, efficiency]) in steps.iter().enumerate() {
            let from = self.non_negative(&format!("{path}[{i}][0]"), *from)?;
            if !(efficiency.is_finite() && *efficiency > 0.0 && *efficiency <= 1.0) {
                return Err(ConfigError::invalid(
                    self.file,
                    format!("{path}[{i}][1]"),
                    number(*efficiency),
                    "an efficiency in (0, 1]",
                ));
            }
            if out
                .last()
                .is_some_and(|(previous, _)| from * unit >= *previous)
            {
                return Err(ConfigError::invalid(
                    self.file,
                    format!("{path}[{i}][0]"),
                    number(from),
                    "thresholds strictly descending",
                ));
            }
            out.push((from * unit, *efficiency));
        }
        if out.last().map(|s| s.0) != Some(0.0) {
            return Err(ConfigError::invalid(
                self.file,
                path,
                format!("{} steps", out.len()),
                "steps descending to a threshold of 0, so that every size has an efficiency",
            ));
        }
        Ok(out)
    }

    /// A count from 1 to `max`.
    pub fn count_in(&self, path: &str, value: u64, max: u64) -> Result<u64, ConfigError> {
        if (1..=max).contains(&value) {
            Ok(value)
        } else {
            Err(ConfigError::invalid(
                self.file,
                path,
                value,
                format!("expected an integer from 1 to {max}"),
            ))
        }
    }

    /// An integer `> 0`.
    pub fn positive_count(&self, path: &str, value: u64) -> Result<u64, ConfigError> {
        if value > 0 {
            Ok(value)
        } else {
            Err(ConfigError::invalid(
                self.file,
                path,
                value,
                "expected an integer > 0",
            ))
        }
    }
}

/// YAML text of `value`: the writing half of this module (optimized budgets).
pub fn to_yaml<T: serde::Serialize>(value: &T) -> String {
    serde_yaml::to_string(value).expect("plain data serialises to YAML")
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, then a rename, so a
/// reader never sees a half-written file.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let name = path
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir
        .map_or_else(std::path::PathBuf::new, |d| d.to_path_buf())
        .join(format!(".{name}.tmp-{}", std::process::id()));
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    // A failed write (a full disk) or rename leaves no temporary file behind.
    written
        .and_then(|()| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

/// Sets the field at `path` (`a.b[2].c`) of YAML `text` to `value`, for sweeps over any
/// field of an input file. Every step but the last must exist; the last may be new (the
/// file's loader then rejects unknown fields by name). Errors name the file, the path and
/// the keys that exist where it went wrong.
pub fn edit_yaml(
    file: &str,
    text: &str,
    path: &str,
    value: &serde_json::Value,
) -> Result<String, ConfigError> {
    let mut root: serde_yaml::Value = parse_yaml(file, text)?;
    let steps = parse_field_path(path).ok_or_else(|| {
        ConfigError::invalid(
            file,
            path,
            "",
            "a field path such as area.breakdown.core or memory[3].technology",
        )
    })?;
    let new: serde_yaml::Value = serde_yaml::to_value(value)
        .map_err(|e| ConfigError::invalid(file, path, value, e.to_string()))?;
    let mut here = &mut root;
    let mut walked = String::new();
    for (i, step) in steps.iter().enumerate() {
        let last = i + 1 == steps.len();
        here = match step {
            FieldStep::Key(k) => {
                let map = here.as_mapping_mut().ok_or_else(|| {
                    ConfigError::invalid(file, path, k, format!("{walked} is not a mapping"))
                })?;
                let key = serde_yaml::Value::String(k.clone());
                if !map.contains_key(&key) && !last {
                    let keys: Vec<String> = map
                        .keys()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect();
                    return Err(ConfigError::invalid(
                        file,
                        path,
                        k,
                        format!(
                            "a field of {}: one of [{}]",
                            if walked.is_empty() {
                                "the file"
                            } else {
                                &walked
                            },
                            keys.join(", ")
                        ),
                    ));
                }
                map.entry(key).or_insert(serde_yaml::Value::Null)
            }
            FieldStep::Index(n) => {
                let seq = here.as_sequence_mut().ok_or_else(|| {
                    ConfigError::invalid(file, path, n, format!("{walked} is not a list"))
                })?;
                let len = seq.len();
                seq.get_mut(*n).ok_or_else(|| {
                    ConfigError::invalid(
                        file,
                        path,
                        n,
                        format!("an index of {walked}, which has {len} entries"),
                    )
                })?
            }
        };
        walked.push_str(&match step {
            FieldStep::Key(k) if walked.is_empty() => k.clone(),
            FieldStep::Key(k) => format!(".{k}"),
            FieldStep::Index(n) => format!("[{n}]"),
        });
    }
    *here = new;
    Ok(serde_yaml::to_string(&root).expect("plain data serialises to YAML"))
}

enum FieldStep {
    Key(String),
    Index(usize),
}

/// `a.b[2].c` -> [Key a, Key b, Index 2, Key c].
fn parse_field_path(path: &str) -> Option<Vec<FieldStep>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (name, rest) = part.split_once('[').map_or((part, ""), |(a, b)| (a, b));
        if name.is_empty() {
            return None;
        }
        out.push(FieldStep::Key(name.to_string()));
        let mut rest = rest;
        while !rest.is_empty() {
            let (index, tail) = rest.split_once(']')?;
            out.push(FieldStep::Index(index.parse().ok()?));
            rest = tail.strip_prefix('[').unwrap_or(tail);
            if !tail.is_empty() && !tail.starts_with('[') {
                return None;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parsed_text_is_kept_and_a_changed_one_parsed_anew() {
        let text = "nominal_v: 1\nthreshold_v: 0.3\nmin_v: 0.5\nmax_v: 1.2\n";
        let first = parse_yaml::<raw::VoltageRaw>("f.yaml", text).unwrap();
        let again = parse_yaml::<raw::VoltageRaw>("g.yaml", text).unwrap();
        assert_eq!(format!("{first:?}"), format!("{again:?}"));
        let changed = parse_yaml::<raw::VoltageRaw>("f.yaml", &text.replace("1.2", "1.1"));
        assert_eq!(changed.unwrap().max_v, 1.1);
        // A bad text is reported each time, under the name it was read by.
        let bad = text.replace("1.2", "x");
        for file in ["a.yaml", "b.yaml"] {
            let e = parse_yaml::<raw::VoltageRaw>(file, &bad).unwrap_err();
            assert!(e.to_string().starts_with(file), "{e}");
        }
        // Bounded: more texts than it keeps still parse right.
        for i in 0..MAX_PARSED + 3 {
            let t = format!("nominal_v: {i}\nthreshold_v: 0.3\nmin_v: 0.5\nmax_v: 1.2\n");
            let v = parse_yaml::<raw::VoltageRaw>("f.yaml", &t).unwrap();
            assert_eq!(v.nominal_v, i as f64);
            assert!(PARSED.lock().unwrap().as_ref().unwrap().len() <= MAX_PARSED);
        }
    }

    #[test]
    fn parse_errors_carry_the_field_path() {
        let err = parse_yaml::<raw::VoltageRaw>(
            "f.yaml",
            "nominal_v: 1\nthreshold_v: 0.3\nmin_v: 0.5\nmax_v: x\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("f.yaml: max_v: invalid type"), "{err}");
    }
}

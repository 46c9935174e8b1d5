//! Importers: the input files of DeepFlow (YAML) and Calculon (JSON), as their users have
//! them, turned into stackflow's own files.
//!
//! An import reads a foreign file, checks it, and writes stackflow YAML whose every value
//! carries a comment naming the foreign field it came from. What has no counterpart is
//! listed in [`Imported::notes`], never dropped silently; what cannot be represented at all
//! fails with an error naming the file, field, value and what stackflow would need.
//!
//! - [`deepflow`]: `hw-*.yaml` -> budget + template + technology files; `model-*.yaml`
//!   (GEMM, LSTM, LLM) -> a workload.
//! - [`calculon`]: `models/*.json` -> a transformer workload; `systems/*.json` -> a system
//!   whose accelerator is pinned (`processor:`) rather than derived from a budget;
//!   `examples/*.json` executions -> a strategy.
//!
//! [`detect`] tells the formats apart, so that `predict --workload model.json` reads a
//! foreign file in-line.
//!
//! Imports only [`crate::domain`] and [`crate::config`]: an import writes text, and the
//! stages that own each file kind read it back as they read any other file. A new foreign
//! format: a submodule with its raw structs (parsed through [`crate::config`]), a variant of
//! [`Format`] and its detection in [`detect`].

pub mod calculon;
pub mod deepflow;

use std::collections::BTreeSet;

use crate::config::{parse_json, parse_yaml, ConfigError};

/// What a file an import writes holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Budget,
    Template,
    Technology,
    Workload,
    System,
    Strategy,
}

impl FileKind {
    pub fn name(self) -> &'static str {
        match self {
            FileKind::Budget => "budget",
            FileKind::Template => "template",
            FileKind::Technology => "technology",
            FileKind::Workload => "workload",
            FileKind::System => "system",
            FileKind::Strategy => "strategy",
        }
    }
}

/// One stackflow file an import writes.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedFile {
    /// File name, relative to the output folder (the files of one import refer to each
    /// other by these names).
    pub name: String,
    pub kind: FileKind,
    pub text: String,
}

/// The files one foreign file becomes, and what of it has no counterpart.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Imported {
    pub files: Vec<ImportedFile>,
    /// One line per foreign field (or value) that stackflow does not carry, and why.
    pub notes: Vec<String>,
}

/// The formats an input file may be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A stackflow file (it has `version:`).
    Stackflow,
    DeepflowHardware,
    DeepflowModel,
    CalculonModel,
    CalculonSystem,
    CalculonExecution,
    /// None of these: not a mapping, or a mapping of none of their keys (the loader of the
    /// file kind asked for reports what is wrong with it).
    Unknown,
}

impl Format {
    pub fn describe(self) -> &'static str {
        match self {
            Format::Stackflow => "a stackflow file",
            Format::DeepflowHardware => "a DeepFlow hardware file (hw-*.yaml)",
            Format::DeepflowModel => "a DeepFlow model file (model-*.yaml)",
            Format::CalculonModel => "a Calculon model (models/*.json)",
            Format::CalculonSystem => "a Calculon system (systems/*.json)",
            Format::CalculonExecution => "a Calculon execution (examples/*.json)",
            Format::Unknown => "a file of no format stackflow knows",
        }
    }
}

/// Which format `text` (the content of `file`) is in, by its top-level keys: `version` for
/// stackflow's own files; `model_param` for a DeepFlow model; `tech_param` or
/// `area_breakdown` for DeepFlow hardware; a JSON object with `num_blocks`, `matrix` or
/// `num_procs` for a Calculon model, system or execution; [`Format::Unknown`] otherwise.
pub fn detect(file: &str, text: &str) -> Format {
    let json = text.trim_start().starts_with('{');
    type Keys = std::collections::BTreeMap<String, serde::de::IgnoredAny>;
    let parsed = if json {
        parse_json::<Keys>(file, text).or_else(|_| parse_yaml::<Keys>(file, text))
    } else {
        parse_yaml::<Keys>(file, text)
    };
    let Ok(keys) = parsed else {
        return Format::Unknown;
    };
    let keys: BTreeSet<String> = keys.into_keys().collect();
    let has = |k: &str| keys.contains(k);
    if has("version") {
        Format::Stackflow
    } else if has("model_param") {
        Format::DeepflowModel
    } else if has("tech_param") || has("area_breakdown") {
        Format::DeepflowHardware
    } else if json && has("num_blocks") && has("hidden") {
        Format::CalculonModel
    } else if json && has("matrix") && has("networks") {
        Format::CalculonSystem
    } else if json && has("num_procs") {
        Format::CalculonExecution
    } else {
        Format::Unknown
    }
}

/// The error for a file of no known format: its top-level keys, what each format has.
pub fn unknown(file: &str, text: &str) -> ConfigError {
    type Keys = std::collections::BTreeMap<String, serde::de::IgnoredAny>;
    let value = match parse_yaml::<Keys>(file, text) {
        Ok(keys) => {
            let listed: Vec<&str> = keys.keys().map(String::as_str).take(8).collect();
            format!("{{{}}}", listed.join(", "))
        }
        Err(_) => "(not a YAML or JSON mapping)".to_string(),
    };
    ConfigError::invalid(
        file,
        "(top level)",
        value,
        "a stackflow file (with `version:`), a DeepFlow hardware or model file (tech_param or \
         model_param) or a Calculon model, system or execution (JSON with num_blocks, matrix \
         and networks, or num_procs)",
    )
}

/// A number as the YAML an import writes shows it (shortest round-trip form).
pub(crate) fn num(v: f64) -> String {
    // Twelve significant digits: no binary noise from the unit conversions (0.3022, not
    // 0.30219999999999997).
    let v: f64 = format!("{v:.11e}").parse().unwrap_or(v);
    let a = v.abs();
    if a != 0.0 && !(1e-4..1e12).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A line `key: value  # comment` at `indent` spaces.
pub(crate) fn line(out: &mut String, indent: usize, key: &str, value: &str, comment: &str) {
    use std::fmt::Write;
    let head = format!("{:indent$}{key}: {value}", "");
    if comment.is_empty() {
        let _ = writeln!(out, "{head}");
    } else {
        let _ = writeln!(out, "{head:<44} # {comment}");
    }
}

/// The name an import gives its files: the foreign file's stem (`hw-v100`).
pub(crate) fn stem(file: &str) -> String {
    std::path::Path::new(file)
        .file_stem()
        .map_or_else(|| "imported".into(), |s| s.to_string_lossy().into_owned())
}

//! Architecture: imports flow one way, down the pipeline that `src/lib.rs` lists, and the
//! command-line-only crates (`anyhow`, `indicatif`) stay in `src/cli/`.
//!
//! Every `crate::<module>` path in a module's code (comments aside) must name a module at or
//! above it in [`ORDER`]; a path to a later stage is an upward import and fails the test.

mod common;

use std::path::Path;

/// The pipeline, upstream first: a module may import only itself and the modules before it.
const ORDER: &[&str] = &[
    "domain",
    "violation",
    "config",
    "import",
    "tech",
    "template",
    "budget",
    "design",
    "generator",
    "workload",
    "perf",
    "network",
    "parallel",
    "distributed",
    "error",
    "opt",
    "study",
    "validate",
    "cli",
];

/// Crates that only the command line may use.
const CLI_ONLY: &[&str] = &["anyhow", "indicatif"];

fn rank(module: &str) -> Option<usize> {
    ORDER.iter().position(|m| *m == module)
}

/// The code of a source file without its comments (line comments and doc comments).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(i, line)| {
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        (!code.trim().is_empty()).then_some((i + 1, code))
    })
}

/// Every module named after `crate::` in `code`.
fn crate_paths(code: &str) -> Vec<&str> {
    code.match_indices("crate::")
        .filter(|(at, _)| {
            // `stackflow::crate::` never occurs; reject identifiers ending in "crate".
            !code[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
        })
        .map(|(at, _)| {
            let rest = &code[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// The violations in one file of module `module`: upward imports and CLI-only crates.
fn violations(file: &str, module: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some(own) = rank(module) else {
        out.push(format!(
            "{file}: module `{module}` is not in the pipeline order of tests/architecture.rs"
        ));
        return out;
    };
    for (line, code) in code_lines(text) {
        for target in crate_paths(code) {
            match rank(target) {
                Some(r) if r > own => out.push(format!(
                    "{file}:{line}: `{module}` imports `crate::{target}`, which comes after it \
                     in the pipeline"
                )),
                Some(_) => {}
                None => out.push(format!(
                    "{file}:{line}: `crate::{target}` is not a pipeline module"
                )),
            }
        }
        for name in CLI_ONLY.iter().filter(|_| module != "cli") {
            let used = code.match_indices(name).any(|(at, _)| {
                let before = code[..at].chars().next_back();
                let after = code[at + name.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && after.is_some_and(|c| c == ':')
            });
            if used {
                out.push(format!(
                    "{file}:{line}: `{name}` belongs to the command line (src/cli/) only"
                ));
            }
        }
    }
    out
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn imports_flow_down_the_pipeline() {
    let src = common::root().join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    let mut all = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&src).unwrap();
        let first = rel.iter().next().unwrap().to_str().unwrap();
        let module = first.trim_end_matches(".rs");
        if matches!(module, "lib" | "main") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        all.extend(violations(&format!("src/{}", rel.display()), module, &text));
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
}

#[test]
fn every_module_of_the_library_is_in_the_order() {
    let lib = std::fs::read_to_string(common::root().join("src/lib.rs")).unwrap();
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    let mut sorted_declared = declared.clone();
    sorted_declared.sort_unstable();
    let mut sorted_order = ORDER.to_vec();
    sorted_order.sort_unstable();
    assert_eq!(
        sorted_declared, sorted_order,
        "src/lib.rs declares these modules"
    );
}

#[test]
fn an_upward_import_is_caught() {
    let text =
        "//! docs may name crate::opt\nuse crate::config::Source;\nuse crate::opt::search;\n";
    assert_eq!(
        violations("src/perf/mod.rs", "perf", text),
        vec![
            "src/perf/mod.rs:3: `perf` imports `crate::opt`, which comes after it in the pipeline"
        ]
    );
    let inline = "fn f() -> crate::distributed::DistPrediction { todo!() }";
    assert_eq!(violations("src/network/mod.rs", "network", inline).len(), 1);
    let cli = "use indicatif::ProgressBar;\nfn f() -> anyhow::Result<()> { Ok(()) }";
    assert_eq!(violations("src/opt/mod.rs", "opt", cli).len(), 2);
    assert!(violations("src/opt/mod.rs", "opt", "use crate::network::Network;").is_empty());
}

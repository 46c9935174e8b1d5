//! Helpers shared by the integration-test binaries.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn rel_err(predicted: f64, expected: f64) -> f64 {
    (predicted - expected).abs() / expected.abs()
}

pub fn assert_close(what: &str, predicted: f64, expected: f64, tolerance: f64) {
    let e = rel_err(predicted, expected);
    assert!(
        e <= tolerance,
        "{what}: predicted {predicted:.6e}, expected {expected:.6e}, error {:.3}% > {:.3}%",
        e * 100.0,
        tolerance * 100.0
    );
}

/// Runs the `stackflow` binary from the repository root: (exit code, stdout, stderr).
pub fn stackflow(args: &[&str]) -> (i32, String, String) {
    stackflow_in(&root(), args)
}

/// Runs the `stackflow` binary from `dir`: (exit code, stdout, stderr).
pub fn stackflow_in(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stackflow"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A scratch directory under target/ for files a test writes.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Self {
        let dir = root().join("target").join("test-scratch").join(test);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

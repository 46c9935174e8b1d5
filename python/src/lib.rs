//! `stackflow._stackflow`: the compiled core of the Python package. It runs stackflow's
//! commands in-process through [`stackflow::cli::capture`], the same parsing, checks and code
//! path as the command line, and hands back each command's `--json` answer as Python objects.
//! The package's Python face (`stackflow/__init__.py`) turns keyword arguments into the
//! command line and dicts into in-memory input files; add a new command there.

use std::path::PathBuf;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use stackflow::config::InMemoryFiles;

// Named `stackflow.Error` in tracebacks: the package re-exports it.
create_exception!(
    stackflow,
    Error,
    PyException,
    "Bad input, or a command that could not run: the message names the file, field path, value \
     and what was expected, as the command line's error does."
);

/// Runs `stackflow ARGS` (ARGS ends with `--json`) with `files` (name, YAML or JSON text) held
/// in memory under their names, the GIL released while it runs. Returns (exit code, answer):
/// 0 done, 2 a failed validation, 3 nothing feasible.
#[pyfunction]
#[pyo3(signature = (args, files = Vec::new()))]
fn run(
    py: Python<'_>,
    args: Vec<String>,
    files: Vec<(String, String)>,
) -> PyResult<(i32, Py<PyAny>)> {
    let captured = py.detach(move || {
        let _held = (!files.is_empty()).then(|| {
            InMemoryFiles::hold(
                files
                    .into_iter()
                    .map(|(name, text)| (PathBuf::from(name), text))
                    .collect(),
            )
        });
        let argv = std::iter::once("stackflow".to_string()).chain(args);
        stackflow::cli::capture(argv).map_err(|e| stackflow::cli::describe(&e))
    });
    match captured {
        Ok(c) => {
            let answer = pythonize::pythonize(py, &c.json)
                .map_err(|e| Error::new_err(format!("handing the answer to Python: {e}")))?;
            Ok((c.outcome.exit_code(), answer.unbind()))
        }
        Err(message) => Err(Error::new_err(message)),
    }
}

/// The long flags of a subcommand, as the command line spells them (without `--`).
#[pyfunction]
fn flags(command: &str) -> PyResult<Vec<String>> {
    stackflow::cli::flags(command)
        .ok_or_else(|| Error::new_err(format!("{command}: no such stackflow command")))
}

/// The columns of a sweep's results.csv after `index` and the axes, in order.
#[pyfunction]
fn result_columns() -> Vec<&'static str> {
    stackflow::study::RESULT_COLUMNS.to_vec()
}

#[pymodule]
fn _stackflow(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(flags, m)?)?;
    m.add_function(wrap_pyfunction!(result_columns, m)?)?;
    Ok(())
}

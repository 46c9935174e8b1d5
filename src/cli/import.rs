//! `stackflow import deepflow|calculon FILE...`: foreign input files as stackflow's, and the
//! in-line reading of them by `predict`.

use std::path::{Path, PathBuf};

use crate::config::{write_atomic, Source};
use crate::import::{self, calculon, deepflow, Format, Imported};
use anyhow::{bail, Context};

/// Which tool the files come from.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tool {
    /// DeepFlow (nanocad-lab/DeepFlow): hw-*.yaml and model-*.yaml.
    Deepflow,
    /// Calculon (calculon-ai/calculon): models/*.json, systems/*.json, examples/*.json.
    Calculon,
}

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The tool the files come from.
    #[arg(value_enum)]
    tool: Tool,
    /// Input files (a Calculon model takes its batch and datatype from an execution given
    /// beside it).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Folder for the stackflow files (created if missing).
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Print what was written and what has no counterpart as JSON.
    #[arg(long)]
    json: bool,
}

/// A file's text and format.
pub(crate) fn read(path: &Path) -> anyhow::Result<(String, String, Format)> {
    let file = path.display().to_string();
    let text = Source::Disk.read(path)?;
    let format = import::detect(&file, &text);
    Ok((file, text, format))
}

pub(crate) fn run(a: Args) -> anyhow::Result<()> {
    let mut inputs = Vec::new();
    for path in &a.files {
        let (file, text, format) = read(path)?;
        if format == Format::Unknown {
            return Err(import::unknown(&file, &text).into());
        }
        let expected = match a.tool {
            Tool::Deepflow => matches!(format, Format::DeepflowHardware | Format::DeepflowModel),
            Tool::Calculon => matches!(
                format,
                Format::CalculonModel | Format::CalculonSystem | Format::CalculonExecution
            ),
        };
        if !expected {
            bail!(
                "{file}: (top level) = {}: expected a {} file",
                format.describe(),
                match a.tool {
                    Tool::Deepflow => "DeepFlow hardware (hw-*.yaml) or model (model-*.yaml)",
                    Tool::Calculon => "Calculon model, system or execution (JSON)",
                }
            );
        }
        inputs.push((file, text, format));
    }
    // A Calculon model takes its batch from the one execution given beside it.
    let executions: Vec<(&str, calculon::Execution)> = inputs
        .iter()
        .filter(|i| i.2 == Format::CalculonExecution)
        .map(|(f, t, _)| Ok((f.as_str(), calculon::read_execution(f, t)?)))
        .collect::<anyhow::Result<_>>()?;
    let execution = match executions.as_slice() {
        [one] => Some((one.0, &one.1)),
        _ => None,
    };
    if executions.len() > 1 && inputs.iter().any(|i| i.2 == Format::CalculonModel) {
        bail!(
            "{}: more than one Calculon execution: give one beside the models, whose batch and \
             datatype they take",
            executions[1].0
        );
    }
    let mut imports = Vec::new();
    for (file, text, format) in &inputs {
        let imported = match format {
            Format::DeepflowHardware => deepflow::import_hardware(file, text)?,
            Format::DeepflowModel => deepflow::import_model(file, text)?,
            Format::CalculonModel => calculon::import_model(file, text, execution)?,
            Format::CalculonSystem => calculon::import_system(file, text, execution)?,
            Format::CalculonExecution => {
                let (_, e) = executions
                    .iter()
                    .find(|(f, _)| f == file)
                    .expect("every execution was read above");
                calculon::strategy(file, e)
            }
            Format::Stackflow | Format::Unknown => unreachable!("refused above"),
        };
        imports.push((file, *format, imported));
    }
    // Two inputs of the same name (from different folders) would write the same files, the
    // later over the earlier: refused before anything is written.
    let mut names: Vec<(&str, &str)> = Vec::new();
    for (file, _, imported) in &imports {
        for f in &imported.files {
            if let Some((earlier, _)) = names.iter().find(|(_, n)| *n == f.name) {
                anyhow::bail!(
                    "{file} and {earlier} both import as {} in {}: import them into \
                     different --out folders (or rename one)",
                    f.name,
                    a.out.display()
                );
            }
            names.push((file, &f.name));
        }
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("creating the output folder {}", a.out.display()))?;
    let mut report = Vec::new();
    for (file, format, imported) in &imports {
        if !a.json {
            println!("{file} ({}):", format.describe());
        }
        let mut written = Vec::new();
        for f in &imported.files {
            let path = a.out.join(&f.name);
            write_atomic(&path, f.text.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
            if !a.json {
                println!("  wrote {} ({})", path.display(), f.kind.name());
            }
            written.push(
                serde_json::json!({"path": path.display().to_string(), "kind": f.kind.name()}),
            );
        }
        if !a.json {
            print_notes(imported);
        }
        report.push(serde_json::json!({
            "file": file,
            "format": format.describe(),
            "wrote": written,
            "not_carried": imported.notes,
        }));
    }
    if a.json {
        super::print_json(&serde_json::json!({ "imports": report }))?;
    }
    Ok(())
}

fn print_notes(imported: &Imported) {
    if !imported.notes.is_empty() {
        println!("  not carried over:");
        for n in &imported.notes {
            println!("  - {n}");
        }
    }
}

// ---------------------------------------------------------------- in-line reading

/// A Calculon execution named by `--strategy` (a JSON file), read and checked.
pub(crate) fn execution(
    strategy: Option<&str>,
) -> anyhow::Result<Option<(String, calculon::Execution)>> {
    let Some(text) = strategy else {
        return Ok(None);
    };
    let path = Path::new(text);
    if !(path.extension().is_some_and(|e| e == "json") && path.is_file()) {
        return Ok(None);
    }
    let (file, text, format) = read(path)?;
    match format {
        Format::CalculonExecution => Ok(Some((
            file.clone(),
            calculon::read_execution(&file, &text)?,
        ))),
        other => bail!(
            "{file}: (top level) = {}: --strategy takes a strategy (YAML, a string) or a \
             Calculon execution (examples/*.json)",
            other.describe()
        ),
    }
}

/// The workload at `path`: a stackflow workload, or a DeepFlow or Calculon model imported
/// in-line (a Calculon model's batch and datatype from `execution`).
pub(crate) fn workload(
    source: Source,
    path: &Path,
    execution: Option<&(String, calculon::Execution)>,
) -> anyhow::Result<crate::workload::Workload> {
    use crate::workload::Workload;
    if source == Source::Embedded {
        return Ok(Workload::load(source, path)?);
    }
    let (file, text, format) = read(path)?;
    let imported = match format {
        Format::Stackflow | Format::Unknown => return Ok(Workload::from_yaml(&file, &text)?),
        Format::DeepflowModel => deepflow::import_model(&file, &text)?,
        Format::CalculonModel => {
            let Some((exec_file, e)) = execution else {
                bail!(
                    "{file}: a Calculon model has no batch or datatype: give its execution \
                     with --strategy execution.json (or import it with one: stackflow import \
                     calculon {file} execution.json)"
                );
            };
            calculon::import_model(&file, &text, Some((exec_file, e)))?
        }
        other => bail!(
            "{file}: (top level) = {}: expected a workload (stackflow, a DeepFlow model-*.yaml \
             or a Calculon models/*.json)",
            other.describe()
        ),
    };
    Ok(Workload::from_yaml(&file, &imported.files[0].text)?)
}

/// The system at `path`: a stackflow system file, or a Calculon system imported in-line.
pub(crate) fn system(
    path: &Path,
    execution: Option<&(String, calculon::Execution)>,
) -> anyhow::Result<crate::network::System> {
    use crate::network::System;
    let (file, text, format) = read(path)?;
    match format {
        Format::Stackflow | Format::Unknown => Ok(System::parse(Source::Disk, path, &text)?),
        Format::CalculonSystem => {
            let execution = execution.map(|(f, e)| (f.as_str(), e));
            let imported = calculon::import_system(&file, &text, execution)?;
            Ok(System::parse(Source::Disk, path, &imported.files[0].text)?)
        }
        other => bail!(
            "{file}: (top level) = {}: expected a system (stackflow, or a Calculon \
             systems/*.json)",
            other.describe()
        ),
    }
}

/// The budget at `path`, with a DeepFlow hardware file imported in-line: its three files
/// are written to a folder of their own under the system's temporary folder, whose budget
/// is returned.
pub(crate) fn budget(path: &Path) -> anyhow::Result<PathBuf> {
    let (file, text, format) = read(path)?;
    if format != Format::DeepflowHardware {
        return Ok(path.to_path_buf());
    }
    let imported = deepflow::import_hardware(&file, &text)?;
    let dir = std::env::temp_dir().join(format!("stackflow-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut budget = None;
    for f in &imported.files {
        let p = dir.join(&f.name);
        write_atomic(&p, f.text.as_bytes()).with_context(|| format!("writing {}", p.display()))?;
        if f.kind == import::FileKind::Budget {
            budget = Some(p);
        }
    }
    Ok(budget.expect("a hardware import writes a budget"))
}

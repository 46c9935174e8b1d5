//! Where input files come from: the file system, or the copies of the shipped files that are
//! embedded in the binary (so that `stackflow generate` works from any directory).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};

use super::ConfigError;

/// Every shipped input file, embedded at compile time, keyed by its path in the repository.
/// Input files read through [`Source::read`] since the program started.
static READS: AtomicU64 = AtomicU64::new(0);

/// How many input files this process has read through [`Source::read`] (either source): a
/// test that an evaluation does no file I/O compares it before and after.
pub fn reads() -> u64 {
    READS.load(Ordering::Relaxed)
}

pub const SHIPPED: &[(&str, &str)] = &[
    (
        "tech_libs/n16.yaml",
        include_str!("../../tech_libs/n16.yaml"),
    ),
    (
        "tech_libs/n12.yaml",
        include_str!("../../tech_libs/n12.yaml"),
    ),
    ("tech_libs/n7.yaml", include_str!("../../tech_libs/n7.yaml")),
    ("tech_libs/n5.yaml", include_str!("../../tech_libs/n5.yaml")),
    ("tech_libs/n3.yaml", include_str!("../../tech_libs/n3.yaml")),
    ("tech_libs/n2.yaml", include_str!("../../tech_libs/n2.yaml")),
    ("tech_libs/n1.yaml", include_str!("../../tech_libs/n1.yaml")),
    (
        "tech_libs/dram.yaml",
        include_str!("../../tech_libs/dram.yaml"),
    ),
    (
        "tech_libs/links.yaml",
        include_str!("../../tech_libs/links.yaml"),
    ),
    (
        "templates/gpu.yaml",
        include_str!("../../templates/gpu.yaml"),
    ),
    (
        "templates/gpu-v100.yaml",
        include_str!("../../templates/gpu-v100.yaml"),
    ),
    (
        "templates/gpu-a100.yaml",
        include_str!("../../templates/gpu-a100.yaml"),
    ),
    (
        "templates/gpu-h100.yaml",
        include_str!("../../templates/gpu-h100.yaml"),
    ),
    (
        "templates/dgx-a100.yaml",
        include_str!("../../templates/dgx-a100.yaml"),
    ),
    (
        "templates/tpu-v4-pod.yaml",
        include_str!("../../templates/tpu-v4-pod.yaml"),
    ),
    (
        "templates/dgx-h100.yaml",
        include_str!("../../templates/dgx-h100.yaml"),
    ),
    (
        "templates/h100-superpod-nvl.yaml",
        include_str!("../../templates/h100-superpod-nvl.yaml"),
    ),
    (
        "templates/tpu-v3.yaml",
        include_str!("../../templates/tpu-v3.yaml"),
    ),
    (
        "templates/tpu-v3-pod.yaml",
        include_str!("../../templates/tpu-v3-pod.yaml"),
    ),
    (
        "templates/zion.yaml",
        include_str!("../../templates/zion.yaml"),
    ),
    (
        "budgets/tpu-v3.yaml",
        include_str!("../../budgets/tpu-v3.yaml"),
    ),
    (
        "templates/tpu.yaml",
        include_str!("../../templates/tpu.yaml"),
    ),
    (
        "templates/waferscale.yaml",
        include_str!("../../templates/waferscale.yaml"),
    ),
    (
        "templates/mcm.yaml",
        include_str!("../../templates/mcm.yaml"),
    ),
    (
        "templates/gpu-a100-40gb.yaml",
        include_str!("../../templates/gpu-a100-40gb.yaml"),
    ),
    (
        "templates/zionex.yaml",
        include_str!("../../templates/zionex.yaml"),
    ),
    (
        "templates/deepflow-package.yaml",
        include_str!("../../templates/deepflow-package.yaml"),
    ),
    (
        "budgets/a100-40gb.yaml",
        include_str!("../../budgets/a100-40gb.yaml"),
    ),
    (
        "templates/deepflow-node.yaml",
        include_str!("../../templates/deepflow-node.yaml"),
    ),
    (
        "templates/deepflow-sec9.yaml",
        include_str!("../../templates/deepflow-sec9.yaml"),
    ),
    (
        "budgets/deepflow-sec9.yaml",
        include_str!("../../budgets/deepflow-sec9.yaml"),
    ),
    (
        "budgets/fig4-example.yaml",
        include_str!("../../budgets/fig4-example.yaml"),
    ),
    ("budgets/v100.yaml", include_str!("../../budgets/v100.yaml")),
    ("budgets/a100.yaml", include_str!("../../budgets/a100.yaml")),
    ("budgets/h100.yaml", include_str!("../../budgets/h100.yaml")),
    (
        "budgets/tpu-v4.yaml",
        include_str!("../../budgets/tpu-v4.yaml"),
    ),
    (
        "budgets/waferscale.yaml",
        include_str!("../../budgets/waferscale.yaml"),
    ),
    ("budgets/mcm.yaml", include_str!("../../budgets/mcm.yaml")),
    (
        "validation/cases.yaml",
        include_str!("../../validation/cases.yaml"),
    ),
    (
        "validation/megatron.yaml",
        include_str!("../../validation/megatron.yaml"),
    ),
    (
        "validation/serving.yaml",
        include_str!("../../validation/serving.yaml"),
    ),
    (
        "validation/serving-load.yaml",
        include_str!("../../validation/serving-load.yaml"),
    ),
    (
        "validation/tpu-v4-table3.yaml",
        include_str!("../../validation/tpu-v4-table3.yaml"),
    ),
    (
        "validation/gemm.yaml",
        include_str!("../../validation/gemm.yaml"),
    ),
    (
        "validation/nemo-llama3-70b-fp8.yaml",
        include_str!("../../validation/nemo-llama3-70b-fp8.yaml"),
    ),
    (
        "validation/nemo-llama3-70b-lora.yaml",
        include_str!("../../validation/nemo-llama3-70b-lora.yaml"),
    ),
    (
        "workloads/gemm-8192.yaml",
        include_str!("../../workloads/gemm-8192.yaml"),
    ),
    (
        "workloads/gemm-64k.yaml",
        include_str!("../../workloads/gemm-64k.yaml"),
    ),
    (
        "workloads/lstm-o1.yaml",
        include_str!("../../workloads/lstm-o1.yaml"),
    ),
    (
        "workloads/lstm-sec9.yaml",
        include_str!("../../workloads/lstm-sec9.yaml"),
    ),
    (
        "workloads/gpt-1.7b.yaml",
        include_str!("../../workloads/gpt-1.7b.yaml"),
    ),
    (
        "workloads/gpt3-175b.yaml",
        include_str!("../../workloads/gpt3-175b.yaml"),
    ),
    (
        "workloads/llama-65b.yaml",
        include_str!("../../workloads/llama-65b.yaml"),
    ),
    (
        "workloads/llm-moe.yaml",
        include_str!("../../workloads/llm-moe.yaml"),
    ),
    (
        "workloads/llama2-70b-decode.yaml",
        include_str!("../../workloads/llama2-70b-decode.yaml"),
    ),
    (
        "workloads/llama2-70b-serve.yaml",
        include_str!("../../workloads/llama2-70b-serve.yaml"),
    ),
    (
        "workloads/llama2-70b-speculative.yaml",
        include_str!("../../workloads/llama2-70b-speculative.yaml"),
    ),
    (
        "workloads/llama2-70b-int4.yaml",
        include_str!("../../workloads/llama2-70b-int4.yaml"),
    ),
    (
        "workloads/llama2-70b-lora.yaml",
        include_str!("../../workloads/llama2-70b-lora.yaml"),
    ),
    (
        "workloads/llama2-7b-serve.yaml",
        include_str!("../../workloads/llama2-7b-serve.yaml"),
    ),
    (
        "workloads/llama2-70b.yaml",
        include_str!("../../workloads/llama2-70b.yaml"),
    ),
    (
        "workloads/llama2-70b-8k.yaml",
        include_str!("../../workloads/llama2-70b-8k.yaml"),
    ),
    (
        "workloads/llama3-70b-128k.yaml",
        include_str!("../../workloads/llama3-70b-128k.yaml"),
    ),
    (
        "workloads/megatron-1t.yaml",
        include_str!("../../workloads/megatron-1t.yaml"),
    ),
    (
        "workloads/palm-540b.yaml",
        include_str!("../../workloads/palm-540b.yaml"),
    ),
    (
        "workloads/dlrm-a.yaml",
        include_str!("../../workloads/dlrm-a.yaml"),
    ),
    (
        "workloads/dlrm-a-inference.yaml",
        include_str!("../../workloads/dlrm-a-inference.yaml"),
    ),
    (
        "workloads/dlrm-b.yaml",
        include_str!("../../workloads/dlrm-b.yaml"),
    ),
    (
        "workloads/dlrm-a-transformer.yaml",
        include_str!("../../workloads/dlrm-a-transformer.yaml"),
    ),
    (
        "workloads/dlrm-a-moe.yaml",
        include_str!("../../workloads/dlrm-a-moe.yaml"),
    ),
    (
        "workloads/dlrm0-tpu.yaml",
        include_str!("../../workloads/dlrm0-tpu.yaml"),
    ),
];

/// Where to read files from. Paths named inside a file (a budget's template, a technology
/// file's includes) are resolved relative to that file, within the same source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The file system.
    Disk,
    /// The shipped files embedded in the binary, addressed by repository-relative path.
    Embedded,
}

impl Source {
    /// Reads `path` (already resolved) as text.
    pub fn read(self, path: &Path) -> Result<String, ConfigError> {
        READS.fetch_add(1, Ordering::Relaxed);
        match self {
            Source::Disk => match in_memory(path) {
                Some(text) => Ok(text),
                None => std::fs::read_to_string(path).map_err(|e| ConfigError::Unreadable {
                    file: path.display().to_string(),
                    message: e.to_string(),
                }),
            },
            Source::Embedded => {
                embedded(path)
                    .map(str::to_string)
                    .ok_or_else(|| ConfigError::Unreadable {
                        file: path.display().to_string(),
                        message: "no such embedded file (the binary embeds the files under \
                                  tech_libs/, templates/, budgets/, workloads/ and validation/)"
                            .into(),
                    })
            }
        }
    }

    /// Resolves `reference`, written at `field` of the file `from`, to a path that exists:
    /// a dangling reference is an error naming the file and field that hold it.
    pub fn referenced(
        self,
        from: &Path,
        field: &str,
        reference: &str,
    ) -> Result<PathBuf, ConfigError> {
        let path = self.resolve(from, reference);
        let exists = match self {
            Source::Disk => is_file(&path),
            Source::Embedded => embedded(&path).is_some(),
        };
        if exists {
            return Ok(path);
        }
        Err(ConfigError::invalid(
            &from.display().to_string(),
            field,
            reference,
            format!(
                "a file that exists, relative to this one ({} is not one{})",
                path.display(),
                if self == Source::Embedded {
                    " of the embedded files"
                } else {
                    ""
                }
            ),
        ))
    }

    /// Resolves `reference`, written inside `from`, to a path.
    pub fn resolve(self, from: &Path, reference: &str) -> PathBuf {
        let base = from.parent().unwrap_or_else(|| Path::new(""));
        let joined = base.join(reference);
        match self {
            Source::Disk => joined,
            Source::Embedded => normalize(&joined),
        }
    }
}

/// Whether `path` names an input file on disk or one held in memory ([`InMemoryFiles`]).
pub fn is_file(path: &Path) -> bool {
    in_memory(path).is_some() || path.is_file()
}

/// Input files given as text rather than on disk (the Python package's dict inputs), by the
/// name that stands for them: `Source::Disk` reads them before the file system, and the
/// paths they name resolve from the working directory (their name has no folder).
static MEMORY: RwLock<BTreeMap<PathBuf, String>> = RwLock::new(BTreeMap::new());

/// One caller at a time holds in-memory files, so that two callers' files of the same name
/// never mix.
static MEMORY_HOLDER: Mutex<()> = Mutex::new(());

/// The text of the in-memory file `path`, if one is held.
fn in_memory(path: &Path) -> Option<String> {
    let files = MEMORY.read().unwrap_or_else(PoisonError::into_inner);
    if files.is_empty() {
        return None;
    }
    files.get(path).cloned()
}

/// In-memory input files, held until this value drops: while held, a `Source::Disk` read
/// of one of their names gets its text.
pub struct InMemoryFiles {
    names: Vec<PathBuf>,
    _hold: MutexGuard<'static, ()>,
}

impl InMemoryFiles {
    /// Holds `files` (name, text), waiting while another caller holds its own.
    pub fn hold(files: Vec<(PathBuf, String)>) -> InMemoryFiles {
        let hold = MEMORY_HOLDER.lock().unwrap_or_else(PoisonError::into_inner);
        let mut memory = MEMORY.write().unwrap_or_else(PoisonError::into_inner);
        let names = files.iter().map(|(name, _)| name.clone()).collect();
        memory.extend(files);
        InMemoryFiles { names, _hold: hold }
    }
}

impl Drop for InMemoryFiles {
    fn drop(&mut self) {
        let mut memory = MEMORY.write().unwrap_or_else(PoisonError::into_inner);
        for name in &self.names {
            memory.remove(name);
        }
    }
}

/// The embedded file at `path` (normalized), if the binary holds one.
fn embedded(path: &Path) -> Option<&'static str> {
    let key = normalize(path);
    SHIPPED
        .iter()
        .find(|(name, _)| Path::new(name) == key)
        .map(|(_, text)| *text)
}

/// Removes `.` and resolves `..` lexically (embedded paths have no symlinks).
/// `path` with `.` and `..` folded away (lexically).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            // `..` leaves a folder named before it; with none left (a relative path that
            // starts above the working folder) it stays.
            Component::ParentDir => {
                let leaves = matches!(out.components().next_back(), Some(Component::Normal(_)));
                if leaves {
                    out.pop();
                } else if !matches!(out.components().next_back(), Some(Component::RootDir)) {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_paths_resolve_relative_to_the_referring_file() {
        let p = Source::Embedded.resolve(Path::new("budgets/v100.yaml"), "../templates/gpu.yaml");
        assert_eq!(p, PathBuf::from("templates/gpu.yaml"));
        assert!(Source::Embedded.read(&p).is_ok());
    }

    #[test]
    fn in_memory_files_read_as_disk_files_while_held() {
        let name = PathBuf::from("<test dict>");
        assert!(!is_file(&name));
        {
            let _held = InMemoryFiles::hold(vec![(name.clone(), "a: 1".into())]);
            assert!(is_file(&name));
            assert_eq!(Source::Disk.read(&name).unwrap(), "a: 1");
            // What it names resolves from the working directory, on disk.
            let r = Source::Disk.referenced(&name, "budget", "budgets/h100.yaml");
            assert_eq!(r.unwrap(), PathBuf::from("budgets/h100.yaml"));
        }
        assert!(!is_file(&name));
        assert!(Source::Disk.read(&name).is_err());
    }

    #[test]
    fn normalize_keeps_a_leading_parent() {
        let n = |p: &str| normalize(Path::new(p));
        assert_eq!(
            n("../s/../templates/x.yaml"),
            PathBuf::from("../templates/x.yaml")
        );
        assert_eq!(n("a/./b/../c"), PathBuf::from("a/c"));
        assert_eq!(n("../../x"), PathBuf::from("../../x"));
        assert_eq!(n("/a/../../x"), PathBuf::from("/x"));
    }

    #[test]
    fn every_shipped_file_is_embedded_under_its_own_path() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (name, text) in SHIPPED {
            let on_disk = std::fs::read_to_string(root.join(name)).unwrap();
            assert_eq!(&on_disk, text, "{name}");
        }
    }
}

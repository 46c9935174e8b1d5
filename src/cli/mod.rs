//! Command-line front end: parse arguments, load and check inputs, run, print.
//! The only place that uses `anyhow`; any error prints its chain and exits with code 2.

mod table;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use stackflow::config::Source;
use stackflow::design::{Design, DesignFiles};
use stackflow::generator::generate;

/// Budget used when `generate` gets none.
const DEFAULT_BUDGET: &str = "budgets/h100.yaml";

#[derive(Parser, Debug)]
#[command(
    name = "stackflow",
    version,
    about = "Cross-stack pathfinding for ML hardware"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Derive an accelerator (throughput, memories, networks) from a budget, template and
    /// technology library. With no arguments, uses the embedded budgets/h100.yaml.
    Generate {
        /// Budget file; it names its template and technology file.
        #[arg(long)]
        budget: Option<PathBuf>,
        /// Template file overriding the one the budget names.
        #[arg(long)]
        template: Option<PathBuf>,
        /// Technology file overriding the one the budget names.
        #[arg(long)]
        tech: Option<PathBuf>,
        /// Print JSON (a stable interface for scripts) instead of tables.
        #[arg(long)]
        json: bool,
    },
}

/// Runs the command line and returns the process exit code.
pub fn run() -> i32 {
    let cli = Cli::parse();
    match execute(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            2
        }
    }
}

fn execute(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Generate {
            budget,
            template,
            tech,
            json,
        } => {
            let (source, budget_path) = match &budget {
                Some(path) => (Source::Disk, path.clone()),
                None => (Source::Embedded, PathBuf::from(DEFAULT_BUDGET)),
            };
            let design = Design::load(DesignFiles {
                source,
                budget: &budget_path,
                template: template.as_deref(),
                tech: tech.as_deref(),
            })?;
            let arch = generate(&design);
            if json {
                println!("{}", serde_json::to_string_pretty(&arch)?);
            } else {
                if budget.is_none() {
                    println!(
                        "No --budget given: using the embedded default {} (template {}, technology {}).\n",
                        design.budget_file, design.template_file, design.tech_file
                    );
                }
                print!("{}", table::render(&design, &arch));
            }
            Ok(())
        }
    }
}

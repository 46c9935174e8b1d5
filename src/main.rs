//! The `stackflow` command line; see `stackflow --help`.

mod cli;

fn main() {
    std::process::exit(cli::run());
}

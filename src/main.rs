//! The `stackflow` command line; see `stackflow --help`.

mod cli;

/// The command line allocates through mimalloc: an evaluation builds and drops a few
/// hundred small reports, kernel times and names, and the system allocator's free lists
/// cost a quarter of a budget optimization's time. The library leaves the choice to the
/// program (the benches make the same one).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(cli::run());
}

//! The `stackflow` command line; see `stackflow --help`.

/// The command line allocates through mimalloc: an evaluation builds and drops a few
/// hundred small reports, kernel times and names, and the system allocator's free lists
/// cost a quarter of a budget optimization's time. The library leaves the choice to the
/// program (the benches make the same one).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    quiet_on_closed_pipe();
    std::process::exit(stackflow::cli::run());
}

/// A reader that stops reading (`stackflow ... | head`) closes the pipe under `println!`,
/// which panics; end quietly instead, as command-line tools do.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.contains("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info)
    }));
}

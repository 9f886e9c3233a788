//! The `demiurge` command: a thin binary over the library; see `cli/`.

mod cli;

fn main() -> std::process::ExitCode {
    // Started as the sandbox launcher: confine, then become the server (before any
    // thread exists: a user namespace needs a single-threaded process).
    if let Some(code) = demiurge_mcp::sandbox::launcher::run_if_invoked() {
        return code;
    }
    cli::main()
}

//! The `demiurge` command: a thin binary over the library; see `cli/`.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}

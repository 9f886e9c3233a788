//! `demiurge-sandbox`: the sandbox launcher alone. It does what `demiurge
//! __demiurge-sandbox` does (see `sandbox::launcher`), from a binary that holds little
//! more than that: it starts in a fraction of the time of the whole command, and every
//! confined start pays that time once.

fn main() -> std::process::ExitCode {
    demiurge_mcp::sandbox::launcher::run_if_invoked().unwrap_or_else(|| {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "demiurge-sandbox is started by the runtime, not by hand: it confines a server and then becomes it"
        );
        std::process::ExitCode::from(2)
    })
}

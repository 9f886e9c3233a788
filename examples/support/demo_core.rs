//! The Agent Core the examples build: one server, `demo`, which is the running example
//! itself started as `<example> demo-server` (the built-in demo MCP server).

/// Writes the core under `dir`; returns its root.
pub fn write(dir: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    let core = dir.join("core");
    std::fs::create_dir_all(core.join("agent/mcp"))?;
    std::fs::write(
        core.join("agent.yaml"),
        "capabilities:\n  defaults:\n    mcp.connect:demo: {scope: core}\n    mcp.call:demo: {scope: core}\n",
    )?;
    let exe = serde_json::to_string(&std::env::current_exe()?)?;
    std::fs::write(
        core.join("agent/mcp/demo.yaml"),
        format!("command: {exe}\nargs: [demo-server]\napproval_policy: auto\n"),
    )?;
    Ok(core)
}

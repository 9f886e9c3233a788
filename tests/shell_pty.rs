//! The interactive shell on a real pseudo-terminal, as a person's terminal is: its
//! commands, the approval prompts and their answers share one reader of the terminal,
//! so nothing typed after an answer is swallowed, and a signal ends the shell at once.

mod common;

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Core, demo, eventually, exe};

/// A shell on a pty: the child, what it wrote so far, and the terminal's input.
struct Shell {
    child: Child,
    screen: Arc<Mutex<String>>,
    keys: std::fs::File,
    home: tempfile::TempDir,
    _core: Core,
}

impl Shell {
    fn start(core: Core) -> Shell {
        let pty = nix::pty::openpty(None, None).unwrap();
        let slave = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
        let home = tempfile::tempdir().unwrap();
        let child = Command::new(exe())
            .arg("--core")
            .arg(core.root())
            .arg("--home")
            .arg(home.path())
            .args(["--provider", "fake"])
            .stdin(slave(&pty.slave))
            .stdout(slave(&pty.slave))
            .stderr(slave(&pty.slave))
            .spawn()
            .unwrap();
        drop(pty.slave);
        let master = std::fs::File::from(pty.master);
        let keys = master.try_clone().unwrap();
        let screen: Arc<Mutex<String>> = Arc::default();
        let seen = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut master = master;
            let mut buf = [0u8; 4096];
            // Ends when the last holder of the terminal closes it (EIO).
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Shell {
            child,
            screen,
            keys,
            home,
            _core: core,
        }
    }

    /// Waits until the screen shows `text` `times` times in all.
    async fn wait_for(&self, text: &str, times: usize) {
        let shown = eventually(Duration::from_secs(30), || {
            self.screen.lock().unwrap().matches(text).count() >= times
        })
        .await;
        assert!(
            shown,
            "the screen never showed {text:?} ({times}x):\n{}",
            self.screen.lock().unwrap()
        );
    }

    /// Types a line, as a person does: after the prompt has settled.
    async fn type_line(&mut self, line: &str) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.keys.write_all(format!("{line}\n").as_bytes()).unwrap();
    }

    /// Waits for the banner, asks `/tools`, answers its connect prompt `s` and waits
    /// for the tools.
    async fn tools_after_a_connect_answer(&mut self) {
        self.wait_for("/quit", 1).await;
        self.type_line("/tools").await;
        self.wait_for("allow? [o]nce", 1).await;
        self.type_line("s").await;
        self.wait_for("docs__echo", 1).await;
    }

    async fn exits_within(&mut self, bound: Duration) -> std::process::ExitStatus {
        let mut status = None;
        let child = &mut self.child;
        eventually(bound, || {
            status = child.try_wait().unwrap();
            status.is_some()
        })
        .await;
        let Some(status) = status else {
            let _ = self.child.kill();
            panic!("the shell did not exit:\n{}", self.screen.lock().unwrap());
        };
        status
    }

    /// No server process of this shell is left (they carry its `HOME`).
    async fn nothing_left(&self) {
        let clean = eventually(Duration::from_secs(10), || {
            common::servers_of(self.home.path()).is_empty()
        })
        .await;
        assert!(clean, "server processes outlived the shell");
    }
}

fn demo_core() -> Core {
    Core::new()
        .grant_servers(&["docs"])
        .server("docs", &demo(""))
}

/// `/tools`, a connect prompt answered `s`, then `/servers`, a call with its own
/// prompt answered `o`, and `/quit`: every command after an answer is read.
#[tokio::test]
async fn the_shell_keeps_reading_its_commands_after_an_approval() {
    let mut shell = Shell::start(demo_core());
    shell.tools_after_a_connect_answer().await;
    shell.type_line("/servers").await;
    shell.wait_for("connected (pid", 1).await;
    shell
        .type_line(r#"/call docs__echo {"message": "typed after two answers"}"#)
        .await;
    shell.wait_for("allow? [o]nce", 2).await;
    shell.type_line("o").await;
    // Once echoed by the terminal as typed, once as the result.
    shell.wait_for("typed after two answers", 2).await;
    shell.type_line("/servers").await;
    shell.wait_for("connected (pid", 2).await;
    shell.type_line("/quit").await;
    let status = shell.exits_within(Duration::from_secs(30)).await;
    assert!(status.success(), "{status:?}");
    shell.nothing_left().await;
}

/// A shell waiting for its next command after an approval ends at once on SIGTERM and
/// SIGHUP, and takes its servers with it.
#[tokio::test]
async fn a_signal_ends_a_shell_waiting_on_its_terminal() {
    for signal in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGHUP,
    ] {
        let mut shell = Shell::start(demo_core());
        shell.tools_after_a_connect_answer().await;
        let pid = nix::unistd::Pid::from_raw(shell.child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        let status = shell.exits_within(Duration::from_secs(15)).await;
        assert!(!status.success(), "{signal:?}: {status:?}");
        shell.nothing_left().await;
    }
}

/// An elicitation on the terminal asks each field, insists on a required one, checks
/// types and choices, confirms, and the server receives exactly what was typed.
#[tokio::test]
async fn an_elicitation_is_filled_in_field_by_field_on_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.json");
    let asked = serde_json::json!([{
        "name": "signup",
        "description": "asks who you are",
        "elicit": {
            "message": "Who are you?",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "title": "Your name", "minLength": 2},
                    "age": {"type": "integer", "minimum": 0},
                    "color": {"type": "string", "enum": ["red", "green"]}
                },
                "required": ["name", "color"]
            }
        }
    }]);
    std::fs::write(&tools, asked.to_string()).unwrap();
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &common::demo_with_tools(&tools, ""));
    let mut shell = Shell::start(core);
    shell.wait_for("/quit", 1).await;
    shell.type_line("/call docs__signup {}").await;
    shell.wait_for("allow? [o]nce", 1).await;
    shell.type_line("s").await;
    shell.wait_for("allow? [o]nce", 2).await;
    shell.type_line("o").await;
    shell.wait_for("asks: Who are you?", 1).await;
    // Required fields first.
    shell.wait_for("2. green", 1).await;
    shell.type_line("3").await;
    shell
        .wait_for(
            "give the number or the value of one of the choices; try again",
            1,
        )
        .await;
    shell.type_line("2").await;
    shell.wait_for("name (Your name) [required]", 1).await;
    shell.type_line("").await;
    shell.wait_for("this field is required; try again", 1).await;
    shell.type_line("Ada").await;
    shell.wait_for("a whole number", 1).await;
    shell.type_line("many").await;
    shell.wait_for("give a whole number; try again", 1).await;
    shell.type_line("36").await;
    shell.wait_for("send? [y]es", 1).await;
    shell.wait_for("color: green", 1).await;
    shell.type_line("y").await;
    shell.wait_for(r#""action":"accept""#, 1).await;
    let screen = shell.screen.lock().unwrap().clone();
    assert!(
        screen.contains(r#""name":"Ada""#) && screen.contains(r#""age":36"#),
        "{screen}"
    );
    // The shell reads its commands again after the form.
    shell.type_line("/quit").await;
    let status = shell.exits_within(Duration::from_secs(30)).await;
    assert!(status.success(), "{status:?}");
    shell.nothing_left().await;
}

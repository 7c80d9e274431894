//! A terminal for the tests that need one: a detached `tmux` session, driven as a person
//! would (`send-keys`) and read back (`capture-pane`). `scripts/ensure-redis.sh` installs tmux
//! when missing.

use std::process::Command;

/// A tmux server of the test's own (`-L`), so no other tmux is touched; killed on drop.
pub struct Tmux {
    socket: String,
    session: String,
}

impl Tmux {
    /// Starts `command` in a detached session named `session`, of `width`×`height`.
    pub fn start(session: &str, command: &str, width: u16, height: u16) -> Tmux {
        let tmux = Tmux {
            socket: format!("redis-locks-{session}-{}", std::process::id()),
            session: session.to_string(),
        };
        let (width, height) = (width.to_string(), height.to_string());
        let status = tmux
            .cmd(&[
                "new-session",
                "-d",
                "-s",
                session,
                "-x",
                &width,
                "-y",
                &height,
                command,
            ])
            .status()
            .expect("tmux is installed (scripts/ensure-redis.sh installs it)");
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    /// A tmux command on this server.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.arg("-L").arg(&self.socket).args(args);
        cmd
    }

    /// Types `keys` into the session.
    pub fn send_keys(&self, keys: &str) {
        let status = self
            .cmd(&["send-keys", "-t", &self.session, keys])
            .status()
            .unwrap();
        assert!(status.success(), "tmux send-keys failed");
    }

    /// What the screen shows now.
    pub fn screen(&self) -> String {
        self.capture(&[])
    }

    /// The screen with every line that scrolled off it.
    pub fn history(&self) -> String {
        self.capture(&["-S", "-"])
    }

    fn capture(&self, extra: &[&str]) -> String {
        let mut args = vec!["capture-pane", "-p", "-t", &self.session];
        args.extend_from_slice(extra);
        let out = self.cmd(&args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether the session still runs (it ends when its command exits).
    pub fn running(&self) -> bool {
        self.cmd(&["has-session", "-t", &self.session])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).status();
    }
}

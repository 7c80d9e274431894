//! `redis-locks bench ...`: runs the benchmarks program, `redis-locks-bench`, with the
//! arguments as given, the way `cargo foo` runs `cargo-foo`. The benchmarks are a crate of
//! their own, so that this binary carries neither them nor what they pull in.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use cli_support::exit::CliError;

/// The benchmarks program's file name.
const PROGRAM: &str = "redis-locks-bench";

/// How the benchmarks program is started (its `argv[0]`): its usage lines and messages then
/// name it as the user called it.
const CALLED_AS: &str = "redis-locks bench";

/// Replaces this process with `redis-locks-bench ARGS...`, found beside this program or else
/// on `PATH`: the same process, standard streams and environment (`REDIS_URL` included), so
/// its exit status, a signal that ends it included, is this command's. Returns only when
/// the program cannot be found or started: [`CliError::Unavailable`] (exit 69), saying what
/// was looked for and how to build it.
pub fn exec(args: Vec<OsString>) -> CliError {
    let program = match program("bench") {
        Ok(program) => program,
        Err(err) => return err,
    };
    let err = Command::new(&program).arg0(CALLED_AS).args(args).exec();
    CliError::Unavailable(format!("cannot run {}: {err}", program.display()))
}

/// The benchmarks program, found beside this program or else on `PATH`, for `command` (the
/// `redis-locks` command that needs it: `bench`, or `check --chart`, which it draws).
///
/// # Errors
/// [`CliError::Unavailable`] (exit 69) when it is found nowhere, saying where it was looked
/// for and how to build it.
pub fn program(command: &str) -> Result<PathBuf, CliError> {
    let here = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    find(here.as_deref(), std::env::var_os("PATH").as_deref()).ok_or_else(|| {
        let beside = here.map_or_else(
            || "beside redis-locks".to_string(),
            |dir| format!("in {} (beside redis-locks)", dir.display()),
        );
        CliError::Unavailable(format!(
            "`{command}` runs the benchmarks program {PROGRAM}, which is neither {beside} nor \
             on PATH: build it with `cargo build --release -p {PROGRAM}` (it \
             lands beside target/release/redis-locks), or install it with `cargo install --path \
             crates/{PROGRAM}`"
        ))
    })
}

/// The benchmarks program in `here` (this program's directory), else in the first directory
/// of `path` (`PATH`) that has it as an executable file. Relative entries of `path` (an empty
/// one means the current directory) are passed over: what runs must not depend on where the
/// user happens to stand.
fn find(here: Option<&Path>, path: Option<&OsStr>) -> Option<PathBuf> {
    let on_path = path
        .into_iter()
        .flat_map(std::env::split_paths)
        .filter(|dir| dir.is_absolute());
    here.map(Path::to_path_buf)
        .into_iter()
        .chain(on_path)
        .map(|dir| dir.join(PROGRAM))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }

        /// Puts a file named like the benchmarks program here, with `mode`.
        fn program(&self, mode: u32) -> PathBuf {
            let file = self.0.join(PROGRAM);
            std::fs::write(&file, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            file
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_program_beside_this_one_comes_before_path() {
        let (here, elsewhere) = (Dir::new("bench-here"), Dir::new("bench-elsewhere"));
        let beside = here.program(0o755);
        let on_path = elsewhere.program(0o755);
        let path = std::env::join_paths([&elsewhere.0]).unwrap();
        assert_eq!(find(Some(&here.0), Some(&path)), Some(beside));
        assert_eq!(find(None, Some(&path)), Some(on_path));
    }

    #[test]
    fn files_that_cannot_run_and_relative_path_entries_are_passed_over() {
        let (here, elsewhere) = (Dir::new("bench-plain"), Dir::new("bench-runs"));
        here.program(0o644);
        let runs = elsewhere.program(0o700);
        let path = std::env::join_paths([Path::new(""), Path::new("."), &elsewhere.0]).unwrap();
        assert_eq!(find(Some(&here.0), Some(&path)), Some(runs));
        assert_eq!(find(Some(&here.0), None), None);
    }
}

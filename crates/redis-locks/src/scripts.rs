//! Every script of the crate, in one list: the function library each server loads is made
//! of it (see `node::library`). A script missing here still runs, with `EVALSHA`; the test
//! below keeps the list whole.

use crate::node::LockScript;

/// The crate's scripts, each once.
pub(crate) fn all() -> Vec<&'static LockScript> {
    let mut scripts: Vec<&'static LockScript> = Vec::new();
    scripts.extend(crate::engine::string_lock::scripts());
    scripts.extend([
        &*crate::engine::holds::ACQUIRE,
        &crate::engine::holds::RELEASE,
        &crate::engine::holds::EXTEND,
        &crate::engine::holds::DOWNGRADE,
        &crate::engine::holds::INSPECT,
        &crate::fair::ACQUIRE,
        &crate::fair::RELEASE,
        &crate::fenced::SET,
        &crate::multilock::ACQUIRE,
        &crate::multilock::RELEASE,
        &crate::multilock::EXTEND,
        &crate::redlock::RAISE,
        &crate::semaphore::ACQUIRE,
        &crate::semaphore::RELEASE,
        &crate::semaphore::EXTEND,
        &crate::semaphore::INSPECT,
        &crate::semaphore::RESIZE,
        &crate::wait::LEAVE,
    ]);
    scripts
}

#[cfg(test)]
mod tests {
    /// Counts the scripts made (`LockScript::new`) in every `.rs` file under `dir` but
    /// `node/`.
    fn made(dir: &std::path::Path) -> usize {
        let mut count = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with("node") {
                count += made(&path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                count += text.matches(concat!("LockScript", "::new(")).count();
            }
        }
        count
    }

    #[test]
    fn every_script_of_the_crate_is_in_the_list() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        assert_eq!(super::all().len(), made(&src));
    }
}

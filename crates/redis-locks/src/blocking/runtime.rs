//! The private runtime that a blocking client's requests, watchdog and connections run on.

use std::future::Future;
use std::sync::Arc;

use crate::error::{Error, Result};

/// A multi-thread tokio runtime with one worker, owned by the blocking clients made together
/// (and the handles and guards made from them). The worker drives the connections, the
/// watchdog and the `lost()` channels; a blocking call polls its future on the caller's thread.
#[derive(Debug)]
pub(crate) struct Runtime {
    /// `Some` until dropped; taken out to shut the runtime down without blocking.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Runtime {
    /// Starts a runtime for `call`, refused inside a tokio runtime.
    pub(crate) fn start(call: &'static str) -> Result<Arc<Runtime>> {
        refuse_inside_runtime(call)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redis-locks-blocking")
            .enable_all()
            .build()
            .map_err(|source| Error::RuntimeStart { source })?;
        Ok(Arc::new(Runtime {
            runtime: Some(runtime),
        }))
    }

    /// Runs `future` to its end on the calling thread; [`Error::InsideRuntime`] for `call`
    /// inside a tokio runtime (blocking there would stall the runtime's other tasks).
    pub(crate) fn run<T>(
        &self,
        call: &'static str,
        future: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        refuse_inside_runtime(call)?;
        self.get().block_on(future)
    }

    /// Starts `future` as a task of this runtime.
    pub(crate) fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        drop(self.get().spawn(future));
    }

    /// Makes this runtime the current one until the guard drops (for work that spawns tasks,
    /// such as an async guard's background release).
    pub(crate) fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.get().enter()
    }

    fn get(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime lives until the last handle drops")
    }
}

impl Drop for Runtime {
    /// Shuts down without waiting (dropping a runtime inside another one would panic): the
    /// last handle, guard or client may be dropped anywhere.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Whether the calling thread is inside a tokio runtime (a task, a `block_on`, a
/// `spawn_blocking` closure).
pub(crate) fn inside_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

fn refuse_inside_runtime(call: &'static str) -> Result<()> {
    if inside_runtime() {
        return Err(Error::InsideRuntime { call });
    }
    Ok(())
}

//! The host side of `wit/operator.wit`: the only place bindings are generated.
//! The finalizer world reuses the phase world's `types` and `log` so one `HostState` serves both.
//! Exports are async: calls run on a fiber on the caller's task and yield at every epoch tick.

pub mod phase {
    wasmtime::component::bindgen!({
        world: "phase",
        path: "../wit",
        // A guest over its log budget is stopped at the line that crosses it.
        imports: { "wasmpilot:operator/log.log": trappable },
        exports: { default: async },
    });
}

pub mod finalizer {
    wasmtime::component::bindgen!({
        world: "finalizer",
        path: "../wit",
        exports: { default: async },
        with: {
            "wasmpilot:operator/types": super::phase::wasmpilot::operator::types,
            "wasmpilot:operator/log": super::phase::wasmpilot::operator::log,
        },
    });
}

pub use phase::wasmpilot::operator::log::{Field as LogField, Level as LogLevel};
pub use phase::wasmpilot::operator::types::{
    FinalizeRequest, FinalizeResult, NamedObjects, SyncRequest, SyncResult, WorkerError,
};

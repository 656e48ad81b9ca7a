//! wasmtime's own tests of function references, tables, externals, the linker
//! and instances, run against our patched wasmtime 48.0.11 (third_party/README.md).
//!
//! Every other file here is wasmtime's `tests/all/<name>.rs` as of its 48.0.0 release, unchanged
//! (Apache-2.0 WITH LLVM-exception, © the Wasmtime project authors). This file stands for
//! wasmtime's `tests/all/main.rs`: the module list cut to those files and the two helpers they
//! use, `ref_types_module` and `small_pool_config`, as wasmtime's main.rs defines them.

use wasmtime::Result;

mod externals;
mod funcref;
mod instance;
mod invoke_func_via_table;
mod linker;
mod table;

/// A new store with reference types (and tail calls) enabled, and `source` compiled in it.
pub(crate) fn ref_types_module(
    use_epochs: bool,
    source: &str,
) -> Result<(wasmtime::Store<()>, wasmtime::Module)> {
    use wasmtime::*;

    let _ = env_logger::try_init();

    let mut config = Config::new();
    config.wasm_reference_types(true);
    config.wasm_tail_call(true);
    if use_epochs {
        config.epoch_interruption(true);
    }

    let engine = Engine::new(&config)?;
    let mut store = Store::new(&engine, ());
    if use_epochs {
        store.set_epoch_deadline(1);
    }
    let module = Module::new(&engine, source)?;
    Ok((store, module))
}

/// A pooling allocator smaller than the default, for tests.
pub(crate) fn small_pool_config() -> wasmtime::PoolingAllocationConfig {
    let mut config = wasmtime::PoolingAllocationConfig::new();
    config.total_memories(1);
    config.max_memory_size(1 << 16);
    config.total_tables(1);
    config.table_elements(10);
    config.total_stacks(1);
    config
}

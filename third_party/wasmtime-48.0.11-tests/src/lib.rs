//! Nothing: this crate holds wasmtime's tests (`tests/all`).

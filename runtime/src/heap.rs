//! The process heap after a burst of short-lived allocations: a cache's (re)list parses every
//! object whole, keeps a small part of each, and leaves the allocator holding the rest.
//!
//! glibc's malloc keeps freed memory that sits between live allocations (the kept objects are
//! interleaved with the parsed pages they came from) mapped and counted in RSS; `malloc_trim`
//! hands those whole free pages back with `madvise(MADV_DONTNEED)`, and one arena keeps them
//! from being spread over several (see [`use_one_arena`]). Elsewhere this is a no-op.

/// Returns the allocator's free pages to the operating system (glibc), after a list.
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and only walks the allocator's own free lists; it
    // is safe to call from any thread at any time (glibc serialises it with the arenas' locks).
    unsafe {
        libc::malloc_trim(0);
    }
}

/// One malloc arena for the whole process, unless `MALLOC_ARENA_MAX` says otherwise (glibc;
/// elsewhere a no-op). Call first thing in `main`, before any thread starts.
///
/// glibc gives a thread that finds the arenas busy a new one, up to eight per core, and each
/// keeps its own free memory between the objects it holds. A (re)list parses on whichever
/// runtime thread polls the watch, so the objects kept end up spread over several arenas, each
/// holding pages a third full. With one arena, three sharded replicas with 10 operators and
/// 10,000 Deployments held 20.5 MiB of anonymous memory each instead of 28.8 (BENCHMARKS.md);
/// the per-thread caches (tcache) still serve small allocations without the arena's lock.
pub fn use_one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a parameter of glibc's allocator; called before other
        // threads exist, it races with nothing.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

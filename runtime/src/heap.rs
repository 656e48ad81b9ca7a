//! The process heap after a burst of short-lived allocations: a cache's (re)list parses every
//! object whole, keeps a small part of each, and leaves the allocator holding the rest.
//!
//! glibc's malloc keeps freed memory that sits between live allocations (the kept objects are
//! interleaved with the parsed pages they came from) mapped and counted in RSS; `malloc_trim`
//! hands those whole free pages back with `madvise(MADV_DONTNEED)`. Elsewhere this is a no-op.

/// Returns the allocator's free pages to the operating system (glibc), after a list.
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and only walks the allocator's own free lists; it
    // is safe to call from any thread at any time (glibc serialises it with the arenas' locks).
    unsafe {
        libc::malloc_trim(0);
    }
}

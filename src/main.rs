/// jemalloc rather than the system's allocator: with glibc's, a server holding
/// 10,000 open streams kept 1.8 times the resident memory (DECISIONS.md, "Memory
/// per open stream").
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A C string's address, which jemalloc reads as its options before `main` runs.
#[cfg(not(target_env = "msvc"))]
#[repr(transparent)]
pub struct MallocConf(*const u8);

// The pointer is to a constant string: sharing it between threads is safe.
#[cfg(not(target_env = "msvc"))]
unsafe impl Sync for MallocConf {}

/// Freed pages decay back to the system over a second, not jemalloc's default ten
/// (checked as the allocator works: there is no background thread), so the
/// resident size follows what the server holds. An operator can add or override
/// options with `_RJEM_MALLOC_CONF`.
#[cfg(not(target_env = "msvc"))]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: MallocConf =
    MallocConf(c"dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr().cast());

fn main() -> std::process::ExitCode {
    deskbell::cli::main()
}

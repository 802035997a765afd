//! The `flexrun` binary; see [`flexrun::cli`].

/// mimalloc instead of the system allocator: a run allocates many small, short-lived values
/// (frames, JSON, prompts), where glibc's malloc cost about a seventh of the server's CPU (see
/// `docs/benchmarks.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    flexrun::cli::main()
}

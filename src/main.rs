//! The `flexrun` binary; see [`flexrun::cli`].

fn main() -> std::process::ExitCode {
    flexrun::cli::main()
}

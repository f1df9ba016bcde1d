fn main() -> std::process::ExitCode {
    #[cfg(feature = "local-model")]
    deskbell::llm::local::prefer_fast_weights();
    deskbell::cli::main()
}

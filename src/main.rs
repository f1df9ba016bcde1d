fn main() -> std::process::ExitCode {
    deskbell::llm::local::prefer_fast_weights();
    deskbell::cli::main()
}

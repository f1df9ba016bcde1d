fn main() -> std::process::ExitCode {
    deskbell::cli::main()
}

//! The `airlock` binary: the command line lives in [`cli`].

mod cli;

/// mimalloc returns freed memory to the OS (it purges unused pages shortly
/// after they are freed), so a burst of connections or large requests does
/// not leave the server's resident set at its peak (issue 8 §2); the system
/// allocator kept most of such a burst.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    cli::main();
}

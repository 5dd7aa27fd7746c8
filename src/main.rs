//! The `airlock` binary: the command line lives in [`cli`].

mod cli;

/// mimalloc returns freed memory to the OS (it purges unused pages shortly
/// after they are freed), so a burst of connections or large requests does
/// not leave the server's resident set at its peak (issue 8 §2); the system
/// allocator kept most of such a burst.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc's own options (`mimalloc.h`, `mi_option_e`; the same values in
// its v2 and v3): the C library is linked by the `mimalloc` crate.
unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}
const MI_OPTION_ARENA_EAGER_COMMIT: std::ffi::c_int = 4;
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// Arenas are committed on demand, in every command: with mimalloc's
/// default (eager commit), memory a burst freed stayed counted in the
/// resident set, so a promotion that flattens and chunks a 150 MB rootfs
/// (chunks handed between threads) peaked at 630 MiB anonymous; on
/// demand, 98 MiB (the server's HTTP promotions and imports too). Set
/// before `main`: mimalloc makes its first arena before `main` runs, and
/// an option set later does not change it. Runs from `.init_array`.
extern "C" fn commit_arenas_on_demand() {
    // SAFETY: setting a documented option to a valid value, before any
    // thread of ours exists.
    unsafe { mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) }
}

#[used]
#[unsafe(link_section = ".init_array")]
static COMMIT_ARENAS_ON_DEMAND: extern "C" fn() = commit_arenas_on_demand;

/// For a command that streams gigabytes through a few large buffers
/// (import, bundle create and verify, scrub, fsck, promote): memory freed
/// is given back to the OS at once. With mimalloc's default (purge after
/// 10 ms) and eager arena commit, the chunks an import hands from its
/// reader thread to its writer kept a 512 MiB import at 120-140 MiB
/// resident; with these (and the import's own buffer pool,
/// `bundle::import::buffers`), 45 MiB (issue 26 §5). The server keeps the
/// default delay (its hot paths allocate small and often).
pub(crate) fn purge_freed_memory_at_once() {
    // SAFETY: setting a documented option with a valid value, at start-up.
    unsafe {
        mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
}

fn main() {
    cli::main();
}

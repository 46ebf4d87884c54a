//! Waiting pops (SPEC §3.2 `wait_ms`).
//!
//! Today a waiting pop re-checks every `POLL_MS` while it sleeps on its own latch: any
//! interrupt (statement timeout, `pg_cancel_backend`) ends the sleep at once, and postmaster
//! death ends the backend. Instant wake-ups at the commit of a push come with the shared
//! memory of a preloaded library.

use pgrx::pg_sys;
use std::time::Duration;

/// How often a waiting pop looks again. SPEC §10 asks a committed message to be returned
/// within 100 ms without preloading.
pub const POLL_MS: u64 = 25;

/// Sleep until woken, an interrupt, or `max` (at most `POLL_MS`), whichever comes first.
pub fn sleep_until_woken(_queue: &str, max: Duration) {
    let ms = max.as_millis().clamp(1, POLL_MS as u128) as std::os::raw::c_long;
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pgrx::check_for_interrupts!();
}

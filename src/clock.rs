//! Time as the rules read it: microseconds since the Postgres epoch, compared and added in
//! plain Rust, and the conversions to and from `timestamptz`.

use pgrx::datum::TimestampWithTimeZone;

/// Microseconds since the Postgres epoch: timestamps compared and added in Rust.
pub type Micros = i64;

pub fn micros(t: TimestampWithTimeZone) -> Micros {
    pgrx::pg_sys::TimestampTz::from(t)
}

pub fn timestamp(m: Micros) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(m).expect("queen: timestamp in range")
}

/// Sleep `ms` milliseconds (wait event PgSleep, as pg_sleep); a cancel is seen at the caller's
/// next `check_for_interrupts!`.
pub fn sleep_ms(ms: i32) {
    if ms > 0 {
        // SAFETY: MyLatch points to this backend's own latch from process start on; WaitLatch
        // with only WL_TIMEOUT (and WL_EXIT_ON_PM_DEATH) ignores its state and just sleeps, as
        // pg_sleep does.
        unsafe {
            pgrx::pg_sys::WaitLatch(
                pgrx::pg_sys::MyLatch,
                (pgrx::pg_sys::WL_TIMEOUT | pgrx::pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                ms as std::os::raw::c_long,
                pgrx::pg_sys::WaitEventTimeout::WAIT_EVENT_PG_SLEEP,
            );
        }
    }
}

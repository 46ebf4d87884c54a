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

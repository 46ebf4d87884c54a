//! How every call of queen reaches its SQL: a session of [`connect`] — SPI (spi.rs), as the
//! extension's owner with the installed version checked (owner.rs), and, before the first
//! query, the committed mapping of the database's stored transaction ids taken, or checked to
//! be still the one the transaction took (cluster.rs: settled first after a restore, or on
//! Citus after a shard reached this node).
//!
//! The floors: spi.rs is mechanism (kept plans, typed rows); owner.rs enters the owner;
//! cluster.rs and shards.rs read the mapping and the layout through it; this file puts them
//! together for everything above.

use crate::spi::Spi;

/// Run `f` in a session; the connection ends when `f` returns (or raises).
pub fn connect<R>(f: impl FnOnce(&mut Spi) -> R) -> R {
    crate::owner::connect(|s| {
        crate::cluster::enter(s);
        f(s)
    })
}

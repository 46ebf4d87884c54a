//! The SQL surface: every `queen_*` function, each a few lines that check arguments, call the
//! module that holds the rules, and turn a `QueenError` into an SQL error.

mod ack;
mod admin;
mod cluster;
mod configure;
mod dead_letters;
mod kv;
mod locks;
mod maintain;
mod packed_keys;
mod permits;
mod pop;
mod privilege;
mod push;
mod rows;
mod timers;
mod totals;
mod wait;

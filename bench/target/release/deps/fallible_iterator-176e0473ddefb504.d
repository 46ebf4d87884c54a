/work/main/bench/target/release/deps/fallible_iterator-176e0473ddefb504.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/fallible-iterator-0.2.0/src/lib.rs

/work/main/bench/target/release/deps/libfallible_iterator-176e0473ddefb504.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/fallible-iterator-0.2.0/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/fallible-iterator-0.2.0/src/lib.rs:

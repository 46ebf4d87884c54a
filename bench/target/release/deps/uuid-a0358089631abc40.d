/work/main/bench/target/release/deps/uuid-a0358089631abc40.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/macros.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/builder.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/error.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/non_nil.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/parser.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/fmt.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/timestamp.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/external.rs

/work/main/bench/target/release/deps/libuuid-a0358089631abc40.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/macros.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/builder.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/error.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/non_nil.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/parser.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/fmt.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/timestamp.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/external.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/lib.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/macros.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/builder.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/error.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/non_nil.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/parser.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/fmt.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/timestamp.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/uuid-1.29.3/src/external.rs:

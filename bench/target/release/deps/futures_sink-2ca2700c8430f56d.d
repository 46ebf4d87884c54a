/work/main/bench/target/release/deps/futures_sink-2ca2700c8430f56d.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/futures-sink-0.3.34/src/lib.rs

/work/main/bench/target/release/deps/libfutures_sink-2ca2700c8430f56d.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/futures-sink-0.3.34/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/futures-sink-0.3.34/src/lib.rs:

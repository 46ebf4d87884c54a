/work/main/bench/target/release/deps/unicode_properties-8be14e73f7a70138.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/unicode-properties-0.1.5/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/unicode-properties-0.1.5/src/tables.rs

/work/main/bench/target/release/deps/libunicode_properties-8be14e73f7a70138.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/unicode-properties-0.1.5/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/unicode-properties-0.1.5/src/tables.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/unicode-properties-0.1.5/src/lib.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/unicode-properties-0.1.5/src/tables.rs:

/work/main/bench/target/release/deps/phf_shared-ac74d6ccee83c519.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/phf_shared-0.13.1/src/lib.rs

/work/main/bench/target/release/deps/libphf_shared-ac74d6ccee83c519.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/phf_shared-0.13.1/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/phf_shared-0.13.1/src/lib.rs:

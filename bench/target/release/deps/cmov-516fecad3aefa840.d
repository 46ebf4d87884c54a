/work/main/bench/target/release/deps/cmov-516fecad3aefa840.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/macros.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/array.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/backends.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/backends/x86.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/slice.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/../README.md

/work/main/bench/target/release/deps/libcmov-516fecad3aefa840.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/macros.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/array.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/backends.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/backends/x86.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/slice.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/../README.md

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/lib.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/macros.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/array.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/backends.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/backends/x86.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/slice.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cmov-0.5.4/src/../README.md:

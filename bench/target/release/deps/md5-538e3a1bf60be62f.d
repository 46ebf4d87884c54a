/work/main/bench/target/release/deps/md5-538e3a1bf60be62f.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/block_api.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/compress.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/consts.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/../README.md /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/compress/soft.rs

/work/main/bench/target/release/deps/libmd5-538e3a1bf60be62f.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/block_api.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/compress.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/consts.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/../README.md /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/compress/soft.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/lib.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/block_api.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/compress.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/consts.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/../README.md:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/md-5-0.11.0/src/compress/soft.rs:

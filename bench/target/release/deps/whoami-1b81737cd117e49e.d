/work/main/bench/target/release/deps/whoami-1b81737cd117e49e.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/api.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/arch.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/conversions.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/desktop_env.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/error.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/langs.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/os.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/os/unix.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/platform.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/result.rs

/work/main/bench/target/release/deps/libwhoami-1b81737cd117e49e.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/lib.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/api.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/arch.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/conversions.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/desktop_env.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/error.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/langs.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/os.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/os/unix.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/platform.rs /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/result.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/lib.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/api.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/arch.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/conversions.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/desktop_env.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/error.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/langs.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/os.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/os/unix.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/platform.rs:
/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/whoami-2.1.3/src/result.rs:

/work/main/bench/target/release/deps/queen_bench-5a777ad8cbe85571.d: src/main.rs src/clients.rs

/work/main/bench/target/release/deps/libqueen_bench-5a777ad8cbe85571.rmeta: src/main.rs src/clients.rs

src/main.rs:
src/clients.rs:

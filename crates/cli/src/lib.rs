//! eosflow-cli — what the `eosflow` binary runs besides the libraries it wires together: the
//! orders demo ([`demo`]). The binary itself (`src/main.rs`) parses arguments and dispatches to
//! the core (`eosflow`), the outbox router (`eosflow-outbox`), the orders application
//! (`eosflow-orders`), the verifier (`eosflow-verify`) and the benchmarks (`eosflow-bench`).

pub mod demo;

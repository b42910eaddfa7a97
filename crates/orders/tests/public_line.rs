//! The reference application is written against eosflow's public line alone (docs/layout.md):
//! no file under `crates/orders/src` reaches the runtime through the hidden `eosflow::internals`.
//! An application that needs something from there shows a gap in the public line; fill it
//! (`eosflow::contracts`, `eosflow::kafka::topics`, `Record::base_topic` are such fills)
//! instead of importing around it. No broker needed.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out
}

/// `file:line: text` for every line of `text` that names the hidden module.
fn mentions(file: &str, text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains("eosflow::internals") || l.contains("internals::"))
        .map(|(i, l)| format!("{file}:{}: {}", i + 1, l.trim()))
        .collect()
}

#[test]
fn the_orders_application_uses_only_the_public_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = rust_files(&root.join("src"));
    assert!(files.len() > 5, "found only {files:?}");
    let mut found = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let rel = path.strip_prefix(root).unwrap_or(&path);
        found.extend(mentions(&format!("crates/orders/{}", rel.display()), &text));
    }
    assert!(
        found.is_empty(),
        "crates/orders/src reaches eosflow::internals; use the public line (docs/layout.md) \
         or make what it needs public:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_names_file_and_line() {
    let text = "use eosflow::processor::Record;\nuse eosflow::internals::clock::now_ms;\n";
    assert_eq!(
        mentions("crates/orders/src/x.rs", text),
        ["crates/orders/src/x.rs:2: use eosflow::internals::clock::now_ms;"]
    );
}

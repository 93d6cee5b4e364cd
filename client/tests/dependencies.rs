//! The library's rule (src/lib.rs): a library user compiles no part of the `leaseq` command — no
//! web server, templates, argument parser or progress bar. Read from Cargo.lock, every package
//! this crate reaches, not only its own `[dependencies]`: one that brings axum along breaks it too.
//! (The lock file lists dev-dependencies with the others: they keep to the rule as well.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The command's own crates (cli/Cargo.toml), and the HTTP server under axum.
const THE_COMMANDS: [&str; 6] = [
    "axum",
    "clap",
    "deadpool-postgres",
    "hyper",
    "indicatif",
    "maud",
];

#[test]
fn the_library_reaches_none_of_the_commands_crates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
    let text = std::fs::read_to_string(&path).expect("Cargo.lock is readable");
    let lock: toml::Table = text.parse().expect("Cargo.lock is TOML");
    let mut depends: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for package in lock["package"].as_array().expect("[[package]] entries") {
        let name = package["name"].as_str().expect("a package has a name");
        let names = package
            .get("dependencies")
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
            // "name" or, when two versions are locked, "name version".
            .map(|d| d.as_str().expect("a dependency").split(' ').next().unwrap());
        depends.entry(name).or_default().extend(names);
    }
    let (mut reached, mut next) = (BTreeSet::new(), vec!["leaseq-client"]);
    while let Some(name) = next.pop() {
        if reached.insert(name) {
            next.extend(depends.get(name).into_iter().flatten());
        }
    }
    assert!(
        reached.contains("tokio-postgres"),
        "the walk did not reach the library's own tokio-postgres: is Cargo.lock read?"
    );
    let found: Vec<_> = THE_COMMANDS
        .iter()
        .filter(|c| reached.contains(*c))
        .collect();
    assert!(found.is_empty(), "leaseq-client reaches {found:?}");
}

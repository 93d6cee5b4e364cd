//! Rules over the sources themselves: which folder may use which, and what every SQL-visible
//! function does. (`statements.rs` holds the rules over statements.)
use std::collections::BTreeMap;

/// Every source file under src/ but this one, by its path there, read at test time: a file
/// added later is covered without joining a list.
pub fn sources() -> BTreeMap<String, String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut found = BTreeMap::new();
    let mut pending = vec![std::path::PathBuf::from(root)];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if name != "rules.rs" {
                    let text = std::fs::read_to_string(&path).expect("a readable source");
                    found.insert(name, text);
                }
            }
        }
    }
    assert!(found.len() > 30, "found the sources: {:?}", found.keys());
    found
}

/// A source up to its first test module (every file keeps its tests last).
pub fn non_test_code(source: &str) -> &str {
    let end = [
        "\n#[cfg(test)]",
        "\n#[cfg(any(test, feature = \"pg_test\"))]",
    ]
    .iter()
    .filter_map(|marker| source.find(marker))
    .min()
    .unwrap_or(source.len());
    &source[..end]
}

/// The folders, and what each one's code may use besides itself (lib.rs's rule).
const RULES: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("lifecycle", &["core"]),
    ("observe", &["lifecycle", "core"]),
    ("admin", &["observe", "lifecycle", "core"]),
    ("compat", &["lifecycle", "observe", "admin", "core"]),
];

#[test]
fn each_folder_uses_only_what_its_rule_allows() {
    let mut checked = 0;
    for (path, source) in sources() {
        let Some((folder, _)) = path.split_once('/') else {
            continue; // lib.rs and statements.rs see everything
        };
        let allowed = RULES
            .iter()
            .find(|(f, _)| *f == folder)
            .unwrap_or_else(|| panic!("{path}: a folder without a rule in lib.rs"))
            .1;
        let code = non_test_code(&source);
        for (at, _) in code.match_indices("crate::") {
            let used = code[at + "crate::".len()..]
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap();
            assert!(
                used == folder || allowed.contains(&used),
                "{path} uses crate::{used}: {folder}/ may use only {allowed:?} besides itself"
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "read the uses: {checked}");
}

/// Each SQL-visible `#[pg_extern]` function's Rust name and body (up to its closing brace at
/// column 0) — or, for one that hands its arguments to a `…_with` function of its file, that
/// function's body. Entry points kept for older schemas (`sql = false`, in compat) are left out.
fn functions() -> Vec<(String, String)> {
    let body_of = |code: &str, name: &str| -> String {
        let after = code
            .split_once(&format!("fn {name}("))
            .unwrap_or_else(|| panic!("fn {name}"))
            .1;
        after.split_once("\n}\n").expect("a body").0.to_string()
    };
    let mut found = Vec::new();
    for source in sources().values() {
        let code = non_test_code(source);
        // At the start of a line: the attribute, not prose naming it.
        for (at, _) in code.match_indices("\n#[pg_extern") {
            let at = at + 1;
            let rest = &code[at..];
            if rest.starts_with("#[pg_extern(sql = false)]") {
                continue;
            }
            let after_fn = rest.split_once("pub fn ").expect("a function follows").1;
            let name = after_fn.split(['(', '<']).next().unwrap().to_string();
            let mut body = body_of(code, &name);
            if let Some(at) = body.find("_with(") {
                let start = body[..at]
                    .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map_or(0, |i| i + 1);
                let delegate = format!("{}_with", &body[start..at]);
                body = body_of(code, &delegate);
            }
            found.push((name, body));
        }
    }
    assert!(found.len() >= 26, "found the functions: {}", found.len());
    found
}

/// Every SQL-visible function checks the caller's per-queue rights before its statements
/// run — but those that list every queue and show only the ones the caller may observe
/// (`queue_stats`, `queue_counts`, `metrics`, `queue_schedules`, `queue_settings`,
/// `queue_overview`, `queue_throughput`, `queue_workers`) or what it may do on each
/// (`queue_privileges`), and
/// `queue_grants` and `queue_index_payloads`, which only `leaseq_admin` may call.
#[test]
fn every_function_checks_access_before_its_statements() {
    for (name, body) in functions() {
        let connect = body.find("connect::connect(").expect("a connect");
        match name.as_str() {
            "stats" | "queue_counts" | "metrics" | "schedules" | "queue_settings"
            | "queue_overview" | "queue_throughput" | "queue_workers" | "queue_privileges" => {
                assert!(body[connect..].contains("access::allowed("))
            }
            "queue_grants" | "queue_index_payloads" => assert!(!body.contains("access::")),
            _ => {
                let check = body
                    .find("require_queue(")
                    .or(body.find("require_jobs("))
                    .or(body.find("require_jobs_any("));
                assert!(check.is_some_and(|c| c < connect), "{name} checks first");
            }
        }
    }
}

/// Every SQL-visible function runs its SQL through exactly one `connect`, under the settings it
/// names there (which statements may run under which settings is the registry's to say, and
/// `spi::run` holds them to it); nothing else opens an SPI connection or sets `search_path`.
#[test]
fn every_function_connects_once_under_named_settings() {
    for (name, body) in functions() {
        let connects = body.matches("connect::connect(").count();
        let named = body.matches("connect::connect(&JOB_PATH, ").count()
            + body.matches("connect::connect(&WHOLE_QUEUE, ").count();
        assert_eq!(
            (connects, named),
            (1, 1),
            "{name} connects once, under named settings"
        );
    }
    for (path, source) in sources() {
        let code = non_test_code(&source);
        let mut lines = code
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"));
        assert!(
            !lines.any(|line| line.contains("SECURITY DEFINER")),
            "{path}: rights are switched by connect"
        );
        assert!(!code.contains("#[search_path"), "{path}");
        if path != "core/connect.rs" {
            assert!(
                !code.contains("Spi::connect"),
                "{path} connects only through connect"
            );
        }
    }
}

//! The API manifest (clients/api.toml) against this crate: each method it names exists and its
//! statement calls the function; every public method that calls a function is named; every
//! statement in `src/`, and in the `leaseq` command's `../cli/src/`, calls a listed function with
//! arguments it takes; the Worker constants are the manifest's.
//! (clients/python/tests/test_manifest.py holds the manifest to the extension.)
//!
//! The crate has no registry of its statements, so this reads its sources: a small lexer (strings,
//! comments, braces) finds each function's body, the `const` statements it names, the methods
//! and functions it calls, and the `leaseq.<function>(` in them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use leaseq_client::worker::{
    FIRST_CLAIM_WAIT, MIN_FINISH_WAIT, POISON_CLASSES, REFUSED_CLASSES, STOP_MARGIN_CAP,
    STOP_MARGIN_FRACTION,
};
use toml::{Table, Value};

fn manifest() -> Table {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/api.toml");
    let text = std::fs::read_to_string(&path).expect("clients/api.toml is readable");
    text.parse().expect("clients/api.toml is TOML")
}

fn functions(manifest: &Table) -> &Vec<Value> {
    manifest["function"]
        .as_array()
        .expect("[[function]] entries")
}

fn entry_name(entry: &Value) -> &str {
    entry["name"].as_str().expect("every entry has a name")
}

/// The Rust methods an entry names: none when it gives a reason instead.
fn methods_named(entry: &Value) -> Vec<String> {
    let name = entry_name(entry);
    match entry.get("rust") {
        Some(Value::String(method)) => vec![method.clone()],
        Some(Value::Array(methods)) => methods
            .iter()
            .map(|m| m.as_str().expect("a method name").to_string())
            .collect(),
        Some(Value::Table(t)) => {
            let reason = t.get("reason").and_then(Value::as_str).unwrap_or("");
            assert!(
                !reason.is_empty(),
                "{name}: rust names no method and no reason"
            );
            vec![]
        }
        _ => panic!("{name}: nothing said for rust"),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Punct(char),
}

/// Rust source as identifiers, string literals (their text) and punctuation; comments, numbers,
/// char literals and lifetimes dropped.
fn lex(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let (mut tokens, mut at) = (Vec::new(), 0);
    while at < chars.len() {
        let c = chars[at];
        let next = chars.get(at + 1).copied();
        if c.is_whitespace() {
            at += 1;
        } else if c == '/' && next == Some('/') {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if c == '/' && next == Some('*') {
            let (mut depth, mut i) = (0, at);
            loop {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            at = i;
        } else if let Some((text, end)) = raw_string(&chars, at) {
            tokens.push(Token::Str(text));
            at = end;
        } else if c == '"' || (c == 'b' && next == Some('"')) {
            let (mut text, mut i) = (String::new(), at + if c == 'b' { 2 } else { 1 });
            while chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                    if chars[i] == '\n' {
                        // A line continuation: the next line's leading whitespace is not text.
                        while chars[i + 1].is_whitespace() {
                            i += 1;
                        }
                    } else {
                        text.push(chars[i]);
                    }
                } else {
                    text.push(chars[i]);
                }
                i += 1;
            }
            tokens.push(Token::Str(text));
            at = i + 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the first is skipped whole.
            if next == Some('\\') {
                let mut i = at + 3;
                while chars[i] != '\'' {
                    i += 1;
                }
                at = i + 1;
            } else if chars.get(at + 2) == Some(&'\'') {
                at += 3;
            } else {
                at += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = at;
            while at < chars.len() && (chars[at].is_alphanumeric() || chars[at] == '_') {
                at += 1;
            }
            tokens.push(Token::Ident(chars[start..at].iter().collect()));
        } else {
            tokens.push(Token::Punct(c));
            at += 1;
        }
    }
    tokens
}

/// `r"…"`, `r#"…"#`, `br#"…"#` at `at`: its text and where it ends.
fn raw_string(chars: &[char], at: usize) -> Option<(String, usize)> {
    let mut i = at;
    if chars[i] == 'b' {
        i += 1;
    }
    if chars.get(i) != Some(&'r') {
        return None;
    }
    i += 1;
    let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
    if chars.get(i + hashes) != Some(&'"') {
        return None;
    }
    let start = i + hashes + 1;
    let mut end = start;
    while !(chars[end] == '"' && (1..=hashes).all(|k| chars.get(end + k) == Some(&'#'))) {
        end += 1;
    }
    Some((chars[start..end].iter().collect(), end + 1 + hashes))
}

/// A function of the crate: `Client::x` for a method of an `impl Client`, `x` for a free one.
struct Function {
    file: PathBuf,
    public: bool,
    body: Vec<Token>,
}

/// Every file's functions (those at a file's top level and those of its `impl` blocks) and its
/// string `const`s.
#[derive(Default)]
struct Sources {
    functions: BTreeMap<String, Vec<Function>>,
    consts: BTreeMap<(PathBuf, String), String>,
    strings: Vec<(PathBuf, String)>,
}

impl Sources {
    fn read(&mut self, file: &Path) {
        let source = std::fs::read_to_string(file).expect("a source file is readable");
        let tokens = lex(&source);
        let mut depth = 0;
        // The type of each open `impl` block, with the depth of its body.
        let mut impls: Vec<(String, usize)> = Vec::new();
        let mut at = 0;
        while at < tokens.len() {
            match &tokens[at] {
                Token::Str(text) => self.strings.push((file.to_path_buf(), text.clone())),
                Token::Punct('{') => depth += 1,
                Token::Punct('}') => {
                    depth -= 1;
                    if impls.last().is_some_and(|(_, d)| *d > depth) {
                        impls.pop();
                    }
                }
                // An impl block, not `impl Trait` in a signature (`-> impl Iterator`, `&impl T`).
                Token::Ident(word) if word == "impl" && item_start(&tokens[..at]) => {
                    let open = next_brace(&tokens, at);
                    let header = &tokens[at + 1..open];
                    let after_for = header.iter().position(|t| *t == Token::Ident("for".into()));
                    let mut rest = match after_for {
                        Some(i) => &header[i + 1..],
                        None => skip_generics(header),
                    }
                    .iter();
                    if let Some(Token::Ident(ty)) = rest.next() {
                        impls.push((ty.clone(), depth + 1));
                    }
                }
                // `const NAME: &str = "…";`, not `const fn`.
                Token::Ident(word)
                    if word == "const" && tokens.get(at + 2) == Some(&Token::Punct(':')) =>
                {
                    if let (Some(Token::Ident(name)), Some(end)) = (
                        tokens.get(at + 1),
                        tokens[at..].iter().position(|t| *t == Token::Punct(';')),
                    ) {
                        let text: String = tokens[at..at + end]
                            .iter()
                            .filter_map(|t| match t {
                                Token::Str(s) => Some(s.as_str()),
                                _ => None,
                            })
                            .collect();
                        self.consts.insert((file.to_path_buf(), name.clone()), text);
                    }
                }
                Token::Ident(word) if word == "fn" => {
                    // A method of the innermost impl, or a function at the file's top level;
                    // functions nested in bodies or in inline modules are neither.
                    let owner = match impls.last() {
                        Some((ty, d)) if *d == depth => Some(Some(ty.clone())),
                        _ if depth == 0 => Some(None),
                        _ => None,
                    };
                    if let (Some(owner), Some(Token::Ident(name)), Some(open)) =
                        (owner, tokens.get(at + 1), body_start(&tokens, at))
                    {
                        let close = matching_brace(&tokens, open);
                        let public = is_public(&tokens[..at]);
                        let key = match owner {
                            Some(ty) => format!("{ty}::{name}"),
                            None => name.clone(),
                        };
                        self.functions.entry(key).or_default().push(Function {
                            file: file.to_path_buf(),
                            public,
                            body: tokens[open + 1..close].to_vec(),
                        });
                    }
                }
                _ => {}
            }
            at += 1;
        }
    }

    /// The SQL functions `key` calls: in its own strings, the `const`s of its file it names,
    /// and the methods (`self.x(`) and functions (`x(`) of the crate it calls, transitively.
    fn functions_called(&self, key: &str) -> BTreeSet<String> {
        let (mut called, mut seen, mut todo) =
            (BTreeSet::new(), BTreeSet::new(), vec![key.to_string()]);
        while let Some(key) = todo.pop() {
            if !seen.insert(key.clone()) {
                continue;
            }
            let owner = key.rsplit_once("::").map(|(ty, _)| ty.to_string());
            for function in self.functions.get(&key).into_iter().flatten() {
                let body = &function.body;
                for (at, token) in body.iter().enumerate() {
                    match token {
                        Token::Str(text) => called.extend(sql_calls(text).map(|(n, _)| n)),
                        Token::Ident(name) => {
                            let file_const = (function.file.clone(), name.clone());
                            if let Some(text) = self.consts.get(&file_const) {
                                called.extend(sql_calls(text).map(|(n, _)| n));
                            }
                            if body.get(at + 1) != Some(&Token::Punct('(')) {
                                continue;
                            }
                            let before = at.checked_sub(1).map(|i| &body[i]);
                            let receiver = at.checked_sub(2).map(|i| &body[i]);
                            match (before, receiver, &owner) {
                                (Some(Token::Punct('.')), Some(Token::Ident(s)), Some(ty))
                                    if s == "self" =>
                                {
                                    todo.push(format!("{ty}::{name}"))
                                }
                                (Some(Token::Punct('.' | ':')), _, _) => {}
                                _ if self.functions.contains_key(name) => todo.push(name.clone()),
                                _ => {}
                            }
                        }
                        Token::Punct(_) => {}
                    }
                }
            }
        }
        called
    }
}

/// Whether an item may start after `before`: at the top of a file or block, after an item or an
/// attribute, or after `pub` or `unsafe`.
fn item_start(before: &[Token]) -> bool {
    match before.last() {
        None | Some(Token::Punct('}' | ';' | ']')) => true,
        Some(Token::Ident(word)) => word == "pub" || word == "unsafe",
        _ => false,
    }
}

fn next_brace(tokens: &[Token], from: usize) -> usize {
    from + tokens[from..]
        .iter()
        .position(|t| *t == Token::Punct('{'))
        .expect("an impl has a body")
}

/// `impl<T> X` → `X`: the tokens after the impl's own generic parameters.
fn skip_generics(header: &[Token]) -> &[Token] {
    if header.first() != Some(&Token::Punct('<')) {
        return header;
    }
    let mut depth = 0;
    for (i, token) in header.iter().enumerate() {
        match token {
            Token::Punct('<') => depth += 1,
            Token::Punct('>') => {
                depth -= 1;
                if depth == 0 {
                    return &header[i + 1..];
                }
            }
            _ => {}
        }
    }
    header
}

/// Where a `fn`'s body opens: the first `{` before any `;` outside parentheses and brackets
/// (`fn f() -> [u8; 4] {`); None for a declaration without a body.
fn body_start(tokens: &[Token], at: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, token) in tokens.iter().enumerate().skip(at) {
        match token {
            Token::Punct('(' | '[') => depth += 1,
            Token::Punct(')' | ']') => depth -= 1,
            Token::Punct(';') if depth == 0 => return None,
            Token::Punct('{') if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

fn matching_brace(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        match token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    panic!("a body's braces match")
}

/// `pub fn`, `pub async fn`: public; `pub(crate) fn` and `fn` are not.
fn is_public(before: &[Token]) -> bool {
    let qualifiers = ["async", "unsafe", "const", "extern"];
    let mut rest = before.iter().rev();
    loop {
        match rest.next() {
            Some(Token::Ident(q)) if qualifiers.contains(&q.as_str()) => continue,
            Some(Token::Ident(p)) => return p == "pub",
            _ => return false,
        }
    }
}

/// `leaseq.<function>(` in a string, with the call's arguments when the string closes it.
fn sql_calls(text: &str) -> impl Iterator<Item = (String, Option<Vec<String>>)> + '_ {
    text.match_indices("leaseq.").filter_map(move |(at, _)| {
        if at > 0 && text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let rest = &text[at + "leaseq.".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let after = rest[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('(') {
            return None;
        }
        let open = text.len() - after.len() + 1;
        Some((name, call_arguments(text, open)))
    })
}

/// The arguments of the call whose `(` ends at `start`, split at its own commas; None when the
/// string ends first (the statement is assembled at run time).
fn call_arguments(text: &str, start: usize) -> Option<Vec<String>> {
    let (mut parts, mut depth, mut quote, mut begun) = (Vec::new(), 0, None, start);
    for (i, c) in text[start..].char_indices() {
        let at = start + i;
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') if depth > 0 => depth -= 1,
            (None, ',' | ')') if depth == 0 => {
                parts.push(text[begun..at].to_string());
                if c == ')' {
                    if parts.len() == 1 && parts[0].trim().is_empty() {
                        parts.clear();
                    }
                    return Some(parts);
                }
                begun = at + 1;
            }
            _ => {}
        }
    }
    None
}

/// Why `entry` refuses these arguments, or None: names it has, no more positions than it has
/// arguments, every argument without a default given.
fn refusal(entry: &Value, args: &[String]) -> Option<String> {
    let inputs: Vec<&Value> = entry["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter(|arg| arg.get("mode").and_then(Value::as_str) != Some("out"))
        .collect();
    let names: Vec<&str> = inputs
        .iter()
        .map(|arg| arg["name"].as_str().expect("a name"))
        .collect();
    let (mut positional, mut named) = (0, BTreeSet::new());
    for arg in args {
        match arg.split_once("=>") {
            Some((name, _)) if name.trim().chars().all(|c| c.is_alphanumeric() || c == '_') => {
                named.insert(name.trim().to_string());
            }
            _ if !named.is_empty() => {
                return Some("a positional argument after a named one".into());
            }
            _ => positional += 1,
        }
    }
    if positional > inputs.len() {
        return Some(format!(
            "{positional} positional arguments, of {}",
            inputs.len()
        ));
    }
    if let Some(unknown) = named.iter().find(|n| !names.contains(&n.as_str())) {
        return Some(format!("no argument {unknown}"));
    }
    let missing: Vec<&str> = inputs
        .iter()
        .enumerate()
        .filter(|(at, arg)| arg.get("default").is_none() && *at >= positional)
        .map(|(_, arg)| arg["name"].as_str().expect("a name"))
        .filter(|name| !named.contains(*name))
        .collect();
    (!missing.is_empty()).then(|| format!("{missing:?} not given"))
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder is readable") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The library's sources: the modules `src/lib.rs` declares (the CLI and the console, in
/// `../cli/`, call the extension too, but are no API).
fn library() -> Sources {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let mut sources = Sources::default();
    for line in lib.lines() {
        if let Some(module) = line
            .strip_prefix("pub mod ")
            .and_then(|m| m.strip_suffix(';'))
        {
            let mut files = Vec::new();
            if src.join(module).is_dir() {
                rust_files(&src.join(module), &mut files);
            } else {
                files.push(src.join(format!("{module}.rs")));
            }
            files.iter().for_each(|f| sources.read(f));
        }
    }
    sources
}

#[test]
fn every_entry_names_the_rust_methods_that_call_it_or_says_why_none_does() {
    for entry in functions(&manifest()) {
        methods_named(entry);
    }
}

#[test]
fn the_manifest_names_exactly_the_rust_methods_that_call_each_function() {
    let (manifest, sources) = (manifest(), library());
    let mut by_function: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for entry in functions(&manifest) {
        for method in methods_named(entry) {
            let defined = sources.functions.get(&method).map_or(0, Vec::len);
            assert_eq!(
                defined, 1,
                "{method}: defined {defined} times in the library, not once"
            );
            assert!(
                sources.functions[&method][0].public,
                "{method} is not public"
            );
            let called = sources.functions_called(&method);
            assert!(
                called.contains(entry_name(entry)),
                "{method} calls {called:?}"
            );
            by_function
                .entry(entry_name(entry))
                .or_default()
                .insert(method);
        }
    }
    for (key, defined) in &sources.functions {
        let owner = key.rsplit_once("::").map(|(ty, _)| ty);
        if !defined.iter().any(|f| f.public) || owner.is_some_and(|ty| ty != "Client") {
            continue;
        }
        for function in sources.functions_called(key) {
            assert!(
                by_function
                    .get(function.as_str())
                    .is_some_and(|m| m.contains(key)),
                "{key} calls {function}: the manifest's rust entry for it does not name it"
            );
        }
    }
}

#[test]
fn every_function_the_rust_sources_call_is_listed_with_arguments_it_takes() {
    let manifest = manifest();
    let mut by_name: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for entry in functions(&manifest) {
        by_name.entry(entry_name(entry)).or_default().push(entry);
    }
    // The library's statements, and the command's: its own (`leaseq queue pause`) and the
    // console's.
    let (mut files, mut sources) = (Vec::new(), Sources::default());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("../cli/src"), &mut files);
    files.iter().for_each(|f| sources.read(f));
    let mut seen = BTreeSet::new();
    for (file, text) in &sources.strings {
        for (name, args) in sql_calls(text) {
            let entries = by_name
                .get(name.as_str())
                .unwrap_or_else(|| panic!("{file:?} calls leaseq.{name}, not in the manifest"));
            if let Some(args) = args {
                let refusals: Vec<_> = entries.iter().map(|e| refusal(e, &args)).collect();
                assert!(
                    refusals.contains(&None),
                    "{file:?}: leaseq.{name}({args:?}): {refusals:?}"
                );
            }
            seen.insert(name);
        }
    }
    assert!(
        seen.contains("queue_claim"),
        "the scan found no statements: is src/ read?"
    );
    assert!(
        seen.contains("queue_privileges"),
        "the scan found none of the console's statements: is ../cli/src/ read?"
    );
}

#[test]
fn the_worker_constants_are_the_manifests() {
    let manifest = manifest();
    let worker = manifest["worker"].as_table().expect("a [worker] table");
    let classes = |key: &str| -> Vec<String> {
        let list = worker[key].as_array().expect("a list of classes");
        list.iter()
            .map(|c| c.as_str().expect("a class").to_string())
            .collect()
    };
    let number = |key: &str| -> f64 {
        let value = &worker[key];
        let integer = value.as_integer().map(|i| i as f64);
        value.as_float().or(integer).expect(key)
    };
    let seconds = |key: &str| Duration::from_secs_f64(number(key));
    assert_eq!(REFUSED_CLASSES.to_vec(), classes("refused_classes"));
    assert_eq!(POISON_CLASSES.to_vec(), classes("poison_classes"));
    assert_eq!(FIRST_CLAIM_WAIT, seconds("first_claim_wait_seconds"));
    assert_eq!(MIN_FINISH_WAIT, seconds("min_finish_wait_seconds"));
    assert_eq!(STOP_MARGIN_CAP, seconds("stop_margin_cap_seconds"));
    assert_eq!(STOP_MARGIN_FRACTION, number("stop_margin_fraction"));
}

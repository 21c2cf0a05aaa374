//! The layout's rules, read from the source: top-level modules form no import cycle, one
//! module owns each outside interface (nvml-wrapper, procfs), the view's state and drawing do
//! no I/O, and every module says what it is in a `//!` header. Test code is left out: it may
//! reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The two source trees: the library's (`crates/core/src`, imported as `gputop_core`) and the
/// program's (`src`). Their top-level modules have distinct names.
fn roots() -> [PathBuf; 2] {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    [root.join("crates/core/src"), root.join("src")]
}

/// Every `.rs` file of both trees.
fn sources() -> Vec<PathBuf> {
    roots().iter().flat_map(|root| files(root)).collect()
}

/// `path` relative to its tree's `src/`.
fn relative(path: &Path) -> PathBuf {
    roots()
        .iter()
        .find_map(|root| path.strip_prefix(root).ok())
        .unwrap()
        .to_path_buf()
}

/// Every `.rs` file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// A file's text without its unit tests: `#[cfg(test)] mod tests` runs to the file's end, or
/// is a file of its own (`tests.rs`, or under `src/tests/`).
fn code(path: &Path) -> String {
    let relative = relative(path);
    if relative.starts_with("tests") || relative.ends_with("tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The top-level module a file belongs to: `src/source/nvml/raw.rs` is `source`.
fn top_module(path: &Path) -> String {
    let relative = relative(path);
    let first = relative
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Each top-level module and the top-level modules its code names (`crate::NAME`).
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in sources() {
        let module = top_module(&path);
        if module == "lib" || module == "main" || module == "tests" {
            continue;
        }
        let text = code(&path);
        let named = graph.entry(module.clone()).or_default();
        // `crate::NAME` within a tree; `gputop_core::NAME`, the program naming the library's.
        let named_at = text
            .match_indices("crate::")
            .map(|(at, _)| at + 7)
            .chain(text.match_indices("gputop_core::").map(|(at, _)| at + 13));
        for at in named_at {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                named.insert(name);
            }
        }
    }
    graph
}

#[test]
fn top_level_modules_form_no_import_cycle() {
    let graph = imports();
    assert!(graph.len() > 10, "found only {:?}", graph.keys());
    // Depth-first search from every module; a module met again on the current path closes a
    // cycle.
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        module: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == module) {
            let mut cycle = path[start..].to_vec();
            cycle.push(module.to_string());
            return Some(cycle);
        }
        if !done.insert(module.to_string()) {
            return None;
        }
        path.push(module.to_string());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    for module in graph.keys() {
        let cycle = visit(&graph, module, &mut Vec::new(), &mut BTreeSet::new());
        assert!(cycle.is_none(), "import cycle: {}", cycle.unwrap().join(" -> "));
    }
    // The helpers everything uses depend on nothing, the model only on them.
    assert!(graph["format"].is_empty(), "format imports {:?}", graph["format"]);
    let model: Vec<_> = graph["model"].iter().collect();
    assert_eq!(model, ["format"], "the model imports {model:?}");
}

/// The files, relative to their tree's `src/`, whose code contains any of `needles`.
fn files_naming(needles: &[&str]) -> Vec<String> {
    sources()
        .into_iter()
        .filter(|path| {
            let text = code(path);
            needles.iter().any(|n| text.contains(n))
        })
        .map(|path| relative(&path).display().to_string())
        .collect()
}

#[test]
fn one_module_owns_each_outside_interface() {
    for file in files_naming(&["nvml_wrapper"]) {
        assert!(file.starts_with("source/nvml/"), "{file} names nvml_wrapper");
    }
    for file in files_naming(&["\"/proc", "/etc/passwd"]) {
        assert!(
            file.starts_with("host/"),
            "{file} reads procfs or the user database"
        );
    }
}

#[test]
fn view_state_and_drawing_do_no_io_and_read_no_clock() {
    let io = [
        "std::fs",
        "std::net",
        "std::thread",
        "std::process",
        "File::",
        "Instant::now",
        "SystemTime::now",
    ];
    for file in files_naming(&io) {
        assert!(
            !file.starts_with("app/") && !file.starts_with("ui/"),
            "{file} does I/O, spawns or reads a clock"
        );
    }
}

#[test]
fn every_module_says_what_it_is() {
    for path in sources() {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("//! "), "{} has no //! header", path.display());
    }
}

//! Structure checks over the source text: the runner's module graph (no import cycle, layers
//! in order) and the length of library functions. Both run as `#[test]`s (so `cargo xtask
//! test` and CI enforce them) and `cargo xtask arch` writes the graph into ARCHITECTURE.md.
//!
//! The source is rustfmt-formatted, which the checks rely on: a function ends at the first
//! line after its `fn` line that closes a brace at the `fn` line's indentation. They read
//! text, not syntax trees, so they build in seconds with no parser crate.
//!
//! A runner module depends on a sibling when its text names `super::<sibling>` (in a `use`
//! line, a `use super::{…}` group, or a path in code), and on the parent `mod.rs` when it names
//! anything else through `super::` (an item `mod.rs` defines or re-exports). Comments are
//! skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Module name -> the sibling modules it uses (`mod` is the parent `mod.rs`).
pub(crate) type Graph = BTreeMap<String, BTreeSet<String>>;

/// Declared layers, bottom first: each a title and its modules.
pub(crate) type Layers = Vec<(String, BTreeSet<String>)>;

/// The use graph of the modules directly in `dir` (`mod.rs` and `<name>.rs`, or
/// `<name>/mod.rs` whose submodules count as part of `<name>`).
pub(crate) fn module_graph(dir: &Path) -> Result<Graph> {
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.is_dir() {
            let mut inner = Vec::new();
            rust_files(&path, &mut inner)?;
            files.entry(stem.to_owned()).or_default().extend(inner);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.entry(stem.to_owned()).or_default().push(path);
        }
    }
    let names: BTreeSet<String> = files.keys().cloned().collect();
    let mut graph = Graph::new();
    for (name, paths) in &files {
        let mut deps = BTreeSet::new();
        for path in paths {
            let text = std::fs::read_to_string(path)?;
            // A submodule's `super::` is its own parent module, not a sibling of `name`
            // (`<name>/mod.rs` is the module `name` itself: its `super::` is `dir`).
            let own = path.parent() == Some(dir) || path.file_name().is_some_and(|f| f == "mod.rs");
            let nested = !own;
            let code = strip_comments(&without_test_modules(&text));
            deps.extend(uses(&code, &names, nested));
            deps.extend(crate_paths(&code, dir, &names));
            if name == "mod" {
                deps.extend(path_roots(&code, &names));
            }
        }
        deps.remove(name);
        graph.insert(name.clone(), deps);
    }
    Ok(graph)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The text without its inline `#[cfg(test)] mod … { … }` modules (unit tests are not part of
/// the layering; their `super::` is the module they test).
fn without_test_modules(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        let next = lines.get(i + 1).map_or("", |l| l.trim_start());
        if t.starts_with("#[cfg(test)]") && next.starts_with("mod ") && next.ends_with('{') {
            let indent = lines[i + 1].len() - next.len();
            i = block_end(&lines, i + 1, indent) + 1;
            continue;
        }
        out.push_str(lines[i]);
        out.push('\n');
        i += 1;
    }
    out
}

/// The text without `//` comments (doc comments included) and `/* */` blocks; string
/// literals are kept (a `//` inside one is rare in this code and would only hide a name).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The siblings (and `mod`) that `text` names through `super::`. `nested`: the file is a
/// submodule of a sibling, whose `super::` is that sibling (only `super::super::` leaves it).
fn uses(text: &str, siblings: &BTreeSet<String>, nested: bool) -> BTreeSet<String> {
    let prefix = if nested { "super::super::" } else { "super::" };
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        // `super::super::x` seen from a top-level file is not ours to judge; from a nested
        // file, a plain `super::` (its own module) is skipped the same way.
        let before_ok = !rest[..i].ends_with("::");
        rest = &rest[i + prefix.len()..];
        if !before_ok || (!nested && rest.starts_with("super::")) {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = matching_brace(group);
            for item in top_level_items(&group[..end]) {
                out.insert(target(&item, siblings));
            }
        } else {
            let item: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.insert(target(&item, siblings));
        }
    }
    out
}

/// The siblings `text` names by their path from the crate root (`crate::runner::<sibling>`,
/// for the modules of `afk-core/src/runner`; generally `crate::<dir under src>::<sibling>`).
fn crate_paths(text: &str, dir: &Path, siblings: &BTreeSet<String>) -> BTreeSet<String> {
    let parts: Vec<String> = dir
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let Some(src) = parts.iter().rposition(|p| p == "src") else {
        return BTreeSet::new();
    };
    let prefix = format!("crate::{}::", parts[src + 1..].join("::"));
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(&prefix) {
        rest = &rest[i + prefix.len()..];
        let groups: Vec<String> = match rest.strip_prefix('{') {
            Some(group) => top_level_items(&group[..matching_brace(group)]),
            None => vec![
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect(),
            ],
        };
        for item in groups {
            let first = item.split("::").next().unwrap_or("");
            if siblings.contains(first) {
                out.insert(first.to_owned());
            }
        }
    }
    out
}

/// The children the parent module (`mod.rs`) names as path roots (`use agent::Agent;`,
/// `pub use journal::{…}`, `step::RunTask` in code).
fn path_roots(text: &str, children: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for name in children {
        let needle = format!("{name}::");
        let mut rest = text;
        while let Some(i) = rest.find(&needle) {
            let before = rest[..i].chars().next_back();
            let is_root = !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            if is_root && name != "mod" {
                out.insert(name.clone());
                break;
            }
            rest = &rest[i + needle.len()..];
        }
    }
    out
}

/// The index of the `}` closing a group that starts right after a `{`.
fn matching_brace(s: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    s.len()
}

/// The comma-separated items of a `use` group at its own nesting level.
fn top_level_items(group: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut cur = String::new();
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        if depth == 0 {
            cur.push(c);
        }
    }
    items.push(cur);
    items
        .into_iter()
        .map(|s| s.split_whitespace().collect::<String>())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The module a `super::`-relative path lands in: the sibling it starts with, else `mod`.
fn target(path: &str, siblings: &BTreeSet<String>) -> String {
    let first = path.split("::").next().unwrap_or("");
    if first == "self" || first.is_empty() {
        return "mod".to_owned();
    }
    if siblings.contains(first) && first != "mod" {
        first.to_owned()
    } else {
        "mod".to_owned()
    }
}

/// A cycle of `graph`, as the modules along it (first repeated at the end), if there is one.
pub(crate) fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = stack.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = stack[start..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_owned(), Mark::Open);
        stack.push(node.to_owned());
        for dep in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(dep, graph, marks, stack) {
                return Some(c);
            }
        }
        stack.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

/// The layers a module directory declares in its `mod.rs` docs: under a `# Layers` heading,
/// a numbered list whose items name their modules in backticks (`` `journal` ``), bottom
/// layer first. Each layer's title is the item's first bold text (`**Vocabulary**`). The
/// parent module itself belongs to the last layer.
pub(crate) fn declared_layers(mod_rs: &str, modules: &BTreeSet<String>) -> Layers {
    let mut layers: Vec<(String, BTreeSet<String>)> = Vec::new();
    let mut inside = false;
    for line in mod_rs.lines() {
        let Some(doc) = line.trim_start().strip_prefix("//!") else {
            if inside {
                break;
            }
            continue;
        };
        let doc = doc.trim();
        if doc.starts_with('#') {
            inside = doc == "# Layers";
            continue;
        }
        if !inside {
            continue;
        }
        let numbered = doc
            .split_once(". ")
            .filter(|(n, _)| n.parse::<u32>().is_ok());
        if let Some((_, rest)) = numbered {
            let title = rest.split("**").nth(1).unwrap_or(rest).to_owned();
            layers.push((title, BTreeSet::new()));
        }
        if let Some((_, names)) = layers.last_mut() {
            for (i, part) in doc.split('`').enumerate() {
                if i % 2 == 1 && modules.contains(part) {
                    names.insert(part.to_owned());
                }
            }
        }
    }
    if let Some((_, names)) = layers.last_mut() {
        names.insert("mod".to_owned());
    }
    layers
}

/// What is wrong with `graph` against its declared `layers`: modules in no layer or in two,
/// and uses that go up a layer. Empty when the code keeps to its layers.
pub(crate) fn layer_violations(
    graph: &Graph,
    layers: &[(String, BTreeSet<String>)],
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut layer_of = BTreeMap::new();
    for (i, (_, names)) in layers.iter().enumerate() {
        for n in names {
            if let Some(j) = layer_of.insert(n.clone(), i) {
                problems.push(format!(
                    "`{n}` is declared in layers {} and {}",
                    j + 1,
                    i + 1
                ));
            }
        }
    }
    for (n, deps) in graph {
        let Some(&from) = layer_of.get(n) else {
            problems.push(format!("`{n}` is in no declared layer"));
            continue;
        };
        for d in deps {
            if let Some(&to) = layer_of.get(d)
                && to > from
            {
                problems.push(format!(
                    "`{n}` (layer {}) uses `{d}` (layer {}), a layer above it",
                    from + 1,
                    to + 1
                ));
            }
        }
    }
    problems
}

/// The graph as a Mermaid flowchart, one subgraph per declared layer (top layer first). Uses
/// of the bottom layer are left out (every layer uses it; drawn, they hide the rest).
pub(crate) fn mermaid(graph: &Graph, layers: &[(String, BTreeSet<String>)]) -> Result<String> {
    if let Some(cycle) = find_cycle(graph) {
        bail!("the module graph has a cycle: {}", cycle.join(" -> "));
    }
    let mut out = String::new();
    writeln!(out, "```mermaid")?;
    writeln!(out, "flowchart TB")?;
    for (i, (title, names)) in layers.iter().enumerate().rev() {
        writeln!(out, "  subgraph L{}[\"{}. {title}\"]", i + 1, i + 1)?;
        for n in names {
            let label = if n == "mod" { "mod.rs" } else { n };
            writeln!(out, "    {n}[\"{label}\"]")?;
        }
        writeln!(out, "  end")?;
    }
    let bottom = layers.first().map(|(_, names)| names);
    for (n, deps) in graph {
        for d in deps {
            if !bottom.is_some_and(|b| b.contains(d)) {
                writeln!(out, "  {n} --> {d}")?;
            }
        }
    }
    writeln!(out, "```")?;
    Ok(out)
}

#[cfg(test)]
/// A library function and its length in lines (its `fn` line to its closing brace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LongFn {
    pub(crate) file: String,
    pub(crate) name: String,
    pub(crate) lines: usize,
}

#[cfg(test)]
/// Functions longer than `max` lines in the library sources of `root`: the `src/` tree of
/// every crate at the top of the workspace that users get (not `xtask`, the development
/// tool), leaving out `#[cfg(test)]` modules and test-only files (`tests.rs`, `*_tests.rs`,
/// anything under a `tests/` directory).
pub(crate) fn long_functions(root: &Path, max: usize) -> Result<Vec<LongFn>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let dir = entry?.path();
        if dir.file_name().is_some_and(|n| n == "xtask") {
            continue;
        }
        let src = dir.join("src");
        if src.is_dir() {
            rust_files(&src, &mut files)?;
        }
    }
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let in_tests_dir = path.components().any(|c| c.as_os_str() == "tests");
        if in_tests_dir || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for (fname, lines) in functions(&text) {
            if lines > max {
                out.push(LongFn {
                    file: rel.clone(),
                    name: fname,
                    lines,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
/// Each function of a rustfmt-formatted text outside `#[cfg(test)]` modules: its name and
/// length in lines.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut cfg_test = false;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.starts_with("#[cfg(test)]") {
            cfg_test = true;
            i += 1;
            continue;
        }
        let is_mod = trimmed.starts_with("mod ") || trimmed.starts_with("pub(crate) mod ");
        if cfg_test && is_mod && trimmed.ends_with('{') {
            i = block_end(&lines, i, indent) + 1;
            cfg_test = false;
            continue;
        }
        if !trimmed.starts_with("#[") {
            cfg_test = false;
        }
        if let Some(name) = fn_name(trimmed) {
            let end = block_end(&lines, i, indent);
            out.push((name, end - i + 1));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
/// The name of the function a line declares, if it declares one with a body.
fn fn_name(trimmed: &str) -> Option<String> {
    let mut rest = trimmed;
    for word in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(word).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The line closing the block opened at or after line `start` at `indent`: the first later
/// line that is `}` (or starts with `}`) at that indentation; `start` itself for a one-line
/// item or a declaration without a body.
fn block_end(lines: &[&str], start: usize, indent: usize) -> usize {
    if lines[start].trim_end().ends_with('}') || lines[start].trim_end().ends_with(';') {
        return start;
    }
    for (j, line) in lines.iter().enumerate().skip(start + 1) {
        let t = line.trim_start();
        if line.len() - t.len() == indent && !t.is_empty() {
            if t.starts_with('}') {
                return j;
            }
            if t.ends_with(';') && !t.starts_with(')') {
                // A signature without a body (a trait method), wrapped over lines.
                return j;
            }
        }
    }
    lines.len() - 1
}

/// The workspace root (xtask's parent directory).
pub(crate) fn root() -> PathBuf {
    crate::system::repo_root()
}

/// `cargo xtask arch`: write the runner's module graph into ARCHITECTURE.md between its
/// markers.
pub(crate) fn write_architecture() -> Result<()> {
    let root = root();
    let doc = root.join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(&doc)?;
    let updated = with_graph(&text, &runner_graph_doc(&root)?)?;
    if updated != text {
        std::fs::write(&doc, updated)?;
        println!("ARCHITECTURE.md: module graph updated");
    } else {
        println!("ARCHITECTURE.md: module graph already up to date");
    }
    Ok(())
}

const START: &str = "<!-- module-graph:start -->";
const END: &str = "<!-- module-graph:end -->";

/// The runner's module graph and its declared layers.
pub(crate) fn runner_layers(root: &Path) -> Result<(Graph, Layers)> {
    let dir = root.join("afk-core/src/runner");
    let graph = module_graph(&dir)?;
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    let layers = declared_layers(&std::fs::read_to_string(dir.join("mod.rs"))?, &modules);
    Ok((graph, layers))
}

fn runner_graph_doc(root: &Path) -> Result<String> {
    let (graph, layers) = runner_layers(root)?;
    let problems = layer_violations(&graph, &layers);
    if !problems.is_empty() {
        bail!(
            "the runner's modules break their layers:\n{}",
            problems.join("\n")
        );
    }
    mermaid(&graph, &layers)
}

/// `text` with what stands between the markers replaced by `graph`.
fn with_graph(text: &str, graph: &str) -> Result<String> {
    let (Some(s), Some(e)) = (text.find(START), text.find(END)) else {
        bail!("ARCHITECTURE.md has no `{START}` … `{END}` markers");
    };
    if e < s {
        bail!("ARCHITECTURE.md: `{END}` stands before `{START}`");
    }
    let generated = format!(
        "{START}\n<!-- generated by `cargo xtask arch` from the `use` lines of afk-core/src/runner; do not edit by hand -->\n{graph}{END}"
    );
    Ok(format!(
        "{}{generated}{}",
        &text[..s],
        &text[e + END.len()..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Library functions allowed over [`MAX_FN_LINES`], each with the reason it stays whole.
    /// At most five.
    const LONG_FN_ALLOWED: &[(&str, &str, &str)] = &[];

    const MAX_FN_LINES: usize = 80;

    #[test]
    fn the_runner_modules_import_no_cycle() {
        let graph = module_graph(&root().join("afk-core/src/runner")).unwrap();
        assert!(graph.len() > 10, "runner modules found: {graph:?}");
        if let Some(cycle) = find_cycle(&graph) {
            panic!(
                "the runner's modules import each other in a cycle: {}",
                cycle.join(" -> ")
            );
        }
    }

    #[test]
    fn the_runner_modules_keep_to_the_layers_their_docs_declare() {
        let (graph, layers) = runner_layers(&root()).unwrap();
        assert!(
            layers.len() >= 4,
            "layers declared in runner/mod.rs: {layers:?}"
        );
        let problems = layer_violations(&graph, &layers);
        assert!(
            problems.is_empty(),
            "afk-core/src/runner against the layers its mod.rs declares:\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn library_functions_stay_short() {
        assert!(LONG_FN_ALLOWED.len() <= 5, "at most five long functions");
        let long = long_functions(&root(), MAX_FN_LINES).unwrap();
        let unexplained: Vec<&LongFn> = long
            .iter()
            .filter(|f| {
                !LONG_FN_ALLOWED
                    .iter()
                    .any(|(file, name, _)| f.file == *file && f.name == *name)
            })
            .collect();
        assert!(
            unexplained.is_empty(),
            "library functions over {MAX_FN_LINES} lines (split them, or add one to \
             LONG_FN_ALLOWED with its reason): {unexplained:#?}"
        );
        for (file, name, _) in LONG_FN_ALLOWED {
            assert!(
                long.iter().any(|f| f.file == *file && f.name == *name),
                "{file}::{name} is no longer long: take it off LONG_FN_ALLOWED"
            );
        }
    }

    #[test]
    fn architecture_md_shows_the_current_module_graph() {
        let root = root();
        let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
        let want = with_graph(&text, &runner_graph_doc(&root).unwrap()).unwrap();
        assert!(
            want == text,
            "ARCHITECTURE.md's module graph is stale: run `cargo xtask arch`"
        );
    }

    fn names(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn uses_are_read_from_use_lines_groups_and_paths() {
        let sib = names(&["a", "b", "c", "d", "mod"]);
        let text =
            "use super::a::X;\nuse super::{b::{Y, Z}, Outcome};\nfn f() { super::c::g(); }\n";
        assert_eq!(uses(text, &sib, false), names(&["a", "b", "c", "mod"]));
        let text = strip_comments("// use super::d::X;\n/// see [`super::d`]\nfn f() {}\n");
        assert!(uses(&text, &sib, false).is_empty());
        let text = "fn f() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
        assert!(uses(&without_test_modules(text), &sib, false).is_empty());
        // A submodule's `super::` is its own parent.
        assert_eq!(
            uses("use super::inner;\nuse super::super::a::X;", &sib, true),
            names(&["a"])
        );
    }

    #[test]
    fn the_parent_module_uses_the_children_it_names_and_crate_paths_count() {
        let sib = names(&["agent", "step", "journal", "mod"]);
        let text = "pub use agent::Agent;\nfn f() { step::go(); x.journal_len(); }\n";
        assert_eq!(path_roots(text, &sib), names(&["agent", "step"]));
        let dir = Path::new("/w/afk-core/src/runner");
        let text = "use crate::runner::{journal::Plan, step};\nuse crate::runner::agent::A;\n";
        assert_eq!(
            crate_paths(text, dir, &sib),
            names(&["agent", "journal", "step"])
        );
    }

    #[test]
    fn a_cycle_is_found_and_named() {
        let mut g = Graph::new();
        g.insert("a".into(), names(&["b"]));
        g.insert("b".into(), names(&["c"]));
        g.insert("c".into(), names(&["a"]));
        g.insert("d".into(), names(&["a"]));
        let cycle = find_cycle(&g).unwrap();
        assert_eq!(cycle.first(), cycle.last());
        assert_eq!(cycle.len(), 4);
        g.insert("c".into(), BTreeSet::new());
        assert_eq!(find_cycle(&g), None);
    }

    #[test]
    fn layers_are_read_from_the_docs_and_an_upward_use_is_named() {
        let mods = names(&["a", "b", "c", "d", "mod"]);
        let doc = "//! Intro `d`.\n//!\n//! # Layers\n//!\n//! 1. **Bottom**: `a` and\n//!    `b`.\n//! 2. **Top**: `c`.\n//!\n//! # Other\n//! `d`\n\nmod a;\n";
        let layers = declared_layers(doc, &mods);
        assert_eq!(layers.len(), 2);
        assert_eq!(layers[0], ("Bottom".to_owned(), names(&["a", "b"])));
        assert_eq!(layers[1], ("Top".to_owned(), names(&["c", "mod"])));
        let mut g = Graph::new();
        g.insert("a".into(), BTreeSet::new());
        g.insert("b".into(), names(&["a"]));
        g.insert("c".into(), names(&["a", "b"]));
        g.insert("mod".into(), names(&["c"]));
        assert!(layer_violations(&g, &layers).is_empty());
        g.insert("a".into(), names(&["c"]));
        g.insert("d".into(), BTreeSet::new());
        let problems = layer_violations(&g, &layers);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("`a` (layer 1) uses `c` (layer 2)"));
        assert!(problems[1].contains("`d` is in no declared layer"));
    }

    #[test]
    fn function_lengths_count_from_fn_to_its_brace_outside_test_modules() {
        let text = "\
pub(crate) async fn long(
    x: u32,
) -> u32 {
    let y = {
        x
    };
    y
}

fn one() {}

trait T {
    fn decl(&self);
    fn body(&self) {
        ()
    }
}

#[cfg(test)]
mod tests {
    fn in_tests() {
        ()
    }
}
";
        let fns = functions(text);
        assert_eq!(
            fns,
            vec![
                ("long".to_owned(), 8),
                ("one".to_owned(), 1),
                ("decl".to_owned(), 1),
                ("body".to_owned(), 3),
            ]
        );
    }

    #[test]
    fn the_graph_goes_between_the_markers() {
        let text = format!("# A\n\n{START}\nold\n{END}\n\nrest\n");
        let out = with_graph(&text, "NEW\n").unwrap();
        assert!(out.contains("NEW\n<!-- module-graph:end -->\n\nrest"));
        assert!(!out.contains("old"));
        assert_eq!(with_graph(&out, "NEW\n").unwrap(), out);
        assert!(with_graph("# no markers", "x").is_err());
    }
}

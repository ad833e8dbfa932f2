//! Tidy checks of the repository's Markdown files, run as tests (`cargo nextest run -p xtask`,
//! part of `cargo xtask test`): what a doc names must exist.
//!
//! Every `*.md` file of the repository is read (not `CHANGELOG.md`, whose entries name things as
//! they were then; not hidden directories or `target/`). In each:
//!
//! - **Paths.** An inline code span (single backticks, outside fenced code blocks) is a path
//!   when it has no whitespace and contains a `/` or ends in `.rs`, `.md`, `.toml`, `.py`,
//!   `.sh`, `.json` or `.lock`. It is *not* a repository path, and is skipped, when it contains
//!   `://` (a URL), starts with `/` (an absolute path such as `/tmp/…`), `$` or `~`, starts with
//!   `target/` (a build output), or contains one of `< > * ? { } [ ] | = … :` (placeholders such
//!   as `<target>/…` or `.afk-services/<set>/`, globs, brace lists, key patterns, shell). A path
//!   must exist relative to the repository root, to the Markdown file's directory, to a crate's
//!   directory (`tests/store.rs`) or to a crate's `src/` (`runner/resume.rs`); one ending in `/`
//!   must be a directory.
//! - **Test names.** A span `PATH.rs::name` names a function: `PATH.rs` is found as above and
//!   one of the files found must contain `fn name`.
//! - **Links.** A Markdown link `[text](target)` whose target has no `:` (a URL, a rustdoc
//!   path) and no whitespace, and is not only an anchor, must exist relative to the Markdown
//!   file (its `#anchor` is not checked).
//! - **Commands.** Every `cargo xtask WORD` anywhere in the text (code blocks too) must be a
//!   subcommand of `xtask/src/main.rs`'s `Cli` (variant names in kebab case), and
//!   `cargo xtask services WORD` one of `ServicesCmd`: both lists are read from that file.
//! - **Copies.** A line `<!-- same-as: PATH -->` must be followed by a fenced code block whose
//!   text equals the file `PATH` (the README's embedding example and
//!   `examples/embedding/src/main.rs`, its fleet example and
//!   `examples/fleet-service/src/serve.rs`, which CI compiles). In a copy of a Rust file,
//!   rustdoc's hidden lines (`# …`) do not count.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// File name endings that make a code span a path even without a `/`.
const EXTENSIONS: [&str; 7] = [".rs", ".md", ".toml", ".py", ".sh", ".json", ".lock"];
/// Characters that make a span a placeholder, a glob, a key pattern or shell, not a path.
const NOT_A_PATH: [char; 13] = [
    '<', '>', '*', '?', '{', '}', '[', ']', '|', '=', '…', ':', '`',
];

/// What a check needs to know about the repository.
struct Repo {
    root: PathBuf,
    /// Directories holding a `Cargo.toml` (crates), relative to the root.
    crates: Vec<PathBuf>,
    /// `cargo xtask` subcommands, and those of `cargo xtask services`.
    commands: BTreeSet<String>,
    services: BTreeSet<String>,
}

impl Repo {
    fn load() -> Repo {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask sits in the repository root")
            .to_path_buf();
        let mut crates = Vec::new();
        for dir in [root.clone(), root.join("examples")] {
            for entry in std::fs::read_dir(&dir)
                .expect("read the repository")
                .flatten()
            {
                let path = entry.path();
                if path.join("Cargo.toml").is_file() {
                    crates.push(path.strip_prefix(&root).expect("under root").to_path_buf());
                }
            }
        }
        let main = std::fs::read_to_string(root.join("xtask/src/main.rs")).expect("xtask main");
        Repo {
            commands: variants(&main, "enum Cli {"),
            services: variants(&main, "enum ServicesCmd {"),
            root,
            crates,
        }
    }

    /// The existing files or directories `path` may name, seen from the Markdown file `md`.
    fn resolve(&self, md: &Path, path: &str) -> Vec<PathBuf> {
        let md_dir = md.parent().unwrap_or(Path::new(""));
        let mut bases = vec![self.root.clone(), self.root.join(md_dir)];
        for krate in &self.crates {
            bases.push(self.root.join(krate));
            bases.push(self.root.join(krate).join("src"));
        }
        let dir_only = path.ends_with('/');
        bases
            .into_iter()
            .map(|base| base.join(path.trim_end_matches('/')))
            .filter(|p| if dir_only { p.is_dir() } else { p.exists() })
            .collect()
    }
}

/// The variants of the enum that starts at `header`, in kebab case (`RocksdbNewest` →
/// `rocksdb-newest`): lines indented by four spaces that start with a capital letter.
fn variants(source: &str, header: &str) -> BTreeSet<String> {
    let start = source
        .find(header)
        .expect("the enum is in xtask/src/main.rs");
    let mut out = BTreeSet::new();
    for line in source[start + header.len()..].lines() {
        if line.starts_with('}') {
            break;
        }
        let Some(rest) = line.strip_prefix("    ") else {
            continue;
        };
        if !rest.starts_with(|c: char| c.is_ascii_uppercase()) {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        let mut kebab = String::new();
        for (i, c) in name.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                kebab.push('-');
            }
            kebab.push(c.to_ascii_lowercase());
        }
        out.insert(kebab);
    }
    out
}

/// Whether a code span is a repository path by the rules of the module docs.
fn is_repo_path(span: &str) -> bool {
    if span.is_empty() || span.chars().any(char::is_whitespace) {
        return false;
    }
    let looks_like_path = span.contains('/') || EXTENSIONS.iter().any(|e| span.ends_with(e));
    looks_like_path
        && !span.contains("://")
        && !span.starts_with(['/', '$', '~', '-'])
        && !span.starts_with("target/")
        && !span.contains(NOT_A_PATH)
}

/// The text outside fenced code blocks, and the fenced blocks with the line before each.
fn split_fences(text: &str) -> (String, Vec<(String, String)>) {
    let mut prose = String::new();
    let mut blocks = Vec::new();
    let mut fence: Option<(String, String)> = None;
    let mut previous = "";
    for line in text.lines() {
        let fenced = line.trim_start().starts_with("```");
        match (&mut fence, fenced) {
            (None, true) => fence = Some((previous.to_owned(), String::new())),
            (Some(_), true) => blocks.extend(fence.take()),
            (Some((_, body)), false) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, false) => {
                prose.push_str(line);
                prose.push('\n');
            }
        }
        // A fence line ends the paragraph of backticks before it.
        if fenced {
            prose.push('\n');
        }
        previous = line;
    }
    (prose, blocks)
}

/// The inline code spans of the prose, paired within each paragraph (a span may wrap lines).
fn code_spans(prose: &str) -> Vec<String> {
    let mut spans = Vec::new();
    for paragraph in prose.split("\n\n") {
        let mut parts = paragraph.split('`');
        parts.next();
        while let Some(span) = parts.next() {
            if parts.next().is_none() {
                break; // an unpaired backtick: nothing after it is a span
            }
            spans.push(span.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    spans
}

/// Link targets of `[text](target)` in the prose.
fn link_targets(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = prose;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_owned());
        }
    }
    out
}

/// The problems of one Markdown file: `md` is its path relative to the root.
fn check(repo: &Repo, md: &Path, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let (prose, blocks) = split_fences(text);
    let spans = code_spans(&prose);
    for span in &spans {
        if let Some((path, name)) = span.split_once("::").filter(|(p, _)| p.ends_with(".rs")) {
            if !is_repo_path(path) || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let files = repo.resolve(md, path);
            if files.is_empty() {
                problems.push(format!("{}: `{span}`: no file {path}", md.display()));
            } else if !files.iter().any(|f| defines_fn(f, name)) {
                problems.push(format!(
                    "{}: `{span}`: no fn {name} in {path}",
                    md.display()
                ));
            }
        } else if is_repo_path(span) && repo.resolve(md, span).is_empty() {
            problems.push(format!("{}: `{span}`: no such path", md.display()));
        }
    }
    for target in link_targets(&prose) {
        let path = target.split('#').next().unwrap_or("");
        if path.is_empty() || target.contains(':') || target.contains(char::is_whitespace) {
            continue; // an anchor, a URL, `mailto:`, a rustdoc path (`crate::open`)
        }
        let md_dir = md.parent().unwrap_or(Path::new(""));
        if !repo.root.join(md_dir).join(path).exists() {
            problems.push(format!("{}: link ({target}): no such path", md.display()));
        }
    }
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '`')
        .collect();
    for (i, pair) in words.windows(3).enumerate() {
        if pair[0] != "cargo" || pair[1] != "xtask" {
            continue;
        }
        let command = word(pair[2]);
        if command.is_empty() {
            continue; // `cargo xtask` alone, `cargo xtask <cmd>`, `cargo xtask …`
        }
        if !repo.commands.contains(command) {
            problems.push(format!(
                "{}: `cargo xtask {command}`: no such subcommand",
                md.display()
            ));
        } else if command == "services" {
            let action = word(words.get(i + 3).copied().unwrap_or(""));
            if !action.is_empty() && !repo.services.contains(action) {
                problems.push(format!(
                    "{}: `cargo xtask services {action}`: no such subcommand",
                    md.display()
                ));
            }
        }
    }
    for (before, body) in &blocks {
        let Some(path) = before
            .trim()
            .strip_prefix("<!-- same-as:")
            .and_then(|r| r.strip_suffix("-->"))
        else {
            continue;
        };
        let path = path.trim();
        match std::fs::read_to_string(repo.root.join(path)) {
            Ok(file) if file == visible(path, body) => {}
            Ok(_) => problems.push(format!(
                "{}: the code block after `same-as: {path}` differs from that file",
                md.display()
            )),
            Err(e) => problems.push(format!("{}: same-as {path}: {e}", md.display())),
        }
    }
    problems
}

/// What rustdoc shows of a code block copied from `path`: in Rust, without the hidden lines
/// (`#` alone or `# …`) a doctest may wrap the copy in.
fn visible(path: &str, body: &str) -> String {
    if !path.ends_with(".rs") {
        return body.to_owned();
    }
    body.lines()
        .filter(|l| *l != "#" && !l.starts_with("# "))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The subcommand a word starts with (`test|services` → `test`), or `""` when it starts with
/// anything but a lower-case letter (`<cmd>`, `--help`).
fn word(w: &str) -> &str {
    if !w.starts_with(|c: char| c.is_ascii_lowercase()) {
        return "";
    }
    let end = w
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
        .unwrap_or(w.len());
    &w[..end]
}

/// Whether the Rust file defines a function `name`.
fn defines_fn(file: &Path, name: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(file) else {
        return false;
    };
    let needle = format!("fn {name}");
    text.match_indices(&needle).any(|(i, _)| {
        text[i + needle.len()..].starts_with(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
    })
}

/// The Markdown files checked, relative to the root.
fn markdown_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = dir.join(&name);
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if entry.path().is_dir() {
            markdown_files(root, &rel, out);
        } else if name.ends_with(".md") && name != "CHANGELOG.md" {
            out.push(rel);
        }
    }
}

#[test]
fn every_path_test_and_command_the_docs_name_exists() {
    let repo = Repo::load();
    let mut files = Vec::new();
    markdown_files(&repo.root, Path::new(""), &mut files);
    files.sort();
    assert!(
        files.iter().any(|f| f == Path::new("README.md")),
        "found no README.md under {}",
        repo.root.display()
    );
    let problems: Vec<String> = files
        .iter()
        .flat_map(|md| {
            let text = std::fs::read_to_string(repo.root.join(md)).expect("read a Markdown file");
            check(&repo, md, &text)
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_subcommands_are_read_from_main() {
    let repo = Repo::load();
    for command in [
        "test",
        "services",
        "ci",
        "rocksdb-newest",
        "msrv",
        "bench",
        "chaos",
    ] {
        assert!(
            repo.commands.contains(command),
            "{command}: {:?}",
            repo.commands
        );
    }
    for action in ["up", "down", "status"] {
        assert!(
            repo.services.contains(action),
            "{action}: {:?}",
            repo.services
        );
    }
}

#[test]
fn a_doc_naming_what_does_not_exist_fails() {
    let repo = Repo::load();
    let text = "\
The store trait is in `afk-core/src/store/mod.rs`, its tests in `tests/it/conformance.rs`, \
the resume rules in `runner/resume.rs`, the example in `examples/custom-store/` and \
[the README](README.md); run `cargo xtask test` or `cargo xtask services up`.

But `afk-core/src/store/no_such_file.rs` and `afk-core/tests/it/runner_crash.rs::no_such_test`
do not exist, nor does `cargo xtask no-such-command`, `cargo xtask services sideways`,
`examples/no-such-example/` or [a link](NO_SUCH.md).

Not paths: `/tmp/afk/x.rs`, `<target>/bench-report.md`, `.afk-services/<set>/`, \
`afk-core/src/*.rs`, `https://example.invalid/a/b.md`, `target/afk-cache`, `a / b`.

<!-- same-as: xtask/Cargo.toml -->
```toml
not the manifest
```
";
    let problems = check(&repo, Path::new("SYNTHETIC.md"), text);
    let expected = [
        "`afk-core/src/store/no_such_file.rs`: no such path",
        "`afk-core/tests/it/runner_crash.rs::no_such_test`: no fn no_such_test",
        "`cargo xtask no-such-command`: no such subcommand",
        "`cargo xtask services sideways`: no such subcommand",
        "`examples/no-such-example/`: no such path",
        "link (NO_SUCH.md): no such path",
        "differs from that file",
    ];
    for want in expected {
        assert!(
            problems.iter().any(|p| p.contains(want)),
            "missing {want:?} in {problems:#?}"
        );
    }
    assert_eq!(problems.len(), expected.len(), "{problems:#?}");
}

#[test]
fn a_test_that_exists_and_a_matching_copy_pass() {
    let repo = Repo::load();
    let manifest = std::fs::read_to_string(repo.root.join("xtask/Cargo.toml")).expect("manifest");
    let text = format!(
        "`xtask/src/tidy.rs::a_test_that_exists_and_a_matching_copy_pass`\n\n\
         <!-- same-as: xtask/Cargo.toml -->\n```toml\n{manifest}```\n"
    );
    assert_eq!(
        check(&repo, Path::new("SYNTHETIC.md"), &text),
        Vec::<String>::new()
    );
}

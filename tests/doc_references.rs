//! The docs, the book and the examples cite only sources a reader has: the
//! published notes by author and title, or a chapter of the book. No citation
//! of internal design files (`DESIGN.md`, `STYLE.md`), of numbered seeds
//! ("seed 000", also when the number wraps onto the next line, and "the
//! seed's …"), of seed file names (`000_0123456789abcdef.txt`) or of
//! the steering folder beside the repository (`..` then `/shared`).

use std::fs;
use std::path::{Path, PathBuf};

/// Every file under `dir`, recursively.
/// The path of the steering folder, assembled so that this file does not
/// itself name it.
const STEERING: &str = concat!("..", "/", "shared");

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// `s` with a leading comment marker (`//!`, `///`, `//`) and blanks removed.
fn strip_comment(s: &str) -> &str {
    let s = s.trim_start();
    let s = s
        .strip_prefix("//")
        .map_or(s, |r| r.trim_start_matches(['/', '!']));
    s.trim_start()
}

/// Whether `s` starts with three ASCII digits.
fn starts_with_number(s: &str) -> bool {
    s.len() >= 3 && s.as_bytes()[..3].iter().all(u8::is_ascii_digit)
}

/// Whether the byte before `i` in `s` ends a word (or `i` is the start).
fn word_start(s: &str, i: usize) -> bool {
    i == 0 || !matches!(s.as_bytes()[i - 1], b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_')
}

/// "seed 000", "seeds 001": `seed` or `seeds`, blanks, three digits.
/// `next` is the following line, for a number that wrapped onto it.
fn cites_numbered_seed(line: &str, next: Option<&str>) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.match_indices("seed").any(|(i, _)| {
        if !word_start(&lower, i) {
            return false;
        }
        let rest = &lower[i + 4..];
        let rest = rest.strip_prefix('s').unwrap_or(rest);
        let after = rest.trim_start();
        if after.is_empty() {
            // "seed" ends the line: look at the start of the next one.
            return next.is_some_and(|n| starts_with_number(strip_comment(n)));
        }
        after.len() < rest.len() && starts_with_number(after)
    })
}

/// A seed file name: three digits, `_`, sixteen hex digits, `.txt`.
fn cites_seed_file(line: &str) -> bool {
    let b = line.as_bytes();
    (3..b.len()).any(|i| {
        b[i] == b'_'
            && b[i - 3..i].iter().all(u8::is_ascii_digit)
            && b.len() >= i + 21
            && b[i + 1..i + 17].iter().all(u8::is_ascii_hexdigit)
            && &b[i + 17..i + 21] == b".txt"
    })
}

fn offending(line: &str, next: Option<&str>) -> bool {
    line.contains("DESIGN.md")
        || line.contains("STYLE.md")
        || line.contains(STEERING)
        || line.to_ascii_lowercase().contains("the seed's")
        || cites_numbered_seed(line, next)
        || cites_seed_file(line)
}

#[test]
fn no_citations_of_internal_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let this = root.join(file!());
    let mut files = vec![root.join("README.md")];
    for dir in ["src", "book/src", "examples"] {
        walk(&root.join(dir), &mut files);
    }
    let mut hits = Vec::new();
    for path in files.iter().filter(|p| **p != this) {
        let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if offending(line, lines.get(i + 1).copied()) {
                let rel = path.strip_prefix(root).unwrap_or(path);
                hits.push(format!("{}:{}: {}", rel.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "citations of internal files (cite the published source or a book chapter):\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_patterns_match() {
    assert!(offending("see DESIGN.md §3", None));
    assert!(offending("(STYLE.md item 4)", None));
    assert!(offending(&format!("in {STEERING}/notes"), None));
    assert!(offending("(seed 000, §VI)", None));
    assert!(offending("Seed 004 §9", None));
    assert!(offending("seeds 001", None));
    assert!(offending("the seed's `SetIndex`", None));
    assert!(offending("the Knossos demo of seed", Some("//! 004 §9.")));
    assert!(offending("see 000_838b34d8637378c0.txt", None));
    assert!(!offending("∂⃖f with seed `ȳ = 1`", None));
    assert!(!offending("let seeds = [0.5, 3.0];", None));
    assert!(!offending(
        "with seeds",
        Some("/// `d_{2^j} = 1` and all others 0")
    ));
    assert!(!offending("PROPTEST_RNG_SEED 123", None));
}

/// Extensions of the repository's own files that docs name.
const FILE_EXTENSIONS: [&str; 9] = ["rs", "md", "csv", "py", "toml", "txt", "png", "json", "ttf"];

/// The file names a line mentions: the contents of backtick spans and the
/// targets of Markdown links that look like a path to a file (no spaces,
/// one of [`FILE_EXTENSIONS`], no URL scheme).
fn named_files(line: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let looks_like_file = |s: &str| {
        !s.is_empty()
            && !s.contains("://")
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
            && s.rsplit_once('.')
                .is_some_and(|(stem, ext)| !stem.is_empty() && FILE_EXTENSIONS.contains(&ext))
    };
    for (i, span) in line.split('`').enumerate() {
        if i % 2 == 1 && looks_like_file(span) {
            names.push(span);
        }
    }
    let mut rest = line;
    while let Some(p) = rest.find("](") {
        let tail = &rest[p + 2..];
        let end = tail.find(')').unwrap_or(tail.len());
        let target = tail[..end].split('#').next().unwrap_or("");
        if looks_like_file(target) {
            names.push(target);
        }
        rest = &tail[end..];
    }
    names
}

/// Every file a doc, the book, the README or an example names exists in the
/// repository: at that path from the naming file's directory or one of its
/// parents up to the repository root (so `rules/mod.rs` from `src/rules`,
/// a Markdown link from its page), or, for a bare file name, somewhere in
/// the repository. Generated files under `target/` are exempt, and so is
/// this file, which names the forbidden files on purpose.
#[test]
fn named_files_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    for dir in ["src", "book/src", "examples", "tests", "benches", "gallery"] {
        if root.join(dir).is_dir() {
            walk(&root.join(dir), &mut files);
        }
    }
    let mut all = Vec::new();
    for dir in [
        "src", "book", "examples", "tests", "benches", "gallery", ".ci",
    ] {
        if root.join(dir).is_dir() {
            walk(&root.join(dir), &mut all);
        }
    }
    let base_names: std::collections::HashSet<String> = all
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    let mut missing = Vec::new();
    let this = root.join(file!());
    let text_files = files.iter().filter(|p| **p != this).filter(|p| {
        p.extension()
            .is_some_and(|e| e == "rs" || e == "md" || e == "py")
    });
    for path in text_files {
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let dir = path.parent().unwrap_or(root);
        let dir = dir.to_path_buf();
        for (i, line) in text.lines().enumerate() {
            for name in named_files(line) {
                let found = name.starts_with("target/")
                    || dir
                        .ancestors()
                        .any(|d| d.starts_with(root) && d.join(name).exists())
                    || (!name.contains('/') && base_names.contains(name));
                if !found {
                    let rel = path.strip_prefix(root).unwrap_or(path);
                    missing.push(format!("{}:{}: {name}", rel.display(), i + 1));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs name files that are not in the repository:\n{}",
        missing.join("\n")
    );
}

#[test]
fn named_files_are_found_in_lines() {
    assert_eq!(
        named_files("see `examples/data/wdbc.csv` and [the book](book/src/taylor.md#x)"),
        vec!["examples/data/wdbc.csv", "book/src/taylor.md"]
    );
    assert!(named_files("`x.sin()` and `a.b` and [x](https://e.org/a.md)").is_empty());
}

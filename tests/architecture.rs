//! The layering of `src/`: no two files import each other, directly or
//! through others (the architecture chapter of the book, "Layers").
//!
//! The check reads the source, not the compiled crate. A file *imports*
//! another when it names an item defined there: through a `use` line or a
//! path written in its code (`crate::a::b::Name`, `super::Name`), with
//! re-exports (`pub use`) followed to the file that defines the item.
//! Comments, strings and `#[cfg(test)]` modules are not read. The graph is
//! cut into strongly connected components (Tarjan); any component of more
//! than one file is an import circle, and the test prints its arrows with
//! the names that make them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its module path (`["program", "ir"]`), its text with
/// comments, strings and test modules blanked, and the items it defines.
struct File {
    path: String,
    module: Vec<String>,
    text: String,
    defines: BTreeSet<String>,
    /// `pub use` re-exports: name -> the path it stands for.
    reexports: BTreeMap<String, Vec<String>>,
    /// Child modules declared with `mod name;`.
    children: BTreeSet<String>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under `src/`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// Blanks comments, string and char literals (keeping line structure).
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                    i += 1;
                }
            }
        } else if b[i] == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(b[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&b'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.extend(b'"'..=b'"');
            out.push(b'"');
            i = j;
        } else if b[i] == b'"' {
            out.push(b'"');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                if b.get(i) == Some(&b'\n') {
                    out.push(b'\n');
                }
                i += 1;
            }
            out.push(b'"');
            i += 1;
        } else if b[i] == b'\'' && (b.get(i + 2) == Some(&b'\'') || (b.get(i + 1) == Some(&b'\\')))
        {
            // A char literal ('a', '\n', '\''); lifetimes are left alone.
            let mut j = i + 1;
            if b[j] == b'\\' {
                j += 2;
            } else {
                j += 1;
            }
            while j < b.len() && b[j] != b'\'' {
                j += 1;
            }
            out.extend_from_slice(b"' '");
            i = j + 1;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// Blanks `#[cfg(test)]` items (the unit tests beside internals).
fn strip_test_modules(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(k) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..k]);
        let after = &rest[k..];
        // Skip to the item's body and its matching brace (or its `;`).
        let open = after.find('{');
        let semi = after.find(';');
        let end = match (open, semi) {
            (Some(o), Some(s)) if s < o => s + 1,
            (Some(o), _) => {
                let mut depth = 0usize;
                let mut end = after.len();
                for (j, c) in after[o..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = o + j + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(s)) => s + 1,
            (None, None) => after.len(),
        };
        out.extend(
            after[..end]
                .chars()
                .map(|c| if c == '\n' { '\n' } else { ' ' }),
        );
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The items a file defines (at any depth: macro bodies define items too).
fn definitions(text: &str) -> BTreeSet<String> {
    const KINDS: [&str; 9] = [
        "struct ",
        "enum ",
        "trait ",
        "fn ",
        "type ",
        "const ",
        "static ",
        "union ",
        "macro_rules! ",
    ];
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let mut t = line.trim_start();
        for prefix in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "unsafe ",
            "const ",
            "extern \"\" ",
        ] {
            if let Some(r) = t.strip_prefix(prefix) {
                t = r;
            }
        }
        for k in KINDS {
            if let Some(r) = t.strip_prefix(k) {
                let name: String = r.chars().take_while(|&c| is_ident(c)).collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        }
    }
    out
}

/// Expands one `use` tree (`a::{b, c::d as e}`) into paths.
fn expand_use(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    if let Some(inner) = tree.strip_prefix('{') {
        let inner = &inner[..inner.rfind('}').unwrap_or(inner.len())];
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&inner[start..i], prefix, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use(&inner[start..], prefix, out);
        return;
    }
    match tree.find("::") {
        Some(k) if !tree[..k].contains('{') => {
            let mut p = prefix.to_vec();
            p.push(tree[..k].trim().to_string());
            expand_use(&tree[k + 2..], &p, out);
        }
        _ => {
            let name = tree.split(" as ").next().unwrap().trim();
            let mut p = prefix.to_vec();
            p.push(name.to_string());
            out.push(p);
        }
    }
}

/// The `use` statements of a text: (is `pub`, expanded paths).
fn uses(text: &str) -> Vec<(bool, Vec<Vec<String>>)> {
    use_statements(text).0
}

/// The text with its `use` statements blanked (for the paths written in
/// code).
fn without_uses(text: &str) -> String {
    use_statements(text).1
}

/// A path, one segment a string.
type Segments = Vec<String>;
/// The `use` statements of a text: whether each is `pub`, and its paths.
type Uses = Vec<(bool, Vec<Segments>)>;

fn use_statements(text: &str) -> (Uses, String) {
    let mut out = Vec::new();
    let mut blank = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(k) = rest.find("use ") {
        let before = &rest[..k];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let head = before[line_start..].trim();
        let ok_head = head.is_empty() || head.starts_with("pub");
        let boundary = k == 0 || !is_ident(rest[..k].chars().next_back().unwrap());
        let after = &rest[k + 4..];
        if ok_head && boundary {
            if let Some(end) = after.find(';') {
                let mut paths = Vec::new();
                let tree: String = after[..end]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                expand_use(
                    &tree.replace(":: ", "::").replace(" ::", "::"),
                    &[],
                    &mut paths,
                );
                out.push((head.starts_with("pub"), paths));
                blank.push_str(&rest[..k]);
                let stmt = &rest[k..k + 4 + end];
                blank.extend(stmt.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
                rest = &after[end..];
                continue;
            }
        }
        blank.push_str(&rest[..k + 4]);
        rest = after;
    }
    blank.push_str(rest);
    (out, blank)
}

/// Paths written in code: `crate::a::B`, `super::a::B`, `self::a::B`.
fn inline_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let at_boundary = i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':');
        if at_boundary && is_ident(chars[i]) {
            let mut segs = Vec::new();
            let mut j = i;
            loop {
                let s = j;
                while j < chars.len() && is_ident(chars[j]) {
                    j += 1;
                }
                segs.push(chars[s..j].iter().collect::<String>());
                if j + 2 < chars.len()
                    && chars[j] == ':'
                    && chars[j + 1] == ':'
                    && is_ident(chars[j + 2])
                {
                    j += 2;
                } else {
                    break;
                }
            }
            if segs.len() > 1 && matches!(segs[0].as_str(), "crate" | "super" | "self") {
                out.push(segs);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

struct Crate {
    files: Vec<File>,
    by_module: BTreeMap<Vec<String>, usize>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        let mut files = Vec::new();
        let mut by_module = BTreeMap::new();
        for p in paths {
            let rel = p.strip_prefix(src).unwrap();
            let raw = std::fs::read_to_string(&p).unwrap();
            let text = strip_test_modules(&strip(&raw));
            let module = module_of(rel);
            let defines = definitions(&text);
            let mut children = BTreeSet::new();
            for line in text.lines() {
                let t = line.trim();
                if let Some(pos) = t.find("mod ") {
                    let r = &t[pos + 4..];
                    if r.ends_with(';') && !t[..pos].contains('=') {
                        children.insert(r.trim_end_matches(';').trim().to_string());
                    }
                }
            }
            by_module.insert(module.clone(), files.len());
            files.push(File {
                path: format!("src/{}", rel.display()),
                module,
                text,
                defines,
                reexports: BTreeMap::new(),
                children,
            });
        }
        let mut c = Crate { files, by_module };
        for i in 0..c.files.len() {
            let mut re = BTreeMap::new();
            for (is_pub, paths) in uses(&c.files[i].text) {
                if !is_pub {
                    continue;
                }
                for p in paths {
                    let abs = c.absolute(i, &p);
                    if let Some(last) = p.last() {
                        if last != "*" && last != "self" {
                            re.insert(last.clone(), abs);
                        }
                    }
                }
            }
            c.files[i].reexports = re;
        }
        c
    }

    /// A path as written in file `i`, made absolute from the crate root.
    fn absolute(&self, i: usize, p: &[String]) -> Vec<String> {
        let f = &self.files[i];
        // The module whose children `super` and `self` are relative to.
        let mut base = f.module.clone();
        let mut rest = p;
        match p.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &p[1..];
            }
            Some("self") => rest = &p[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            // A `use` of an external crate, or of a child module by its
            // bare name (2018 paths: only where the file declares it).
            Some(first) if f.children.contains(first) => {}
            _ => return Vec::new(),
        }
        base.extend(rest.iter().cloned());
        base
    }

    /// The file that defines the item an absolute path names, if any.
    fn resolve(&self, abs: &[String], depth: usize) -> Option<(usize, String)> {
        if depth > 8 || abs.is_empty() {
            return None;
        }
        // The longest prefix that is a file's module.
        for k in (0..abs.len()).rev() {
            if let Some(&i) = self.by_module.get(&abs[..k]) {
                let name = &abs[k];
                let f = &self.files[i];
                if let Some(target) = f.reexports.get(name) {
                    if !target.is_empty() && target.as_slice() != abs {
                        if let Some(r) = self.resolve(target, depth + 1) {
                            return Some(r);
                        }
                    }
                }
                if f.defines.contains(name) {
                    return Some((i, name.clone()));
                }
                return None;
            }
        }
        None
    }

    /// Arrows: importing file -> imported file -> names.
    fn imports(&self) -> BTreeMap<usize, BTreeMap<usize, BTreeSet<String>>> {
        let mut g: BTreeMap<usize, BTreeMap<usize, BTreeSet<String>>> = BTreeMap::new();
        for i in 0..self.files.len() {
            let mut paths: Vec<Vec<String>> = Vec::new();
            // A `pub use` hands a name on; it does not use it.
            for (is_pub, ps) in uses(&self.files[i].text) {
                if !is_pub {
                    paths.extend(ps);
                }
            }
            paths.extend(inline_paths(&without_uses(&self.files[i].text)));
            for p in paths {
                let abs = self.absolute(i, &p);
                // Try the whole path, then shorter ones (a path may go on
                // past its item: `Type::method`, `Enum::Variant`).
                for k in (1..=abs.len()).rev() {
                    if let Some((j, name)) = self.resolve(&abs[..k], 0) {
                        if j != i && !self.is_front_of(i, j) {
                            g.entry(i).or_default().entry(j).or_default().insert(name);
                        }
                        break;
                    }
                }
            }
        }
        g
    }

    /// Whether file `i` is the front (`mod.rs`, `lib.rs`) of a folder that
    /// holds file `j`. A front declares its children and may name them (a
    /// trait's combinator naming its adapter, a table naming its entries);
    /// that is not counted as an arrow. A child naming its front's items is.
    fn is_front_of(&self, i: usize, j: usize) -> bool {
        let (fi, fj) = (&self.files[i], &self.files[j]);
        (fi.path.ends_with("/mod.rs") || fi.path == "src/lib.rs")
            && fj.module.len() > fi.module.len()
            && fj.module.starts_with(&fi.module)
    }
}

/// Tarjan's strongly connected components.
fn components(
    n: usize,
    edges: &BTreeMap<usize, BTreeMap<usize, BTreeSet<String>>>,
) -> Vec<Vec<usize>> {
    struct T<'a> {
        edges: &'a BTreeMap<usize, BTreeMap<usize, BTreeSet<String>>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        let succ: Vec<usize> = t
            .edges
            .get(&v)
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        for w in succ {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut c = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on[w] = false;
                c.push(w);
                if w == v {
                    break;
                }
            }
            t.out.push(c);
        }
    }
    let mut t = T {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out
}

fn report(c: &Crate) -> (String, usize) {
    let g = c.imports();
    let mut text = String::new();
    let mut circles = 0;
    for comp in components(c.files.len(), &g) {
        if comp.len() < 2 {
            continue;
        }
        circles += 1;
        let set: BTreeSet<usize> = comp.iter().copied().collect();
        let mut names: Vec<&str> = comp.iter().map(|&i| c.files[i].path.as_str()).collect();
        names.sort();
        text.push_str(&format!(
            "circle of {} files: {}\n",
            comp.len(),
            names.join(", ")
        ));
        for &i in &set {
            for (j, n) in g.get(&i).into_iter().flatten() {
                if set.contains(j) {
                    let n: Vec<&str> = n.iter().map(String::as_str).collect();
                    text.push_str(&format!(
                        "  {} -> {}: {}\n",
                        c.files[i].path,
                        c.files[*j].path,
                        n.join(", ")
                    ));
                }
            }
        }
    }
    (text, circles)
}

#[test]
fn src_has_no_import_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let c = Crate::read(&src);
    let (text, circles) = report(&c);
    assert_eq!(circles, 0, "import circles in src/:\n{text}");
}

/// The checker itself finds a circle that is there, follows re-exports and
/// ignores comments and test modules.
#[test]
fn the_checker_sees_circles() {
    let dir = std::env::temp_dir().join(format!("optic-ad-arch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(
        dir.join("lib.rs"),
        "mod a;\nmod b;\nmod c;\npub use a::x::Thing;\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("a/mod.rs"),
        "pub(crate) mod x;\npub use x::Thing;\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("a/x.rs"),
        "use crate::b::{Other, helper as h};\npub struct Thing(Other);\n",
    )
    .unwrap();
    // b names Thing through two re-exports; c is named only in a comment
    // and a test module.
    std::fs::write(
        dir.join("b.rs"),
        "pub struct Other;\npub fn helper() -> Option<crate::Thing> { None }\n// crate::c::Far\n#[cfg(test)]\nmod tests { use crate::c::Far; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("c.rs"),
        "pub struct Far;\nfn f() -> crate::b::Other { crate::b::Other }\n",
    )
    .unwrap();
    let c = Crate::read(&dir);
    let (text, circles) = report(&c);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(circles, 1, "{text}");
    assert!(
        text.contains("src/a/x.rs -> src/b.rs: Other, helper"),
        "{text}"
    );
    assert!(text.contains("src/b.rs -> src/a/x.rs: Thing"), "{text}");
    assert!(!text.contains("c.rs"), "{text}");
}

//! Shell blocks of the docs that tests run as written.
//!
//! A block is marked by an HTML comment line naming it,
//! `<!-- run by the install test: NAME -->`, followed by a ```sh fence. Its
//! leading lines that only assign variables (`REGISTRY=… VERSION=0.2.0`,
//! a `#` comment allowed after them) are the reader's to fill in; the test
//! replaces them with its own values, names checked, and runs the rest
//! unchanged.

/// The marker comment of a block named `name`.
pub fn marker(name: &str) -> String {
    format!("<!-- run by the install test: {name} -->")
}

/// A marked shell block: the variables its first lines set, and the rest.
#[derive(Debug, PartialEq)]
pub struct DocScript {
    /// `NAME=value` of the leading assignment lines, in order, as written.
    pub vars: Vec<(String, String)>,
    /// The lines after them, unchanged.
    pub body: String,
}

/// The block named `name` in the Markdown `md`.
pub fn marked_block(md: &str, name: &str) -> Result<DocScript, String> {
    let mark = marker(name);
    let mut lines = md
        .lines()
        .skip_while(|l| l.trim() != mark)
        .skip(1)
        .skip_while(|l| l.trim().is_empty());
    if lines.next().map(str::trim) != Some("```sh") {
        return Err(format!("no ```sh block right after `{mark}`"));
    }
    let mut vars = Vec::new();
    let mut body = String::new();
    let mut closed = false;
    for line in lines.by_ref() {
        if line.trim_start().starts_with("```") {
            closed = true;
            break;
        }
        match assignments(line) {
            Some(found) if body.is_empty() => vars.extend(found),
            _ => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    if !closed {
        return Err(format!("the block after `{mark}` is not closed"));
    }
    if vars.is_empty() || body.trim().is_empty() {
        return Err(format!(
            "the block after `{mark}` needs leading `NAME=value` lines and commands after them"
        ));
    }
    Ok(DocScript { vars, body })
}

/// The `NAME=value` words of a line made only of them (and a comment).
fn assignments(line: &str) -> Option<Vec<(String, String)>> {
    let code = line.split(" #").next().unwrap_or(line).trim();
    if code.is_empty() || code.starts_with('#') {
        return None;
    }
    code.split_whitespace()
        .map(|w| {
            let (k, v) = w.split_once('=')?;
            let name = !k.is_empty()
                && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                && !v.contains(['$', '`', '"', '\'']);
            name.then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

impl DocScript {
    /// The value the doc gives `name`.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The script to run: `values` (exactly the names the doc sets, else an
    /// error naming both) single-quoted, then the body as written.
    pub fn with_values(&self, values: &[(&str, String)]) -> Result<String, String> {
        let mut doc: Vec<&str> = self.vars.iter().map(|(k, _)| k.as_str()).collect();
        let mut given: Vec<&str> = values.iter().map(|(k, _)| *k).collect();
        doc.sort_unstable();
        given.sort_unstable();
        if doc != given {
            return Err(format!(
                "the doc's block sets {doc:?}, the test gives {given:?}"
            ));
        }
        let mut out = String::new();
        for (k, v) in values {
            out += &format!("{k}='{}'\n", v.replace('\'', r"'\''"));
        }
        Ok(out + &self.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MD: &str = "\
# Title

```sh
not this one
```

<!-- run by the install test: demo -->

```sh
REGISTRY=registry.example.com/x VERSION=1.2.3
DIGEST=sha256:… # from the notes
helm show crds oci://$REGISTRY/c --version $VERSION
A=b helm x
```
";

    #[test]
    fn the_marked_block_splits_into_variables_and_commands() {
        let s = marked_block(MD, "demo").expect("the block");
        assert_eq!(
            s.vars,
            [
                ("REGISTRY".to_string(), "registry.example.com/x".to_string()),
                ("VERSION".to_string(), "1.2.3".to_string()),
                ("DIGEST".to_string(), "sha256:…".to_string()),
            ]
        );
        assert_eq!(
            s.body,
            "helm show crds oci://$REGISTRY/c --version $VERSION\nA=b helm x\n"
        );
        assert_eq!(s.var("VERSION"), Some("1.2.3"));
        let run = s
            .with_values(&[
                ("VERSION", "9.9.9".into()),
                ("REGISTRY", "127.0.0.1:5000/it's".into()),
                ("DIGEST", "sha256:ab".into()),
            ])
            .expect("same names");
        assert_eq!(
            run,
            "VERSION='9.9.9'\nREGISTRY='127.0.0.1:5000/it'\\''s'\nDIGEST='sha256:ab'\n\
             helm show crds oci://$REGISTRY/c --version $VERSION\nA=b helm x\n"
        );
    }

    #[test]
    fn other_names_or_a_missing_block_are_errors() {
        let s = marked_block(MD, "demo").expect("the block");
        let e = s
            .with_values(&[("VERSION", "1".into()), ("REGISTRY", "r".into())])
            .expect_err("DIGEST missing");
        assert!(e.contains("DIGEST"), "{e}");
        assert!(marked_block(MD, "other").is_err());
        let unclosed = "<!-- run by the install test: u -->\n```sh\nA=1\nhelm x\n";
        assert!(marked_block(unclosed, "u").is_err());
        let no_vars = "<!-- run by the install test: v -->\n```sh\nhelm x\n```\n";
        assert!(marked_block(no_vars, "v").is_err());
        let prose = "<!-- run by the install test: p -->\nSome text.\n```sh\nA=1\nx\n```\n";
        assert!(marked_block(prose, "p").is_err());
    }
}

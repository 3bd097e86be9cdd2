//! Taking one file out of an image without running a container: the image's
//! layers (tar, or gzip-compressed tar) are read from the top one down, as
//! an overlay filesystem would show them, following the OCI whiteout rules
//! (`.wh.<name>` deletes a path of lower layers, `.wh..wh..opq` hides a
//! directory's lower contents) and symbolic or hard links. Pure over
//! readers; the caller supplies the layers.

use flate2::read::GzDecoder;
use std::io::{BufRead, BufReader, Read, Write};
use tar::EntryType;

/// Most links followed before giving up (a loop, or a very long chain).
const MAX_LINKS: usize = 8;

/// Why a file could not be taken out of an image.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// No layer holds the file.
    #[error("{0} is not in the image")]
    NotFound(String),
    /// A layer deletes the file (whiteout).
    #[error("{0} is deleted in the image (whiteout)")]
    Deleted(String),
    /// The path names something that is not a regular file.
    #[error("{0} is not a regular file in the image")]
    NotAFile(String),
    /// Links lead too far.
    #[error("{0}: too many links")]
    TooManyLinks(String),
    /// A layer uses a compression this daemon does not read.
    #[error(
        "a layer is compressed with {0}, which is not supported (use gzip or uncompressed layers)"
    )]
    Unsupported(&'static str),
    /// Reading a layer (or writing the file) failed.
    #[error("{0}")]
    Io(String),
}

fn io(e: std::io::Error) -> ExtractError {
    ExtractError::Io(e.to_string())
}

/// A path inside the image in canonical form: relative to the root, no `.`,
/// `..` resolved (never above the root), no empty components.
pub fn normalize(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out.join("/")
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map(|(p, _)| p).unwrap_or("")
}

/// Whether `path` is `dir` or lies below it (`dir` empty: the root).
fn under(path: &str, dir: &str) -> bool {
    dir.is_empty() || path == dir || path.starts_with(&format!("{dir}/"))
}

/// What one layer says about a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayerHit {
    /// The file is in this layer; its bytes were written out.
    File,
    /// A symbolic link to this path (canonical, resolved from its directory).
    Symlink(String),
    /// A hard link to this path (canonical).
    Hardlink(String),
    /// This layer deletes the path or a directory above it.
    Deleted,
    /// Not in this layer, and a directory above it is opaque here: lower
    /// layers do not show it.
    Hidden,
    /// Not in this layer.
    Absent,
}

/// A layer's tar stream: gzip is recognised by its magic bytes (media types
/// are not trusted), zstd is refused, anything else is read as plain tar.
pub fn decompressed<'a, R: Read + 'a>(layer: R) -> Result<Box<dyn Read + 'a>, ExtractError> {
    let mut buf = BufReader::new(layer);
    let head = buf.fill_buf().map_err(io)?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(GzDecoder::new(buf)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Err(ExtractError::Unsupported("zstd"))
    } else {
        Ok(Box::new(buf))
    }
}

/// Looks for `path` (canonical) in one layer; when it is a regular file
/// here, copies its bytes to `out`.
pub fn scan_layer<R: Read>(
    layer: R,
    path: &str,
    out: &mut dyn Write,
) -> Result<LayerHit, ExtractError> {
    let mut archive = tar::Archive::new(decompressed(layer)?);
    let mut deleted = false;
    let mut opaque = false;
    for entry in archive.entries().map_err(io)? {
        let mut entry = entry.map_err(io)?;
        let name = normalize(&String::from_utf8_lossy(&entry.path_bytes()));
        let base = name.rsplit('/').next().unwrap_or_default();
        if base == ".wh..wh..opq" {
            if under(path, parent(&name)) && path != parent(&name) {
                opaque = true;
            }
            continue;
        }
        if let Some(gone) = base.strip_prefix(".wh.") {
            let dir = parent(&name);
            let gone = if dir.is_empty() {
                gone.to_string()
            } else {
                format!("{dir}/{gone}")
            };
            if under(path, &gone) {
                // Whiteouts hide lower layers only: a file of this same
                // layer still counts.
                deleted = true;
            }
            continue;
        }
        if name != path {
            continue;
        }
        let kind = entry.header().entry_type();
        let link = || {
            entry
                .link_name_bytes()
                .map(|l| String::from_utf8_lossy(&l).into_owned())
                .unwrap_or_default()
        };
        return match kind {
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                std::io::copy(&mut entry, out).map_err(io)?;
                Ok(LayerHit::File)
            }
            EntryType::Symlink => {
                let target = link();
                let resolved = if target.starts_with('/') {
                    normalize(&target)
                } else {
                    normalize(&format!("{}/{target}", parent(path)))
                };
                Ok(LayerHit::Symlink(resolved))
            }
            EntryType::Link => Ok(LayerHit::Hardlink(normalize(&link()))),
            _ => Err(ExtractError::NotAFile(path.to_string())),
        };
    }
    Ok(if deleted {
        LayerHit::Deleted
    } else if opaque {
        LayerHit::Hidden
    } else {
        LayerHit::Absent
    })
}

/// Finds `path` in an image of `layers` layers (0 is the bottom one) and
/// copies the file to `out`, following links. `open(i)` gives layer `i`'s
/// blob; layers are read from the top down, each at most once per path.
pub fn find<F>(
    layers: usize,
    mut open: F,
    path: &str,
    out: &mut dyn Write,
) -> Result<(), ExtractError>
where
    F: FnMut(usize) -> Result<Box<dyn Read>, ExtractError>,
{
    let mut want = normalize(path);
    let asked = want.clone();
    for _ in 0..=MAX_LINKS {
        let mut next = None;
        for i in (0..layers).rev() {
            match scan_layer(open(i)?, &want, out)? {
                LayerHit::File => return Ok(()),
                LayerHit::Symlink(p) | LayerHit::Hardlink(p) => {
                    next = Some(p);
                    break;
                }
                LayerHit::Deleted => return Err(ExtractError::Deleted(asked)),
                LayerHit::Hidden => return Err(ExtractError::NotFound(asked)),
                LayerHit::Absent => {}
            }
        }
        match next {
            Some(p) => want = p,
            None => return Err(ExtractError::NotFound(asked)),
        }
    }
    Err(ExtractError::TooManyLinks(asked))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;

    enum Item<'a> {
        File(&'a str, &'a [u8]),
        Dir(&'a str),
        Symlink(&'a str, &'a str),
        Hardlink(&'a str, &'a str),
    }

    fn tar_of(items: &[Item]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for item in items {
            let mut h = tar::Header::new_gnu();
            match item {
                Item::File(p, data) => {
                    h.set_entry_type(EntryType::Regular);
                    h.set_size(data.len() as u64);
                    h.set_mode(0o755);
                    b.append_data(&mut h, p, *data).expect("append");
                }
                Item::Dir(p) => {
                    h.set_entry_type(EntryType::Directory);
                    h.set_size(0);
                    h.set_mode(0o755);
                    b.append_data(&mut h, p, std::io::empty()).expect("append");
                }
                Item::Symlink(p, t) => {
                    h.set_entry_type(EntryType::Symlink);
                    h.set_size(0);
                    b.append_link(&mut h, p, t).expect("append");
                }
                Item::Hardlink(p, t) => {
                    h.set_entry_type(EntryType::Link);
                    h.set_size(0);
                    b.append_link(&mut h, p, t).expect("append");
                }
            }
        }
        b.into_inner().expect("tar")
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(data).expect("gzip");
        e.finish().expect("gzip")
    }

    fn extract(layers: &[Vec<u8>], path: &str) -> Result<Vec<u8>, ExtractError> {
        let mut out = Vec::new();
        let layers: Vec<Vec<u8>> = layers.to_vec();
        find(
            layers.len(),
            |i| Ok(Box::new(std::io::Cursor::new(layers[i].clone())) as Box<dyn Read>),
            path,
            &mut out,
        )?;
        Ok(out)
    }

    #[test]
    fn normalizes_paths() {
        for (p, want) in [
            ("usr/local/bin/keadm", "usr/local/bin/keadm"),
            ("/usr/local/bin/keadm", "usr/local/bin/keadm"),
            ("./usr//local/./bin/keadm", "usr/local/bin/keadm"),
            ("usr/local/../bin/keadm", "usr/bin/keadm"),
            ("../../etc/passwd", "etc/passwd"),
            ("usr/local/bin/", "usr/local/bin"),
        ] {
            assert_eq!(normalize(p), want, "{p}");
        }
    }

    #[test]
    fn finds_files_through_layers_whiteouts_and_links() {
        let tool = "usr/local/bin/keadm";
        let base = tar_of(&[
            Item::Dir("usr/"),
            Item::Dir("usr/local/"),
            Item::Dir("usr/local/bin/"),
            Item::File("usr/local/bin/keadm", b"old"),
            Item::File("opt/keadm-real", b"real"),
        ]);
        let cases: Vec<(&str, Vec<Vec<u8>>, Result<&[u8], &str>)> = vec![
            ("plain tar", vec![base.clone()], Ok(b"old")),
            ("gzip layer", vec![gz(&base)], Ok(b"old")),
            (
                "an upper layer replaces it",
                vec![
                    gz(&base),
                    gz(&tar_of(&[Item::File("./usr/local/bin/keadm", b"new")])),
                ],
                Ok(b"new"),
            ),
            (
                "an unrelated upper layer",
                vec![gz(&base), tar_of(&[Item::File("etc/other", b"x")])],
                Ok(b"old"),
            ),
            (
                "whiteout of the file",
                vec![
                    base.clone(),
                    tar_of(&[Item::File("usr/local/bin/.wh.keadm", b"")]),
                ],
                Err("deleted"),
            ),
            (
                "whiteout of a parent directory",
                vec![base.clone(), tar_of(&[Item::File("usr/.wh.local", b"")])],
                Err("deleted"),
            ),
            (
                "a whiteout does not hide its own layer's file",
                vec![
                    base.clone(),
                    tar_of(&[
                        Item::File("usr/local/bin/.wh.keadm", b""),
                        Item::File("usr/local/bin/keadm", b"same layer"),
                    ]),
                ],
                Ok(b"same layer"),
            ),
            (
                "opaque parent hides lower layers",
                vec![
                    base.clone(),
                    tar_of(&[Item::File("usr/local/.wh..wh..opq", b"")]),
                ],
                Err("not in the image"),
            ),
            (
                "opaque parent with the file in the same layer",
                vec![
                    base.clone(),
                    tar_of(&[
                        Item::File("usr/local/.wh..wh..opq", b""),
                        Item::File("usr/local/bin/keadm", b"fresh"),
                    ]),
                ],
                Ok(b"fresh"),
            ),
            (
                "relative symlink",
                vec![
                    base.clone(),
                    tar_of(&[Item::Symlink(tool, "../../../opt/keadm-real")]),
                ],
                Ok(b"real"),
            ),
            (
                "absolute symlink",
                vec![
                    base.clone(),
                    tar_of(&[Item::Symlink(tool, "/opt/keadm-real")]),
                ],
                Ok(b"real"),
            ),
            (
                "hard link",
                vec![
                    base.clone(),
                    tar_of(&[Item::Hardlink(tool, "opt/keadm-real")]),
                ],
                Ok(b"real"),
            ),
            (
                "symlink loop",
                vec![tar_of(&[
                    Item::Symlink(tool, "/a"),
                    Item::Symlink("a", "/usr/local/bin/keadm"),
                ])],
                Err("too many links"),
            ),
            (
                "missing",
                vec![tar_of(&[Item::File("etc/hosts", b"")])],
                Err("not in the image"),
            ),
            (
                "a directory",
                vec![tar_of(&[Item::Dir("usr/local/bin/keadm/")])],
                Err("not a regular file"),
            ),
            ("no layers", vec![], Err("not in the image")),
            (
                "zstd",
                vec![vec![0x28, 0xb5, 0x2f, 0xfd, 0, 0]],
                Err("zstd"),
            ),
        ];
        for (name, layers, want) in cases {
            match (extract(&layers, "/usr/local/bin/keadm"), want) {
                (Ok(got), Ok(w)) => assert_eq!(got, w, "{name}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn large_files_stream() {
        let big = vec![7u8; 3 * 1024 * 1024 + 5];
        let layer = gz(&tar_of(&[Item::File("bin/tool", &big)]));
        let got = extract(&[layer], "bin/tool").expect("found");
        assert_eq!(got.len(), big.len());
    }
}

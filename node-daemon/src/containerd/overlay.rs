//! Finding one file in an image's unpacked snapshot without mounting it.
//! A read-only view of the snapshot is a list of directories, top first
//! (overlayfs' `lowerdir`, or one bind-mounted directory), which are looked
//! up as overlayfs merges them: a whiteout (a 0/0 character device, or an
//! aufs-style `.wh.<name>` beside the name) deletes a name of the
//! directories below, an opaque directory (`overlay.opaque` = `y`, or a
//! `.wh..wh..opq` entry in it) hides their contents, a directory merges
//! with the directories of the same path below, anything else hides them.
//! Symbolic links are resolved inside the image, never on the host.

use crate::upgrade::extract::{ExtractError, normalize};
use containerd_client::types::Mount;
use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Most links followed before giving up (a loop, or a very long chain).
const MAX_LINKS: usize = 8;
/// Label prefix on an image's config blob: `<prefix><snapshotter>` = its snapshot's chain ID.
pub const SNAPSHOT_LABEL: &str = "containerd.io/gc.ref.snapshot.";
/// The directory name containerd gives a snapshotter under its root.
const SNAPSHOTTER_DIR: &str = "io.containerd.snapshotter.v1.";
/// aufs' marker of an opaque directory (OCI layers use the same name).
const OPAQUE_MARKER: &str = ".wh..wh..opq";
/// aufs' prefix of a whiteout beside the deleted name.
const WHITEOUT_PREFIX: &str = ".wh.";

/// What one directory of a view holds at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Nothing of that name.
    Missing,
    /// A whiteout: the name is deleted in the directories below.
    Whiteout,
    /// A directory; an opaque one hides the directories below.
    Dir {
        /// Hides the same directory of the directories below.
        opaque: bool,
    },
    /// A regular file.
    File,
    /// A symbolic link with this target.
    Symlink(String),
    /// A device, fifo or socket.
    Other,
}

/// Why a file could not be read from a snapshot's directories.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The image does not hold the file (missing, deleted, not a file).
    #[error(transparent)]
    Image(#[from] ExtractError),
    /// A host directory of the view could not be read.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The host path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// The directories of a view, read by [`find`].
pub trait Layers {
    /// How many directories there are; 0 is the top one.
    fn count(&self) -> usize;
    /// What directory `layer` holds at `path` (components; empty: its root).
    fn probe(&self, layer: usize, path: &[String]) -> Result<Entry, LookupError>;
}

/// Where a file was found: directory `layer`, at `path` (components).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The directory holding it; 0 is the top one.
    pub layer: usize,
    /// Its components, links resolved.
    pub path: Vec<String>,
}

/// What one name is in the merged view.
enum Merged {
    /// A directory, made of these directories (top first).
    Dir(Vec<usize>),
    /// Something else, shown from this directory.
    Leaf(usize, Entry),
    /// Not there; `deleted` when a whiteout hides it.
    Missing { deleted: bool },
}

/// Merges `path` over `merged_from` (its parent's directories, top first) as overlayfs does.
fn merge<L: Layers + ?Sized>(
    layers: &L,
    merged_from: &[usize],
    path: &[String],
) -> Result<Merged, LookupError> {
    let mut dirs = Vec::new();
    for &l in merged_from {
        match layers.probe(l, path)? {
            Entry::Missing => {}
            Entry::Whiteout if dirs.is_empty() => return Ok(Merged::Missing { deleted: true }),
            Entry::Dir { opaque } => {
                dirs.push(l);
                if opaque {
                    break;
                }
            }
            leaf if dirs.is_empty() => return Ok(Merged::Leaf(l, leaf)),
            // Below a directory, anything but a directory ends the merge.
            _ => break,
        }
    }
    Ok(if dirs.is_empty() {
        Merged::Missing { deleted: false }
    } else {
        Merged::Dir(dirs)
    })
}

/// A path's components without empty ones and `.` (`..` is resolved while walking).
fn components(path: &str) -> impl Iterator<Item = String> + '_ {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
}

/// Finds the regular file at `path` in the merged view, resolving links inside the image.
pub fn find<L: Layers + ?Sized>(layers: &L, path: &str) -> Result<Found, LookupError> {
    let asked = normalize(path);
    let all: Vec<usize> = (0..layers.count()).collect();
    let root = match merge(layers, &all, &[])? {
        Merged::Dir(dirs) => dirs,
        _ => return Err(ExtractError::NotFound(asked).into()),
    };
    let mut queue: VecDeque<String> = components(path).collect();
    // The directories walked so far, each with the directories it merges.
    let mut walked: Vec<(String, Vec<usize>)> = Vec::new();
    let mut links = 0;
    while let Some(name) = queue.pop_front() {
        if name == ".." {
            walked.pop();
            continue;
        }
        let parent = walked.last().map_or(root.as_slice(), |(_, d)| d.as_slice());
        let mut here: Vec<String> = walked.iter().map(|(n, _)| n.clone()).collect();
        here.push(name.clone());
        let last = queue.is_empty();
        match merge(layers, parent, &here)? {
            Merged::Dir(_) if last => return Err(ExtractError::NotAFile(asked).into()),
            Merged::Dir(dirs) => walked.push((name, dirs)),
            Merged::Leaf(_, Entry::Symlink(target)) => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(ExtractError::TooManyLinks(asked).into());
                }
                if target.starts_with('/') {
                    walked.clear();
                }
                for c in components(&target).collect::<Vec<_>>().into_iter().rev() {
                    queue.push_front(c);
                }
            }
            Merged::Leaf(layer, Entry::File) if last => return Ok(Found { layer, path: here }),
            Merged::Leaf(_, _) if last => return Err(ExtractError::NotAFile(asked).into()),
            // A file where a directory is needed.
            Merged::Leaf(_, _) => return Err(ExtractError::NotFound(asked).into()),
            Merged::Missing { deleted: true } => return Err(ExtractError::Deleted(asked).into()),
            Merged::Missing { deleted: false } => {
                return Err(ExtractError::NotFound(asked).into());
            }
        }
    }
    // The path named the root.
    Err(ExtractError::NotAFile(asked).into())
}

/// Which extended attribute marks an opaque directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpaqueXattr {
    /// `trusted.overlay.opaque` (readable with CAP_SYS_ADMIN only).
    Trusted,
    /// `user.overlay.opaque` (the `userxattr` mount option, rootless).
    User,
}

impl OpaqueXattr {
    fn name(self) -> &'static str {
        match self {
            OpaqueXattr::Trusted => "trusted.overlay.opaque",
            OpaqueXattr::User => "user.overlay.opaque",
        }
    }
}

/// A view's directories on this host's filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLayers {
    /// The directories, top first.
    pub dirs: Vec<PathBuf>,
    /// How opaque directories are marked.
    pub xattr: OpaqueXattr,
}

impl HostLayers {
    /// The host path of `path` (components) in directory `layer`.
    pub fn host_path(&self, layer: usize, path: &[String]) -> PathBuf {
        let mut p = self.dirs[layer].clone();
        p.extend(path);
        p
    }

    fn exists(path: &Path) -> Result<bool, LookupError> {
        match std::fs::symlink_metadata(path) {
            Ok(_) => Ok(true),
            Err(e) if gone(&e) => Ok(false),
            Err(source) => Err(LookupError::Io {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Whether `dir` hides the same directory of the directories below.
    fn opaque(&self, dir: &Path) -> Result<bool, LookupError> {
        let mut value = [0u8; 8];
        let marked = match rustix::fs::lgetxattr(dir, self.xattr.name(), &mut value[..]) {
            Ok(n) => value.get(..n) == Some(b"y".as_slice()),
            // Not set, not supported here, or longer than "y".
            Err(
                rustix::io::Errno::NODATA | rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::RANGE,
            ) => false,
            Err(e) => {
                return Err(LookupError::Io {
                    path: dir.to_path_buf(),
                    source: e.into(),
                });
            }
        };
        Ok(marked || Self::exists(&dir.join(OPAQUE_MARKER))?)
    }
}

/// Whether an error says the path is absent (or crosses a non-directory).
fn gone(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::NotFound
        || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error())
}

impl Layers for HostLayers {
    fn count(&self) -> usize {
        self.dirs.len()
    }

    fn probe(&self, layer: usize, path: &[String]) -> Result<Entry, LookupError> {
        let p = self.host_path(layer, path);
        // An aufs-style whiteout beside the name hides the directories below
        // (the name in this same directory still counts).
        let whiteout_beside = || match path.split_last() {
            Some((name, dir)) => {
                let mut w = self.host_path(layer, dir);
                w.push(format!("{WHITEOUT_PREFIX}{name}"));
                Self::exists(&w)
            }
            None => Ok(false),
        };
        let meta = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if gone(&e) => {
                return Ok(if whiteout_beside()? {
                    Entry::Whiteout
                } else {
                    Entry::Missing
                });
            }
            Err(source) => return Err(LookupError::Io { path: p, source }),
        };
        let t = meta.file_type();
        Ok(if t.is_char_device() && meta.rdev() == 0 {
            Entry::Whiteout
        } else if t.is_dir() {
            Entry::Dir {
                opaque: self.opaque(&p)? || whiteout_beside()?,
            }
        } else if t.is_symlink() {
            let target = std::fs::read_link(&p).map_err(|source| LookupError::Io {
                path: p.clone(),
                source,
            })?;
            Entry::Symlink(target.to_string_lossy().into_owned())
        } else if t.is_file() {
            Entry::File
        } else {
            Entry::Other
        })
    }
}

/// Why a view's mounts cannot be read as directories.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    /// Not one mount (e.g. erofs images under an overlay).
    #[error("the view has {0} mounts; only one bind or overlay mount can be read without mounting")]
    Count(usize),
    /// A mount of a kind that needs mounting (a block device, a FUSE
    /// filesystem, a mount manager's template).
    #[error("the view is a {0} mount, which cannot be read without mounting it")]
    Kind(String),
    /// An overlay mount without lower directories.
    #[error("the view's overlay mount has no lowerdir")]
    NoLowerdir,
}

/// Splits overlayfs' `lowerdir` value at the `:` that are not escaped.
fn split_lowerdir(value: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => cur.extend(chars.next()),
            ':' => out.push(PathBuf::from(std::mem::take(&mut cur))),
            c => cur.push(c),
        }
    }
    out.push(PathBuf::from(cur));
    out.retain(|p| !p.as_os_str().is_empty());
    out
}

/// A read-only view's directories (top first) from its one bind or overlay mount.
pub fn view_layers(mounts: &[Mount]) -> Result<HostLayers, MountError> {
    let [m] = mounts else {
        return Err(MountError::Count(mounts.len()));
    };
    // Templates ("{{ mount 0 }}") are filled in by a mount manager.
    if m.options.iter().any(|o| o.contains("{{")) || m.source.contains("{{") {
        return Err(MountError::Kind(m.r#type.clone()));
    }
    let options: Vec<&str> = m.options.iter().flat_map(|o| o.split(',')).collect();
    let xattr = if options.contains(&"userxattr") {
        OpaqueXattr::User
    } else {
        OpaqueXattr::Trusted
    };
    match m.r#type.as_str() {
        "bind" | "rbind" => Ok(HostLayers {
            dirs: vec![PathBuf::from(&m.source)],
            xattr,
        }),
        "overlay" => {
            let mut upper = None;
            let mut lower = Vec::new();
            for o in &options {
                if let Some(v) = o.strip_prefix("upperdir=") {
                    upper = Some(PathBuf::from(v));
                } else if let Some(v) = o.strip_prefix("lowerdir+=") {
                    lower.push(PathBuf::from(v));
                } else if let Some(v) = o.strip_prefix("lowerdir=") {
                    lower.extend(split_lowerdir(v));
                }
            }
            if lower.is_empty() {
                return Err(MountError::NoLowerdir);
            }
            let dirs = upper.into_iter().chain(lower).collect();
            Ok(HostLayers { dirs, xattr })
        }
        other => Err(MountError::Kind(other.to_string())),
    }
}

/// (snapshotter, chain ID) of the snapshots a config's labels name; overlayfs first (no copy).
pub fn snapshot_refs(labels: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut refs: Vec<(String, String)> = labels
        .iter()
        .filter_map(|(k, v)| {
            let snapshotter = k.strip_prefix(SNAPSHOT_LABEL)?;
            (!snapshotter.is_empty() && !v.is_empty()).then(|| (snapshotter.to_string(), v.clone()))
        })
        .collect();
    refs.sort_by(|a, b| (a.0 != "overlayfs", &a.0).cmp(&(b.0 != "overlayfs", &b.0)));
    refs
}

/// containerd's root above a snapshot directory, to name it in messages.
pub fn containerd_root(dir: &Path) -> Option<PathBuf> {
    let mut root = PathBuf::new();
    for c in dir.components() {
        if c.as_os_str().to_string_lossy().starts_with(SNAPSHOTTER_DIR) {
            return Some(root);
        }
        root.push(c);
    }
    None
}

/// Whether `/proc/self/status` shows capability `bit` as effective (None: cannot tell).
pub fn has_capability(status: &str, bit: u32) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let caps = u64::from_str_radix(hex, 16).ok()?;
    Some(bit < 64 && caps & (1 << bit) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view in memory: per directory, path → entry (parents implied).
    struct Fake(Vec<Vec<(&'static str, Entry)>>);

    impl Layers for Fake {
        fn count(&self) -> usize {
            self.0.len()
        }

        fn probe(&self, layer: usize, path: &[String]) -> Result<Entry, LookupError> {
            let p = path.join("/");
            if p.is_empty() {
                let opaque = self.0[layer]
                    .iter()
                    .any(|(q, e)| q.is_empty() && *e == Entry::Dir { opaque: true });
                return Ok(Entry::Dir { opaque });
            }
            let entries = &self.0[layer];
            if let Some((_, e)) = entries.iter().find(|(q, _)| *q == p) {
                return Ok(e.clone());
            }
            // A parent of a listed path is a plain directory.
            if entries.iter().any(|(q, _)| q.starts_with(&format!("{p}/"))) {
                return Ok(Entry::Dir { opaque: false });
            }
            Ok(Entry::Missing)
        }
    }

    /// A fake view's directories, top first.
    type Dirs = Vec<Vec<(&'static str, Entry)>>;
    /// A view's directories and opaque marker, or why not.
    type ViewWant = Result<(Vec<PathBuf>, OpaqueXattr), MountError>;

    const DIR: Entry = Entry::Dir { opaque: false };
    const OPAQUE: Entry = Entry::Dir { opaque: true };

    fn link(t: &str) -> Entry {
        Entry::Symlink(t.into())
    }

    #[test]
    fn looks_up_through_whiteouts_opaque_dirs_and_links() {
        let tool = "usr/local/bin/keadm";
        let base = vec![(tool, Entry::File), ("opt/keadm-real", Entry::File)];
        let ok = |layer: usize, path: &str| -> Result<Found, String> {
            Ok(Found {
                layer,
                path: path.split('/').map(str::to_string).collect(),
            })
        };
        // Directories top first, the bottom one last.
        let cases: Vec<(&str, Dirs, &str, Result<Found, String>)> = vec![
            ("one directory", vec![base.clone()], tool, ok(0, tool)),
            (
                "absolute, untidy path",
                vec![base.clone()],
                "/usr//local/./bin/keadm",
                ok(0, tool),
            ),
            (
                "an upper directory replaces it",
                vec![vec![(tool, Entry::File)], base.clone()],
                tool,
                ok(0, tool),
            ),
            (
                "an unrelated upper directory",
                vec![vec![("etc/other", Entry::File)], base.clone()],
                tool,
                ok(1, tool),
            ),
            (
                "a whiteout of the file",
                vec![vec![(tool, Entry::Whiteout)], base.clone()],
                tool,
                Err("deleted".into()),
            ),
            (
                "a whiteout of a parent",
                vec![vec![("usr/local", Entry::Whiteout)], base.clone()],
                tool,
                Err("deleted".into()),
            ),
            (
                "a file above the whiteout",
                vec![
                    vec![(tool, Entry::File)],
                    vec![(tool, Entry::Whiteout)],
                    base.clone(),
                ],
                tool,
                ok(0, tool),
            ),
            (
                "an opaque parent hides the lower directories",
                vec![
                    vec![("usr/local", OPAQUE), ("usr/local/x", Entry::File)],
                    base.clone(),
                ],
                tool,
                Err("not in the image".into()),
            ),
            (
                "an opaque parent with the file",
                vec![
                    vec![("usr/local", OPAQUE), (tool, Entry::File)],
                    base.clone(),
                ],
                tool,
                ok(0, tool),
            ),
            (
                "an opaque root",
                vec![vec![("", OPAQUE), ("etc/x", Entry::File)], base.clone()],
                tool,
                Err("not in the image".into()),
            ),
            (
                "an opaque directory in the middle merges with those above",
                vec![
                    vec![("usr/local/bin/other", Entry::File)],
                    vec![("usr/local", OPAQUE), (tool, Entry::File)],
                    base.clone(),
                ],
                tool,
                ok(1, tool),
            ),
            (
                "a file above hides a lower directory",
                vec![vec![("usr/local", Entry::File)], base.clone()],
                tool,
                Err("not in the image".into()),
            ),
            (
                "a lower file does not show below an upper directory",
                vec![
                    vec![("usr/local/bin", DIR)],
                    vec![("usr/local", Entry::File)],
                    base.clone(),
                ],
                tool,
                Err("not in the image".into()),
            ),
            (
                "a relative symlink",
                vec![vec![(tool, link("../../../opt/keadm-real"))], base.clone()],
                tool,
                ok(1, "opt/keadm-real"),
            ),
            (
                "an absolute symlink",
                vec![vec![(tool, link("/opt/keadm-real"))], base.clone()],
                tool,
                ok(1, "opt/keadm-real"),
            ),
            (
                "a symlink cannot leave the image",
                vec![
                    vec![(tool, link("../../../../../../opt/keadm-real"))],
                    base.clone(),
                ],
                tool,
                ok(1, "opt/keadm-real"),
            ),
            (
                "a symlinked parent directory (merged /usr)",
                vec![
                    vec![("bin", link("usr/bin"))],
                    vec![("usr/bin/keadm", Entry::File)],
                ],
                "bin/keadm",
                ok(1, "usr/bin/keadm"),
            ),
            (
                "`..` after a symlinked directory goes to the link's target's parent",
                vec![vec![
                    ("a", link("x/y")),
                    ("x/y", DIR),
                    ("x/tool", Entry::File),
                ]],
                "a/../tool",
                ok(0, "x/tool"),
            ),
            (
                "a symlink loop",
                vec![vec![
                    (tool, link("/a")),
                    ("a", link("/usr/local/bin/keadm")),
                ]],
                tool,
                Err("too many links".into()),
            ),
            (
                "a directory",
                vec![vec![(tool, DIR)]],
                tool,
                Err("not a regular file".into()),
            ),
            (
                "a device",
                vec![vec![(tool, Entry::Other)]],
                tool,
                Err("not a regular file".into()),
            ),
            (
                "a file used as a directory",
                vec![vec![("usr/local/bin", Entry::File)]],
                tool,
                Err("not in the image".into()),
            ),
            (
                "missing",
                vec![vec![("etc/hosts", Entry::File)]],
                tool,
                Err("not in the image".into()),
            ),
            (
                "no directories",
                vec![],
                tool,
                Err("not in the image".into()),
            ),
        ];
        for (name, layers, path, want) in cases {
            let got = find(&Fake(layers), path).map_err(|e| e.to_string());
            match (&got, &want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{name}"),
                (Err(g), Err(w)) => assert!(g.contains(w.as_str()), "{name}: {g}"),
                _ => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// A directory removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let p = std::env::temp_dir().join(format!(
                "nodeimage-overlay-{name}-{}-{:?}",
                std::process::id(),
                std::time::SystemTime::now()
            ));
            std::fs::create_dir_all(&p).expect("temp dir");
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn write(dir: &Path, path: &str, text: &str) {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    #[test]
    fn reads_host_directories() {
        let tmp = TempDir::new("host");
        let dirs: Vec<PathBuf> = (0..4).map(|i| tmp.0.join(format!("{i}/fs"))).collect();
        for d in &dirs {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        // Bottom: the wrong tool and an unrelated file.
        write(&dirs[3], "usr/local/bin/keadm", "wrong");
        write(&dirs[3], "opt/a", "a");
        write(&dirs[3], "d/x", "x");
        // An aufs-style whiteout of opt/a, an opaque marker in d.
        write(&dirs[2], "opt/.wh.a", "");
        write(&dirs[2], "d/.wh..wh..opq", "");
        write(&dirs[2], "d/y", "y");
        // The right tool.
        write(&dirs[1], "usr/local/bin/keadm", "right");
        // A symlink to a host path, which must resolve inside the image.
        std::fs::create_dir_all(dirs[0].join("etc")).expect("mkdir");
        std::os::unix::fs::symlink("/usr/local/bin/keadm", dirs[0].join("etc/tool"))
            .expect("symlink");
        let layers = HostLayers {
            dirs: dirs.clone(),
            xattr: OpaqueXattr::User,
        };
        let read = |path: &str| -> Result<String, String> {
            let f = find(&layers, path).map_err(|e| e.to_string())?;
            std::fs::read_to_string(layers.host_path(f.layer, &f.path)).map_err(|e| e.to_string())
        };
        assert_eq!(read("usr/local/bin/keadm"), Ok("right".into()));
        assert_eq!(read("etc/tool"), Ok("right".into()));
        assert!(read("opt/a").is_err_and(|e| e.contains("deleted")));
        assert!(read("d/x").is_err_and(|e| e.contains("not in the image")));
        assert_eq!(read("d/y"), Ok("y".into()));

        // A 0/0 character device (overlayfs' whiteout) needs CAP_MKNOD.
        let dev = dirs[0].join("usr/local/bin/keadm");
        std::fs::create_dir_all(dirs[0].join("usr/local/bin")).expect("mkdir");
        let made = rustix::fs::mknodat(
            rustix::fs::CWD,
            &dev,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        );
        if made.is_ok() {
            assert!(read("usr/local/bin/keadm").is_err_and(|e| e.contains("deleted")));
        } else {
            eprintln!("skipped the character device whiteout: mknod: {made:?}");
        }

        // overlayfs' opaque attribute (user.* works unprivileged where the
        // filesystem takes user attributes).
        let opq = dirs[0].join("opt");
        std::fs::create_dir_all(&opq).expect("mkdir");
        write(&dirs[1], "opt/b", "b");
        assert_eq!(read("opt/b"), Ok("b".into()));
        match rustix::fs::lsetxattr(
            &opq,
            "user.overlay.opaque",
            b"y",
            rustix::fs::XattrFlags::empty(),
        ) {
            Ok(()) => assert!(read("opt/b").is_err_and(|e| e.contains("not in the image"))),
            Err(e) => eprintln!("skipped the opaque attribute: setxattr: {e}"),
        }
    }

    #[test]
    fn reads_view_mounts() {
        let m = |t: &str, source: &str, options: &[&str]| Mount {
            r#type: t.into(),
            source: source.into(),
            target: String::new(),
            options: options.iter().map(|o| o.to_string()).collect(),
        };
        let p = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        let cases: Vec<(&str, Vec<Mount>, ViewWant)> = vec![
            (
                "overlay, containerd 1.6/1.7",
                vec![m(
                    "overlay",
                    "overlay",
                    &["index=off", "lowerdir=/r/s/3/fs:/r/s/2/fs:/r/s/1/fs"],
                )],
                Ok((
                    p(&["/r/s/3/fs", "/r/s/2/fs", "/r/s/1/fs"]),
                    OpaqueXattr::Trusted,
                )),
            ),
            (
                "overlay, containerd 2.x",
                vec![m(
                    "overlay",
                    "overlay",
                    &["lowerdir=/r/s/2/fs:/r/s/1/fs", "index=off"],
                )],
                Ok((p(&["/r/s/2/fs", "/r/s/1/fs"]), OpaqueXattr::Trusted)),
            ),
            (
                "rootless overlay, comma-joined options, escaped colon",
                vec![m("overlay", "overlay", &["userxattr,lowerdir=/a\\:b:/c"])],
                Ok((p(&["/a:b", "/c"]), OpaqueXattr::User)),
            ),
            (
                "lowerdir+ and an upperdir",
                vec![m(
                    "overlay",
                    "overlay",
                    &[
                        "lowerdir+=/l1",
                        "lowerdir+=/l2",
                        "upperdir=/u",
                        "workdir=/w",
                    ],
                )],
                Ok((p(&["/u", "/l1", "/l2"]), OpaqueXattr::Trusted)),
            ),
            (
                "one layer: a bind mount",
                vec![m("bind", "/r/s/1/fs", &["ro", "rbind"])],
                Ok((p(&["/r/s/1/fs"]), OpaqueXattr::Trusted)),
            ),
            (
                "native",
                vec![m("bind", "/r/native/snapshots/4", &["rbind", "ro"])],
                Ok((p(&["/r/native/snapshots/4"]), OpaqueXattr::Trusted)),
            ),
            ("no mounts", vec![], Err(MountError::Count(0))),
            (
                "two mounts",
                vec![
                    m("erofs", "/x", &[]),
                    m("overlay", "overlay", &["lowerdir=/a"]),
                ],
                Err(MountError::Count(2)),
            ),
            (
                "a block device",
                vec![m("ext4", "/dev/mapper/x", &["ro"])],
                Err(MountError::Kind("ext4".into())),
            ),
            (
                "a mount manager's template",
                vec![m("format/overlay", "overlay", &["lowerdir={{ mount 0 }}"])],
                Err(MountError::Kind("format/overlay".into())),
            ),
            (
                "overlay without lowerdir",
                vec![m("overlay", "overlay", &["upperdir=/u"])],
                Err(MountError::NoLowerdir),
            ),
        ];
        for (name, mounts, want) in cases {
            let got = view_layers(&mounts).map(|l| (l.dirs, l.xattr));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn reads_snapshot_labels() {
        let labels = |kv: &[(&str, &str)]| -> HashMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let cases = [
            (
                labels(&[
                    ("containerd.io/distribution.source.127.0.0.1", "test"),
                    ("containerd.io/gc.ref.snapshot.overlayfs", "sha256:c1"),
                ]),
                vec![("overlayfs", "sha256:c1")],
            ),
            (
                labels(&[
                    ("containerd.io/gc.ref.snapshot.native", "sha256:n"),
                    ("containerd.io/gc.ref.snapshot.stargz", "sha256:s"),
                    ("containerd.io/gc.ref.snapshot.overlayfs", "sha256:o"),
                    ("containerd.io/gc.ref.snapshot.", "sha256:empty"),
                    ("containerd.io/gc.ref.snapshot.btrfs", ""),
                ]),
                vec![
                    ("overlayfs", "sha256:o"),
                    ("native", "sha256:n"),
                    ("stargz", "sha256:s"),
                ],
            ),
            (
                labels(&[("containerd.io/gc.ref.content.l.0", "sha256:l")]),
                vec![],
            ),
        ];
        for (l, want) in cases {
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
            assert_eq!(snapshot_refs(&l), want, "{l:?}");
        }
    }

    #[test]
    fn finds_containerds_root_and_capabilities() {
        for (dir, want) in [
            (
                "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/12/fs",
                Some("/var/lib/containerd"),
            ),
            (
                "/var/lib/rancher/k3s/agent/containerd/io.containerd.snapshotter.v1.native/snapshots/3",
                Some("/var/lib/rancher/k3s/agent/containerd"),
            ),
            ("/somewhere/else/fs", None),
        ] {
            assert_eq!(
                containerd_root(Path::new(dir)),
                want.map(PathBuf::from),
                "{dir}"
            );
        }
        let status =
            "Name:\tnodeimage-daemon\nCapInh:\t0000000000000000\nCapEff:\t000001fffeffffff\n";
        assert_eq!(has_capability(status, 21), Some(true));
        assert_eq!(has_capability(status, 24), Some(false));
        assert_eq!(
            has_capability("CapEff:\t0000000000000000\n", 21),
            Some(false)
        );
        assert_eq!(has_capability("Name: x\n", 21), None);
        assert_eq!(has_capability("CapEff:\tzz\n", 21), None);
    }
}

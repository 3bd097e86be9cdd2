use super::*;

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

fn image(id: &str, tags: &[&str], digests: &[String], size: u64) -> ListedImage {
    ListedImage {
        id: id.into(),
        repo_tags: tags.iter().map(|t| t.to_string()).collect(),
        repo_digests: digests.to_vec(),
        size,
        pinned: false,
    }
}

fn container(name: &str, state: &str, image_id: &str) -> Container {
    Container {
        name: name.into(),
        state: state.into(),
        image_id: image_id.into(),
        image: String::new(),
    }
}

/// The node every row starts from.
fn node() -> Snapshot {
    let (a, b, c, d, p) = (
        digest('a'),
        digest('b'),
        digest('c'),
        digest('d'),
        digest('e'),
    );
    let mut pause = image(
        "sha256:pause",
        &["registry.k8s.io/pause:3.10"],
        &[format!("registry.k8s.io/pause@{p}")],
        300,
    );
    pause.pinned = true; // containerd pins its sandbox image
    let mut operator = image("sha256:op", &["reg.io/op:v1"], &[], 10);
    operator.pinned = true;
    let mut pre = image(
        "sha256:pre",
        &["reg.io/pre:v1"],
        &[format!("reg.io/pre@{c}")],
        40,
    );
    pre.pinned = true;
    Snapshot {
        images: vec![
            image(
                "sha256:app",
                &["reg.io/app:v1"],
                &[format!("reg.io/app@{a}")],
                100,
            ),
            image(
                "sha256:lib",
                &["reg.io/lib:v1", "reg.io/lib:latest"],
                &[format!("reg.io/lib@{b}")],
                200,
            ),
            pause,
            operator,
            pre,
            image(
                "sha256:web",
                &["reg.io/web:v1", "reg.io/web:stable"],
                &[],
                50,
            ),
            image("sha256:job", &["reg.io/job:v1"], &[], 60),
            image(
                "sha256:cve",
                &["reg.io/cve:v1", "mirror.io/cve:v1"],
                &[format!("reg.io/cve@{d}"), format!("mirror.io/cve@{d}")],
                70,
            ),
            image("sha256:nginx", &["docker.io/library/nginx:1.25"], &[], 80),
        ],
        containers: vec![
            container("web", "running", "sha256:web"),
            container("migrate", "exited", "sha256:job"),
        ],
        sandbox: Some("registry.k8s.io/pause:3.10".into()),
        wanted: vec![Wanting {
            reference: "reg.io/pre:v1".into(),
            resolved: Some(format!("reg.io/pre@{c}")),
            owners: vec!["ImagePullJob team-a/pre".into()],
        }],
        ours: ["reg.io/pre:v1".to_string()].into(),
    }
}

fn skip(reason: SkipReason, detail: &str) -> Verdict {
    Verdict::Skip {
        reason,
        detail: detail.into(),
    }
}

fn remove(id: &str) -> Verdict {
    Verdict::Remove { id: id.into() }
}

fn in_use(names: &[&str]) -> Verdict {
    Verdict::InUse {
        containers: names.iter().map(|n| n.to_string()).collect(),
    }
}

/// (removal id, our pins taken off, bytes)
type Want = (&'static str, &'static [&'static str], u64);

struct Row {
    case: &'static str,
    images: Vec<String>,
    force: bool,
    block: bool,
    /// Changes the node of this row.
    node: fn(&mut Snapshot),
    verdicts: Vec<Verdict>,
    removals: Vec<Want>,
}

fn row(case: &'static str, images: &[&str], verdicts: Vec<Verdict>, removals: Vec<Want>) -> Row {
    Row {
        case,
        images: images.iter().map(|i| i.to_string()).collect(),
        force: false,
        block: false,
        node: |_| {},
        verdicts,
        removals,
    }
}

fn forced(mut r: Row) -> Row {
    r.force = true;
    r
}

fn blocking(mut r: Row) -> Row {
    r.block = true;
    r
}

fn on(mut r: Row, node: fn(&mut Snapshot)) -> Row {
    r.node = node;
    r
}

#[test]
fn every_rule_in_order() {
    let (a, c, d, p) = (digest('a'), digest('c'), digest('d'), digest('e'));
    let app_d = format!("reg.io/app@{a}");
    let pause_d = format!("registry.k8s.io/pause@{p}");
    let cve_d = format!("reg.io/cve@{d}");
    let other_repo = format!("mirror2.io/app@{a}");
    let pre_latest_wanted: fn(&mut Snapshot) = |s| {
        s.wanted = vec![Wanting {
            reference: "reg.io/pre:latest".into(),
            resolved: Some(format!("reg.io/pre@{}", digest('c'))),
            owners: vec!["ImagePrePullJob /warm".into()],
        }];
    };
    let rows = vec![
        row("a tag, unused and unwanted", &["reg.io/app:v1"], vec![remove("sha256:app")], vec![("sha256:app", &[], 100)]),
        row("a digest covers the tag of its repository", &[&app_d], vec![remove("sha256:app")], vec![("sha256:app", &[], 100)]),
        row("not on the node", &["reg.io/app:v2"], vec![Verdict::NotPresent], vec![]),
        row("the digest, but in another repository", &[&other_repo], vec![Verdict::NotPresent], vec![]),
        row(
            "one of two tags of one image: the other is not touched",
            &["reg.io/lib:v1"],
            vec![skip(SkipReason::OtherNames, "reg.io/lib:latest")],
            vec![],
        ),
        row(
            "both tags listed: one removal for both",
            &["reg.io/lib:v1", "reg.io/lib:latest"],
            vec![remove("sha256:lib"), remove("sha256:lib")],
            vec![("sha256:lib", &[], 200)],
        ),
        row(
            "a mirror's names are other names",
            &[&cve_d],
            vec![skip(SkipReason::OtherNames, &format!("mirror.io/cve:v1, mirror.io/cve@{d}"))],
            vec![],
        ),
        row("the sandbox image by tag", &["registry.k8s.io/pause:3.10"], vec![skip(SkipReason::Sandbox, "sandbox image registry.k8s.io/pause:3.10")], vec![]),
        forced(row("a digest of the sandbox image, even forced", &[&pause_d], vec![skip(SkipReason::Sandbox, "sandbox image registry.k8s.io/pause:3.10")], vec![])),
        on(
            row("the sandbox named by id, in use by a pod: Sandbox first", &[&pause_d], vec![skip(SkipReason::Sandbox, "sandbox image sha256:pause")], vec![]),
            |s| {
                s.sandbox = Some("sha256:pause".into());
                s.containers.push(container("pod-sandbox", "running", "sha256:pause"));
            },
        ),
        forced(row("pinned by an operator, even forced", &["reg.io/op:v1"], vec![skip(SkipReason::PinnedByOther, "image sha256:op")], vec![])),
        forced(row("a tag naming an image used under another tag", &["reg.io/web:stable"], vec![in_use(&["web (running)"])], vec![])),
        row("used by an exited container", &["reg.io/job:v1"], vec![in_use(&["migrate (exited)"])], vec![]),
        on(
            row("a container known by image name only", &["reg.io/app:v1"], vec![in_use(&["old (unknown)"])], vec![]),
            |s| {
                s.containers.push(Container {
                    name: "old".into(),
                    state: "unknown".into(),
                    image_id: String::new(),
                    image: "reg.io/app:v1".into(),
                })
            },
        ),
        on(
            row(
                "many containers: five named, then a count",
                &["reg.io/app:v1"],
                vec![in_use(&["c0 (running)", "c1 (running)", "c2 (running)", "c3 (running)", "c4 (running)", "and 2 more"])],
                vec![],
            ),
            |s| {
                for i in 0..7 {
                    s.containers.push(container(&format!("c{i}"), "running", "sha256:app"));
                }
            },
        ),
        on(
            row("in use and wanted: InUse first", &["reg.io/pre:v1"], vec![in_use(&["pre (running)"])], vec![]),
            |s| s.containers.push(container("pre", "running", "sha256:pre")),
        ),
        row("wanted by a live pull entry", &["reg.io/pre:v1"], vec![skip(SkipReason::WantedByPull, "ImagePullJob team-a/pre")], vec![]),
        forced(row("wanted, forced: our pin goes first", &["reg.io/pre:v1"], vec![remove("sha256:pre")], vec![("sha256:pre", &["reg.io/pre:v1"], 40)])),
        blocking(row("wanted, blocked: the block wins", &[&format!("reg.io/pre@{c}")], vec![remove("sha256:pre")], vec![("sha256:pre", &["reg.io/pre:v1"], 40)])),
        on(
            row("wanted through the digest an entry resolved to", &["reg.io/pre:v1"], vec![skip(SkipReason::WantedByPull, "ImagePrePullJob /warm")], vec![]),
            pre_latest_wanted,
        ),
        on(
            row("wanted by an entry written by hand", &["reg.io/app:v1"], vec![skip(SkipReason::WantedByPull, "an entry written by hand for reg.io/app:v1")], vec![]),
            |s| {
                s.wanted = vec![Wanting {
                    reference: "reg.io/app:v1".into(),
                    resolved: None,
                    owners: vec![],
                }]
            },
        ),
        row("a Docker Hub name as users write it", &["nginx:1.25"], vec![remove("sha256:nginx")], vec![("sha256:nginx", &[], 80)]),
        row(
            "not a reference: the rest still decided",
            &["*", "reg.io/app:v1"],
            vec![
                Verdict::Invalid {
                    message: "invalid image reference: repository path component \"*\" must be lower-case letters and digits, joined by '.', '_', '__' or dashes".into(),
                },
                remove("sha256:app"),
            ],
            vec![("sha256:app", &[], 100)],
        ),
        on(
            row("unknown sandbox: only containerd's own pin keeps it", &["registry.k8s.io/pause:3.10"], vec![skip(SkipReason::PinnedByOther, "image sha256:pause")], vec![]),
            |s| s.sandbox = None,
        ),
    ];
    for r in rows {
        let mut snap = node();
        (r.node)(&mut snap);
        let entry = Entry {
            images: r.images.clone(),
            force: r.force,
            block: r.block,
        };
        let plan = decide(&entry, &snap);
        let verdicts: Vec<Verdict> = plan.verdicts.iter().map(|(_, v)| v.clone()).collect();
        assert_eq!(verdicts, r.verdicts, "{}", r.case);
        let written: Vec<&String> = plan.verdicts.iter().map(|(w, _)| w).collect();
        assert_eq!(
            written,
            r.images.iter().collect::<Vec<_>>(),
            "{}: as written",
            r.case
        );
        let got: Vec<(String, Vec<String>, u64)> = plan
            .removals
            .into_iter()
            .map(|m| (m.id, m.unpin, m.bytes))
            .collect();
        let want: Vec<(String, Vec<String>, u64)> = r
            .removals
            .iter()
            .map(|(id, unpin, bytes)| {
                let unpin = unpin.iter().map(|u| u.to_string()).collect();
                (id.to_string(), unpin, *bytes)
            })
            .collect();
        assert_eq!(got, want, "{}: removals", r.case);
    }
}

/// Nothing outside the named images is ever removed: whatever the entry,
/// every removal's image is one a listed reference found, with all its
/// names covered.
#[test]
fn only_named_images_are_ever_removed() {
    let snap = node();
    let all: Vec<String> = snap
        .images
        .iter()
        .flat_map(|i| i.repo_tags.iter().chain(&i.repo_digests).cloned())
        .collect();
    for (i, first) in all.iter().enumerate() {
        for second in &all[i..] {
            for (force, block) in [(false, false), (true, false), (false, true)] {
                let entry = Entry {
                    images: vec![first.clone(), second.clone()],
                    force,
                    block,
                };
                for m in decide(&entry, &snap).removals {
                    let image = snap
                        .images
                        .iter()
                        .find(|x| x.id == m.id)
                        .expect("a listed image");
                    assert!(image.answers(&normal(first)) || image.answers(&normal(second)));
                    assert_ne!(m.id, "sha256:pause", "never the sandbox");
                    assert_ne!(m.id, "sha256:op", "never another's pin");
                    assert!(
                        !["sha256:web", "sha256:job"].contains(&m.id.as_str()),
                        "never in use"
                    );
                }
            }
        }
    }
}

#[test]
fn outcomes_say_why() {
    let cases = [
        (
            Verdict::NotPresent,
            RemovalResult::NotPresent,
            None,
            "no image on this node answers this reference",
        ),
        (
            skip(SkipReason::WantedByPull, "ImagePullJob team-a/pre"),
            RemovalResult::Skipped,
            Some(SkipReason::WantedByPull),
            "kept: a live pull entry on this node wants it (set force to remove it anyway) (ImagePullJob team-a/pre)",
        ),
        (
            in_use(&["web (running)"]),
            RemovalResult::InUse,
            None,
            "kept: used by containers web (running)",
        ),
        (
            Verdict::Invalid {
                message: "x".into(),
            },
            RemovalResult::Failed,
            None,
            "not an image reference: x",
        ),
    ];
    for (v, result, reason, message) in cases {
        assert_eq!(
            v.outcome(),
            Some((result, reason, message.to_string())),
            "{v:?}"
        );
    }
    assert_eq!(remove("sha256:x").outcome(), None, "the runtime decides");
}

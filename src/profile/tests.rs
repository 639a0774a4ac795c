use super::*;
use crate::testing::Tree;

const KEYS: &[KeySpec] = &[
    KeySpec {
        key: "net.core.rmem_max",
        kind: ValueKind::Number,
        why: "buffers",
    },
    KeySpec {
        key: "vm.swappiness",
        kind: ValueKind::Number,
        why: "swap",
    },
    KeySpec {
        key: "thp",
        kind: ValueKind::Text,
        why: "thp",
    },
    KeySpec {
        key: "nccl",
        kind: ValueKind::Version,
        why: "nccl",
    },
];

fn keys(_: Area) -> &'static [KeySpec] {
    KEYS
}

/// A node root with site profiles written into it.
fn site(files: &[(&str, &str)]) -> Tree {
    let tree = Tree::new();
    tree.dir(SITE_DIR);
    for (name, text) in files {
        tree.file(&format!("{SITE_DIR}/{name}.toml"), text);
    }
    tree
}

fn load(files: &[(&str, &str)], name: &str) -> Result<Profile, ProfileError> {
    let tree = site(files);
    let root = tree.root();
    Loader::new(&root, &keys).load(name)
}

/// Loads `text` written at `path` of a fresh tree, named by its path on this machine as a
/// user names a profile file.
fn load_by_path(path: &str, text: &str) -> Result<Profile, ProfileError> {
    let tree = Tree::new();
    let host_path = tree.profile(path, text);
    Loader::new(&tree.root(), &keys).load(&host_path)
}

#[test]
fn include_merges_and_the_child_wins() {
    let profile = load(
        &[
            ("parent", "description = \"p\"\n[network]\n\"net.core.rmem_max\" = { min = 100 }\n[memory]\n\"vm.swappiness\" = { max = 60 }\n"),
            ("child", "include = [\"parent\"]\n[network]\n\"net.core.rmem_max\" = { min = \"16M\", severity = \"warn\" }\n"),
        ],
        "child",
    )
    .unwrap();
    let rmem = profile.get(Area::Network, "net.core.rmem_max").unwrap();
    assert_eq!(rmem.rule.min, Some(Amount::Finite(16 << 20)));
    assert_eq!(rmem.severity, Severity::Warn);
    assert!(rmem.origin.ends_with("child.toml:3"), "{}", rmem.origin);
    assert_eq!(
        profile.get(Area::Memory, "vm.swappiness").unwrap().rule.max,
        Some(Amount::Finite(60))
    );
    assert_eq!(profile.chain, vec!["parent", "child"]);
    assert_eq!(profile.description, "p");
}

/// Each case: files, the profile to load, and what the error must name (file, line, key, text).
/// Files in the site directory, the profile to load, and what the error must name: file,
/// line, key and a piece of the message.
type BadCase<'a> = (
    &'a [(&'a str, &'a str)],
    &'a str,
    &'a str,
    Option<usize>,
    Option<&'a str>,
    &'a str,
);

#[test]
fn bad_profiles_name_file_line_and_key() {
    let cases: &[BadCase] = &[
        (
            &[("p", "[network]\n\"net.core.rmem_mx\" = { min = 1 }\n")],
            "p",
            "p.toml",
            Some(2),
            Some("[network] net.core.rmem_mx"),
            "unknown key",
        ),
        (
            &[("p", "colour = 1\n")],
            "p",
            "p.toml",
            Some(1),
            None,
            "unknown field `colour`",
        ),
        (
            &[(
                "p",
                "[network]\n\n\"net.core.rmem_max\" = { min = \"lots\" }\n",
            )],
            "p",
            "p.toml",
            Some(3),
            Some("[network] net.core.rmem_max"),
            "not a number",
        ),
        (
            &[("p", "[network]\n\"net.core.rmem_max\" = { minimum = 1 }\n")],
            "p",
            "p.toml",
            Some(2),
            Some("[network] net.core.rmem_max"),
            "unknown field `minimum`",
        ),
        (
            &[("p", "[network]\n\"net.core.rmem_max\" = 5\n")],
            "p",
            "p.toml",
            Some(2),
            Some("[network] net.core.rmem_max"),
            "invalid type",
        ),
        (
            &[(
                "p",
                "[network]\n\"net.core.rmem_max\" = { severity = \"warn\" }\n",
            )],
            "p",
            "p.toml",
            Some(2),
            None,
            "no included profile sets this key",
        ),
        (
            &[("p", "[network]\n\"net.core.rmem_max\" = { why = \"x\" }\n")],
            "p",
            "p.toml",
            Some(2),
            None,
            "no rule",
        ),
        (
            &[(
                "p",
                "[network]\n\"net.core.rmem_max\" = { min = 1, severity = \"fatal\" }\n",
            )],
            "p",
            "p.toml",
            Some(2),
            None,
            "severity `fatal`",
        ),
        (
            &[("p", "[network]\n\"thp\" = { min = 1 }\n")],
            "p",
            "p.toml",
            Some(2),
            None,
            "`min` does not apply",
        ),
        (
            &[("p", "[network]\n\"nccl\" = { version = \"~2\" }\n")],
            "p",
            "p.toml",
            Some(2),
            None,
            "not a version requirement",
        ),
        (
            &[(
                "p",
                "[network]\n\"net.core.rmem_max\" = { min = 10, max = 1 }\n",
            )],
            "p",
            "p.toml",
            Some(2),
            None,
            "above max",
        ),
        (
            &[("p", "include = [\"nowhere\"]\n")],
            "p",
            "p.toml",
            Some(1),
            Some("include"),
            "no profile named `nowhere`",
        ),
        (
            &[("a", "include = [\"b\"]\n"), ("b", "\ninclude = [\"a\"]\n")],
            "a",
            "a.toml",
            None,
            Some("include"),
            "include cycle",
        ),
        (&[("p", "[network\n")], "p", "p.toml", Some(1), None, ""),
        (
            &[],
            "no/such/file.toml",
            "no/such/file.toml",
            None,
            None,
            "cannot read",
        ),
        (&[], "../etc", "../etc", None, None, "cannot read"),
        (
            &[(
                "p",
                "[network]\n\"net.core.rmem_max\" = { equals = 10, min = 100 }\n",
            )],
            "p",
            "p.toml",
            Some(2),
            Some("[network] net.core.rmem_max"),
            "no value could pass",
        ),
        (
            &[(
                "p",
                "[network]\n\"net.core.rmem_max\" = { one_of = [100, 200], min = 150 }\n",
            )],
            "p",
            "p.toml",
            Some(2),
            None,
            "`100` does not meet",
        ),
        (
            &[("p", "description = \"x\"\n[bench]\n\nmin_busbw = -1.0\n")],
            "p",
            "p.toml",
            Some(4),
            Some("[bench] min_busbw"),
            "neither a non-negative number of GB/s nor a percentage",
        ),
        (
            &[("p", "[bench]\nmin_busbw = \"180%\"\n")],
            "p",
            "p.toml",
            Some(2),
            Some("[bench] min_busbw"),
            "at most 100%",
        ),
        (
            &[("p", "[bench]\nmin_busbw = true\n")],
            "p",
            "p.toml",
            Some(2),
            Some("[bench] min_busbw"),
            "not a bandwidth",
        ),
        (
            &[(
                "p",
                "description = \"x\"\n\n[bench.baseline]\ntolerance = \"10%\"\n\"1M\" = 2.0\n\"1X\" = 3.0\n",
            )],
            "p",
            "p.toml",
            Some(6),
            Some("[bench.baseline] 1X"),
            "message size",
        ),
        (
            &[("p", "[bench.allgather_baseline]\n\"1M\" = 2.0\n")],
            "p",
            "p.toml",
            Some(1),
            Some("[bench.allgather_baseline] tolerance"),
            "missing",
        ),
        (
            &[("p", "[bench.baselines]\ntolerance = \"1%\"\n")],
            "p",
            "p.toml",
            Some(1),
            None,
            "unknown field `baselines`",
        ),
        (
            &[],
            "bad name!",
            "bad name!",
            None,
            None,
            "not a profile name",
        ),
    ];
    for (files, name, file, line, key, text) in cases {
        let err = load(files, name).expect_err(name);
        assert!(err.file.ends_with(file), "{err}: file");
        if line.is_some() {
            assert_eq!(err.line, *line, "{err}: line");
        }
        if key.is_some() {
            assert_eq!(err.key.as_deref(), *key, "{err}: key");
        }
        assert!(err.message.contains(text), "{err}: wants {text:?}");
    }
}

#[test]
fn site_profiles_shadow_built_in_ones() {
    let profile = load(&[("ddp-10gbe", "description = \"site\"\n")], "ddp-10gbe").unwrap();
    assert_eq!(profile.description, "site");
    assert!(
        profile
            .source
            .ends_with("etc/gputune/profiles/ddp-10gbe.toml")
    );
}

#[test]
fn resolved_profiles_print_as_loadable_toml() {
    let profile = load(
        &[("p", "description = \"d\"\n[network]\n\"net.core.rmem_max\" = { min = \"16M\", why = \"say \\\"why\\\"\" }\n\"thp\" = { one_of = [\"madvise\", \"never\"], severity = \"warn\" }\n\"nccl\" = { version = \">=2.14\" }\n[bench]\nmin_busbw = 2.5\n")],
        "p",
    )
    .unwrap();
    let again = load_by_path("/again.toml", &profile.to_toml()).unwrap();
    assert_eq!(again.settings.len(), profile.settings.len());
    for (area, settings) in &profile.settings {
        for (key, setting) in settings {
            let other = again.get(*area, key).unwrap();
            assert_eq!(
                (&other.rule, other.severity, &other.why),
                (&setting.rule, setting.severity, &setting.why)
            );
        }
    }
    assert_eq!(again.bench.min_busbw, Some(Threshold::Gbps(2.5)));
}

#[test]
fn every_bench_threshold_is_inherited_and_the_child_wins() {
    let profile = load(
        &[
            ("parent", "[bench]\nmin_busbw = 40.0\nallgather_min_busbw = 30.0\nreducescatter_min_busbw = 20.0\nbroadcast_min_busbw = 10.0\n"),
            ("child", "include = [\"parent\"]\n[bench]\nreducescatter_min_busbw = 25.0\n"),
        ],
        "child",
    )
    .unwrap();
    assert_eq!(
        profile.bench.thresholds(),
        [
            ("min_busbw", Some(&Threshold::Gbps(40.0))),
            ("allgather_min_busbw", Some(&Threshold::Gbps(30.0))),
            ("reducescatter_min_busbw", Some(&Threshold::Gbps(25.0))),
            ("broadcast_min_busbw", Some(&Threshold::Gbps(10.0))),
        ]
    );
}

/// Percentages and baselines load, inherit (a baseline table whole) and print back as a
/// loadable profile.
#[test]
fn percentages_and_baselines_inherit_and_round_trip() {
    let profile = load(
        &[
            ("parent", "[bench]\nmin_busbw = \"80%\"\nbroadcast_min_busbw = 3\n[bench.baseline]\ntolerance = \"10%\"\n\"1M\" = 2.1\n\"128M\" = 9.4\n[bench.allgather_baseline]\ntolerance = \"5%\"\n\"64K\" = 0.5\n"),
            ("child", "include = [\"parent\"]\n[bench.baseline]\ntolerance = \"20%\"\n\"8M\" = 5\n"),
        ],
        "child",
    )
    .unwrap();
    assert_eq!(profile.bench.min_busbw, Some(Threshold::Fraction(0.8)));
    assert_eq!(
        profile.bench.broadcast_min_busbw,
        Some(Threshold::Gbps(3.0))
    );
    let baseline = profile.bench.baseline.clone().unwrap();
    assert_eq!(baseline.tolerance, 0.2);
    assert_eq!(
        baseline.sizes,
        [(8 << 20, 5.0)].into(),
        "the child's table, whole"
    );
    let gather = profile.bench.allgather_baseline.clone().unwrap();
    assert_eq!(gather.sizes, [(64 << 10, 0.5)].into());
    let text = profile.to_toml();
    assert!(text.contains("min_busbw = \"80%\"\n"), "{text}");
    let again = load_by_path("/again.toml", &text).unwrap();
    assert_eq!(again.bench, profile.bench);
}

#[test]
fn job_section_inherits_per_field_and_round_trips() {
    let profile = load(
        &[
            ("parent", "[job]\nrendezvous_ports = \"29500-29550\"\nnccl_ports = \"ip_local_port_range\"\n"),
            ("child", "include = [\"parent\"]\n[job]\nnccl_ports = \"50000-51000\"\nslice = \"training.slice\"\n"),
        ],
        "child",
    )
    .unwrap();
    assert_eq!(profile.job.rendezvous_ports, Some(vec![(29500, 29550)]));
    assert_eq!(
        profile.job.nccl_ports,
        Some(job::NcclPorts::Fixed(vec![(50000, 51000)]))
    );
    assert_eq!(profile.job.slice.as_deref(), Some("training.slice"));
    let shown = profile.to_toml();
    assert!(shown.contains("[job]\nrendezvous_ports = \"29500-29550\"\nnccl_ports = \"50000-51000\"\nslice = \"training.slice\"\n"), "{shown}");
    let again = load(&[("shown", &shown)], "shown").unwrap();
    assert_eq!(again.job, profile.job);
}

#[test]
fn bad_job_sections_name_file_line_and_key() {
    let cases = [
        (
            "[job]\nrendezvous_ports = \"29550-29500\"\n",
            2,
            "[job] rendezvous_ports",
        ),
        ("\n[job]\nslice = \"training\"\n", 3, "[job] slice"),
        ("[job]\nslice = \"-.slice\"\n", 2, "[job] slice"),
        ("[job]\nslice = \"gpu--jobs.slice\"\n", 2, "[job] slice"),
        ("[job]\nnccl_ports = \"ephemeral\"\n", 2, "[job] nccl_ports"),
    ];
    for (text, line, key) in cases {
        let err = load(&[("bad", text)], "bad").unwrap_err();
        assert_eq!(err.line, Some(line), "{err}");
        assert_eq!(err.key.as_deref(), Some(key), "{err}");
        assert!(err.file.ends_with("bad.toml"), "{err}");
    }
    let err = load(&[("bad", "[job]\nslice = \"-.slice\"\n")], "bad").unwrap_err();
    assert!(err.message.contains("systemd's root slice"), "{err}");
    let err = load(&[("bad", "[job]\nports = \"1\"\n")], "bad").unwrap_err();
    assert_eq!(err.line, Some(2), "{err}");
    assert!(err.message.contains("ports"), "{err}");
}

#[test]
fn site_profiles_include_paths_beside_themselves() {
    let tree = site(&[
        ("common", "[memory]\n\"vm.swappiness\" = { max = 5 }\n"),
        ("lab", "include = [\"./common.toml\"]\n"),
    ]);
    let root = tree.root();
    // Resolved beside the site profile, whatever the current directory is.
    let profile = Loader::new(&root, &keys).load("lab").unwrap();
    assert_eq!(
        profile.get(Area::Memory, "vm.swappiness").unwrap().rule.max,
        Some(Amount::Finite(5))
    );
}

#[test]
fn a_cycle_through_a_different_spelling_of_the_same_file_is_found() {
    let err = load_by_path("/pp/y.toml", "include = [\"../pp/y.toml\"]\n").unwrap_err();
    assert!(err.message.contains("include cycle"), "{err}");
    assert!(err.to_string().len() < 1000, "{err}");
}

#[test]
fn a_diamond_of_includes_resolves_each_file_once() {
    // Level i includes level i+1 twice: 2^40 visits without memoisation.
    let mut files: Vec<(String, String)> = (0..40)
        .map(|i| {
            let next = format!("d{}", i + 1);
            (
                format!("d{i}"),
                format!("include = [\"{next}\", \"{next}\"]\n"),
            )
        })
        .collect();
    files.push((
        "d40".into(),
        "[memory]\n\"vm.swappiness\" = { max = 5 }\n".into(),
    ));
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    // 40 levels is past the depth cap; 30 levels of diamonds must still be instant.
    let start = std::time::Instant::now();
    let err = load(&borrowed, "d0").unwrap_err();
    assert!(err.message.contains("deeper than 32"), "{err}");
    let profile = load(&borrowed, "d10").unwrap();
    assert_eq!(
        profile.get(Area::Memory, "vm.swappiness").unwrap().rule.max,
        Some(Amount::Finite(5))
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn a_chain_of_thousands_of_includes_is_a_clear_error_not_a_stack_overflow() {
    let files: Vec<(String, String)> = (0..3000)
        .map(|i| (format!("c{i}"), format!("include = [\"c{}\"]\n", i + 1)))
        .collect();
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let err = load(&borrowed, "c0").unwrap_err();
    assert_eq!(err.key.as_deref(), Some("include"));
    assert!(err.message.contains("deeper than"), "{err}");
}

#[test]
fn includes_of_special_files_are_refused_not_read() {
    // A profile the user names by path resolves its includes on the host: /dev/zero is
    // refused, not read without end.
    let err = load_by_path("/z.toml", "include = [\"/dev/zero\"]\n").unwrap_err();
    assert!(err.message.contains("not a regular file"), "{err}");
    assert_eq!(err.line, Some(1));
    // A site profile's includes resolve inside the root, which has no /dev/zero.
    let err = load(&[("z", "include = [\"/dev/zero\"]\n")], "z").unwrap_err();
    assert!(err.message.contains("no such file"), "{err}");
}

#[test]
fn a_site_profiles_path_includes_resolve_inside_the_root() {
    let outer = Tree::new();
    let host_only = outer.profile("/host.toml", "[memory]\n\"vm.swappiness\" = { max = 1 }\n");
    let tree = site(&[
        ("lab", "include = [\"/etc/gputune/extra.toml\"]\n"),
        ("evil", &format!("include = [\"{host_only}\"]\n")),
    ]);
    tree.file(
        "/etc/gputune/extra.toml",
        "[memory]\n\"vm.swappiness\" = { max = 7 }\n",
    );
    let root = tree.root();
    let lab = Loader::new(&root, &keys).load("lab").unwrap();
    assert_eq!(
        lab.get(Area::Memory, "vm.swappiness").unwrap().rule.max,
        Some(Amount::Finite(7))
    );
    let err = Loader::new(&root, &keys).load("evil").unwrap_err();
    assert!(err.message.contains("no such file"), "{err}");
}

#[test]
fn a_severity_alone_keeps_the_inherited_rule_and_the_most_specific_key_governs() {
    let p = load(
        &[
            (
                "parent",
                "[network]\n\"net.core.rmem_max\" = { min = 100, why = \"parent's\" }\n",
            ),
            (
                "child",
                "include = [\"parent\"]\n[network]\n\"net.core.rmem_max\" = { severity = \"warn\" }\n[memory]\n\"vm.swappiness\" = { severity = \"off\" }\n",
            ),
        ],
        "child",
    )
    .unwrap();
    let rmem = p.get(Area::Network, "net.core.rmem_max").unwrap();
    assert_eq!(rmem.rule.min, Some(Amount::Finite(100)));
    assert_eq!(rmem.severity, Severity::Warn);
    assert_eq!(rmem.why.as_deref(), Some("parent's"));
    assert_eq!(rmem.set_by, "child");
    assert!(rmem.origin.ends_with("child.toml:3"), "{}", rmem.origin);
    let swap = p.get(Area::Memory, "vm.swappiness").unwrap();
    assert_eq!(
        (swap.severity, &swap.rule),
        (Severity::Off, &Rule::default())
    );

    for (pattern, id, names) in [
        ("ulimit.nofile", "ulimit.nofile", true),
        ("ulimit.nofile", "ulimit.nofile.login", true),
        ("cpu.max", "cpu.max@training.slice", true),
        ("link.speed_mbps", "link.speed_mbps.eth0", true),
        ("ulimit.nofile", "ulimit.nofiles", false),
        ("net.core.rmem_max", "net.core.rmem", false),
    ] {
        assert_eq!(names_check(pattern, id), names, "{pattern} {id}");
    }
    assert!(
        p.governing(Area::Network, "net.core.rmem_max.eth0")
            .is_some()
    );
    assert!(p.governing(Area::Memory, "net.core.rmem_max").is_none());
}

#[test]
fn nic_ring_and_channel_keys_take_their_word_or_a_count() {
    let load = |body: &str| {
        let tree = Tree::new();
        let path = tree.profile("/p/nic.toml", &format!("[nic]\n{body}\n"));
        Loader::new(&tree.root(), &crate::checks::keys).load(&path)
    };
    for good in [
        "\"ring.rx\" = { equals = \"max\" }",
        "\"ring.tx\" = { equals = 4096 }",
        "\"channels.combined\" = { equals = \"local_cpus\" }",
        "\"channels.combined\" = { one_of = [8, 16] }",
        "\"offload.gro\" = { equals = 1 }",
    ] {
        assert!(load(good).is_ok(), "{good}: {:?}", load(good).err());
    }
    for (bad, says) in [
        (
            "\"ring.rx\" = { equals = \"maximum\" }",
            "neither `max` nor a count",
        ),
        (
            "\"channels.combined\" = { equals = \"local\" }",
            "neither `local_cpus` nor a count",
        ),
        ("\"ring.rx\" = { min = 4096 }", "`min` does not apply"),
        ("\"offload.gro\" = { equals = true }", "expected a number"),
    ] {
        let err = load(bad).unwrap_err().to_string();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(err.contains("nic.toml:2"), "{bad}: {err}");
    }
}

#[test]
fn a_version_key_refuses_every_other_rule_and_a_text_key_refuses_a_negative_number() {
    for rule in [
        "equals = \"2.18\"",
        "min = 2",
        "max = 3",
        "one_of = [\"2.18\"]",
    ] {
        let err = load_by_path("/p/v.toml", &format!("[gpu]\nnccl = {{ {rule} }}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("holds a version"), "{rule}: {err}");
    }
    assert!(load_by_path("/p/v.toml", "[gpu]\nnccl = { version = \">=2.18\" }\n").is_ok());
    // A number stands for a count only in keys that take a word or a count.
    let err = load_by_path("/p/t.toml", "[memory]\nthp = { equals = -1 }\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected text, found integer"), "{err}");
}

#[test]
fn equal_min_and_max_pin_one_value() {
    let profile = load_by_path(
        "/p/m.toml",
        "[network]\n\"net.core.rmem_max\" = { min = 5, max = 5 }\n",
    );
    assert!(profile.is_ok(), "{:?}", profile.err());
}

#[test]
fn a_profile_file_includes_another_file_beside_it() {
    let tree = Tree::new();
    tree.profile(
        "/pp/common.toml",
        "[memory]\n\"vm.swappiness\" = { max = 5 }\n",
    );
    let lab = tree.profile("/pp/lab.toml", "include = [\"./common.toml\"]\n");
    let profile = Loader::new(&tree.root(), &keys).load(&lab).unwrap();
    assert_eq!(
        profile.get(Area::Memory, "vm.swappiness").unwrap().rule.max,
        Some(Amount::Finite(5))
    );
}

#[test]
fn a_misspelt_site_profile_name_is_answered_with_the_name_meant() {
    let err = load(&[("gpu-west", "description = \"d\"\n")], "gpu-wset").unwrap_err();
    assert!(
        err.to_string().contains("did you mean `gpu-west`?"),
        "{err}"
    );
    let err = load(&[("gpu_west", "description = \"d\"\n")], "gpu_wset").unwrap_err();
    assert!(
        err.to_string().contains("did you mean `gpu_west`?"),
        "{err}"
    );
}

#[test]
fn a_site_profile_shadows_the_built_in_of_its_name_in_the_list() {
    let tree = site(&[("base", "description = \"our base\"\n")]);
    let root = tree.root();
    let list = Loader::new(&root, &crate::checks::keys).list().unwrap();
    let names: Vec<&str> = list.iter().map(|l| l.name.as_str()).collect();
    // Every built-in once, `base` as the site's.
    assert_eq!(names.len(), BUILTIN.len(), "{names:?}");
    assert_eq!(names.iter().filter(|n| **n == "base").count(), 1);
    let base = list.iter().find(|l| l.name == "base").unwrap();
    assert_eq!(base.description, "our base");
    for (name, _) in BUILTIN {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }
}

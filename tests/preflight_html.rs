//! `gputune preflight --format html` rendered by a real headless Chromium: four namespaced
//! nodes, one dropping NCCL's ports, and a real `bench allreduce --pairs` report for the heat
//! map. The page must render with no network, the failing cells must be exactly those the
//! JSON report lists, and a screenshot is kept under target/tmp/preflight-html/.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common;
use crate::preflight_netns::{Launcher, addr, drop_ephemeral, fabric, rank};

use common::{KillOnDrop, NetnsRank, text};

const NODES: usize = 4;
const FIREWALLED: usize = 2;

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser"].into_iter().find(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Chromium with no network, sandbox or profile of its own kept.
fn headless(browser: &str, profile: &Path) -> Command {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--proxy-server=http://0.0.0.0:9",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// Every `<td class="fail" id="cell-FROM-TO"` in the DOM, as (from, to).
fn failing_cells(dom: &str) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for piece in dom.split("<td class=\"fail\" id=\"cell-").skip(1) {
        let id = piece.split('"').next().unwrap();
        let (a, b) = id.split_once('-').unwrap();
        out.push((a.parse().unwrap(), b.parse().unwrap()));
    }
    out.sort();
    out
}

#[test]
fn the_html_page_renders_in_chromium_with_the_failing_cells_where_the_json_says() {
    common::require(&["ip", "unshare", "nft"]);
    let Some(browser) = chromium() else {
        panic!("chromium is not installed: apt-get install -y chromium (scripts/test does)");
    };
    let real = common::real_nccl();
    let dir = tempfile::tempdir().unwrap();
    let net = 42;
    let fabric = fabric("h", net, NODES, &|_| String::new());
    let master = addr(net, 0);

    // A real bench --pairs report across the same nodes.
    let bench: Vec<KillOnDrop> = (0..NODES)
        .map(|i| {
            let mut c = NetnsRank {
                ns: fabric.node(i),
                host: &format!("node{i}"),
                rank: i,
                world: NODES,
                master: &master,
                port: 29531,
            }
            .command("--pairs -b 1M -e 1M -n 4 -w 1 --timeout 30 --format json");
            KillOnDrop::spawn(&mut c)
        })
        .collect();
    let outs: Vec<_> = bench
        .into_iter()
        .map(|b| b.wait_with_output().unwrap())
        .collect();
    // Exit 1 is a slow pair on a loaded machine: the figures are there all the same.
    assert!(
        matches!(outs[0].status.code(), Some(0 | 1)),
        "bench --pairs: {}",
        text(&outs[0].stderr)
    );
    let pairs_file = dir.path().join("pairs.json");
    std::fs::write(&pairs_file, &outs[0].stdout).unwrap();
    // Now (the bench's data ports are ephemeral too) one node drops NCCL's ports.
    drop_ephemeral(fabric.node(FIREWALLED));

    let run = |args: &str| {
        let ranks: Vec<KillOnDrop> = (0..NODES)
            .map(|i| {
                let home = dir.path().join(format!("home{i}"));
                let a = if i == 0 { args } else { "--timeout 15" };
                rank(
                    fabric.node(i),
                    i,
                    NODES,
                    // srun-style: no MASTER_*, rank 0 is the node list's first host.
                    Launcher::Srun {
                        nodelist: "node[0-3]",
                        job: 77,
                    },
                    &home,
                    Path::new(&real),
                    a,
                )
            })
            .collect();
        let outs: Vec<_> = ranks
            .into_iter()
            .map(|r| r.wait_with_output().unwrap())
            .collect();
        assert_eq!(outs[0].status.code(), Some(1), "{}", text(&outs[0].stderr));
        outs.into_iter().next().unwrap()
    };
    let json = run("--timeout 15 --format json");
    let doc: Value = serde_json::from_slice(&json.stdout).unwrap();
    let page = dir.path().join("preflight.html");
    run(&format!(
        "--timeout 15 --format html --output {} --pairs-report {}",
        page.display(),
        pairs_file.display()
    ));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("<script") && !html.contains("http"),
        "self-contained"
    );

    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}", page.display());
    let dom = headless(browser, profile.path())
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap();
    assert!(dom.status.success(), "chromium: {}", text(&dom.stderr));
    let dom = text(&dom.stdout);
    assert!(dom.contains("<table id=\"reachability\""), "{dom}");

    let mut expected: Vec<(u64, u64)> = doc["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["error"].is_string())
        .map(|p| (p["from"].as_u64().unwrap(), p["to"].as_u64().unwrap()))
        .collect();
    expected.sort();
    expected.dedup();
    let into_firewalled: Vec<(u64, u64)> = (0..NODES as u64)
        .filter(|i| *i != FIREWALLED as u64)
        .map(|i| (i, FIREWALLED as u64))
        .collect();
    assert_eq!(expected, into_firewalled, "{doc:#}");
    assert_eq!(failing_cells(&dom), expected, "{dom}");
    // The heat map: every measured pair, both ways.
    let measured = serde_json::from_slice::<Value>(&outs[0].stdout).unwrap()["pairs"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        dom.matches("<td class=\"bw\"").count(),
        2 * measured,
        "{dom}"
    );

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("preflight-html");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join("preflight.png");
    let _ = std::fs::remove_file(&shot);
    std::fs::copy(&page, shots.join("preflight.html")).unwrap();
    let out = headless(browser, profile.path())
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1200,900")
        .arg(&url)
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium: {}", text(&out.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 5000,
        "{}",
        png.len()
    );
}

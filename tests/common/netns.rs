//! Network namespaces for the tests that run the real binary against a real kernel: veth
//! pairs between namespaces, threads that act inside one, and bench ranks each on a host of
//! its own. Needs root and iproute2/util-linux, which scripts/test installs.

#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::thread::JoinHandle;

use super::text;

/// Runs `program` with the words of `args`, failing the test with its stderr unless it
/// succeeds.
fn run_words(program: &str, args: &str) {
    let out = Command::new(program)
        .args(args.split_whitespace())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} ({e}): run the tests with scripts/test as root")
        });
    assert!(
        out.status.success(),
        "{program} {args}: {} (network namespaces need root: run scripts/test as root)",
        text(&out.stderr)
    );
}

/// `ip ARGS...` (words), which must succeed.
pub fn ip(args: &str) {
    run_words("ip", args);
}

/// Named network namespaces, deleted on drop.
pub struct Namespaces(pub Vec<String>);

impl Namespaces {
    /// Adds each namespace (one left over from an earlier run of this pid is replaced). Each
    /// one joins the guard as soon as it is made, so a failure part-way still deletes those
    /// made before it.
    pub fn add(names: Vec<String>) -> Namespaces {
        let mut made = Namespaces(Vec::with_capacity(names.len()));
        for name in names {
            let _ = Command::new("ip")
                .args(["netns", "del", &name])
                .stderr(Stdio::null())
                .status();
            ip(&format!("netns add {name}"));
            made.0.push(name);
        }
        made
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Two namespaces joined by a veth pair, each end up with its /24 address and loopback.
pub struct VethPair {
    pub a: String,
    pub b: String,
    _namespaces: Namespaces,
}

/// One end of a veth pair: its device name and address in its namespace.
pub struct End<'a> {
    pub dev: &'a str,
    pub addr: &'a str,
}

impl VethPair {
    pub fn new(a: String, b: String, end_a: End, end_b: End) -> VethPair {
        let namespaces = Namespaces::add(vec![a.clone(), b.clone()]);
        ip(&format!(
            "link add {} netns {a} type veth peer name {} netns {b}",
            end_a.dev, end_b.dev
        ));
        for (ns, end) in [(&a, &end_a), (&b, &end_b)] {
            ip(&format!("-n {ns} addr add {}/24 dev {}", end.addr, end.dev));
            ip(&format!("-n {ns} link set {} up", end.dev));
            ip(&format!("-n {ns} link set lo up"));
        }
        VethPair {
            a,
            b,
            _namespaces: namespaces,
        }
    }
}

/// Runs `f` on a thread inside namespace `ns`: sockets it makes stay there.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    std::thread::spawn(move || {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
            .unwrap_or_else(|e| panic!("setns: {e}"));
        f()
    })
}

/// A rank of `gputune bench allreduce --backend tcp ARGS` as a launcher would start it on
/// another host: inside namespace `ns`, in a UTS namespace of its own named `host`, with
/// RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT and nothing else of the environment.
pub struct NetnsRank<'a> {
    pub ns: &'a str,
    pub host: &'a str,
    pub rank: usize,
    pub world: usize,
    pub master: &'a str,
    pub port: u16,
}

impl NetnsRank<'_> {
    pub fn command(&self, args: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns, "unshare", "--uts", "sh", "-c"])
            .args(["hostname \"$0\" && exec \"$@\"", self.host, super::bin()])
            .args(["bench", "allreduce", "--backend", "tcp"])
            .args(args.split_whitespace());
        super::rank_env(&mut c, self.rank, self.world, self.master, self.port);
        c
    }
}

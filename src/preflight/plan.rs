//! Who probes whom. Up to [`ALL_PAIRS_MAX`] nodes every node probes every other; above it
//! each node probes its ring neighbours and a logarithmic random sample, so the cost per
//! node grows with log n, not n, and a 4,000-node job still finishes in seconds.

use crate::host::Root;
use crate::profile::job::NcclPorts;

use super::facts::JobPorts;
use super::wire::{Facts, Target};

/// The largest job probed pair by pair.
pub(crate) const ALL_PAIRS_MAX: usize = 256;
/// PyTorch's rendezvous ports, when no profile says otherwise (the shipped profiles' range).
pub(crate) const DEFAULT_RENDEZVOUS: (u16, u16) = (29500, 29550);

/// The `[job]` ports of the profile `audit` would choose for this node, or PyTorch's
/// defaults and the kernel's ephemeral range when it names none.
pub(crate) fn job_ports(root: &Root) -> JobPorts {
    let loaded = crate::profile::default::choose(root)
        .ok()
        .and_then(|(name, _)| {
            crate::profile::Loader::new(root, &crate::checks::keys)
                .load(&name)
                .ok()
                .map(|p| (name, p))
        });
    let (rendezvous, nccl, source) = match loaded {
        Some((name, p)) => (
            p.job.rendezvous_ports.clone(),
            p.job.nccl_ports.clone(),
            format!("profile {name}"),
        ),
        None => (None, None, "defaults".to_string()),
    };
    let source = match (&rendezvous, &nccl) {
        (Some(_), Some(_)) => format!("{source} [job]"),
        _ => format!("{source}; PyTorch's 29500-29550 and the ephemeral range where it names none"),
    };
    JobPorts {
        rendezvous: rendezvous.unwrap_or_else(|| vec![DEFAULT_RENDEZVOUS]),
        nccl: nccl.unwrap_or(NcclPorts::LocalPortRange),
        source,
    }
}

/// The ranks that answer probes: on each host, the rank that opened the most ports (ranks
/// sharing a host race for the same sampled ports; the first in rank order wins a tie).
pub(crate) fn listeners(facts: &[Option<Facts>]) -> Vec<usize> {
    let opened = |f: &Facts| f.listens.iter().filter(|l| l.error.is_none()).count();
    let mut best: Vec<&Facts> = Vec::new();
    for f in facts.iter().flatten().filter(|f| f.probe_addr.is_some()) {
        match best.iter_mut().find(|b| b.host == f.host) {
            Some(b) if opened(f) > opened(b) => *b = f,
            Some(_) => {}
            None => best.push(f),
        }
    }
    let mut out: Vec<usize> = best.iter().map(|f| f.rank).collect();
    out.sort_unstable();
    out
}

/// A small deterministic generator (splitmix64), so a job's sample is the same on a rerun.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The positions (in `nodes`) that position `me` probes: all others up to
/// [`ALL_PAIRS_MAX`], else both ring neighbours and ⌈log2 n⌉ others drawn at random.
pub(crate) fn peers_of(me: usize, n: usize) -> Vec<usize> {
    if n <= ALL_PAIRS_MAX {
        return (0..n).filter(|&i| i != me).collect();
    }
    let mut out = vec![(me + 1) % n, (me + n - 1) % n];
    let want = 2 + (usize::BITS - (n - 1).leading_zeros()) as usize;
    let mut state = me as u64 ^ 0x5eed;
    while out.len() < want {
        let pick = (next(&mut state) % n as u64) as usize;
        if pick != me && !out.contains(&pick) {
            out.push(pick);
        }
    }
    out
}

/// The targets of rank `me` (one of `nodes`).
pub(crate) fn targets(me: usize, nodes: &[usize], facts: &[Option<Facts>]) -> Vec<Target> {
    let Some(pos) = nodes.iter().position(|&r| r == me) else {
        return Vec::new();
    };
    peers_of(pos, nodes.len())
        .into_iter()
        .filter_map(|i| {
            let f = facts.get(nodes[i])?.as_ref()?;
            Some(Target {
                rank: f.rank,
                host: f.host.clone(),
                addr: f.probe_addr?,
                ports: f
                    .listens
                    .iter()
                    .filter(|l| l.error.is_none())
                    .map(|l| l.port)
                    .collect(),
                echo_port: f.echo_port,
                mtu: f.mtu,
            })
        })
        .collect()
}

/// How the report describes the coverage.
pub(crate) fn coverage(nodes: usize) -> String {
    if nodes <= ALL_PAIRS_MAX {
        format!("all pairs of {nodes} nodes")
    } else {
        format!(
            "{nodes} nodes (over {ALL_PAIRS_MAX}): each probed its ring neighbours and {} others at random",
            peers_of(0, nodes).len() - 2
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_pairs_up_to_the_limit_then_ring_and_a_log_sample() {
        assert_eq!(peers_of(1, 4), vec![0, 2, 3]);
        assert_eq!(peers_of(0, 256).len(), 255);
        let big = peers_of(10, 4000);
        assert_eq!(big.len(), 2 + 12, "{big:?}");
        assert_eq!(&big[..2], &[11, 9]);
        assert!(!big.contains(&10));
        let mut unique = big.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), big.len());
        assert_eq!(peers_of(0, 4000)[1], 3999);
        assert!(coverage(4000).contains("12 others"));
    }
}

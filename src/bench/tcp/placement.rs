//! Where a rank's operations run. Every algorithm moves its data on the rank's own calling
//! thread with a bounded busy-poll, so two local ranks that the scheduler leaves on one core
//! take turns: each spins out its budget before the other can answer, and every operation
//! costs a whole spin (about 21 µs on loopback instead of 5). As Open MPI binds a rank to a
//! core when ranks do not outnumber cores (`--bind-to core`), the calling thread of each
//! local rank is pinned to its own core; more ranks than cores are pinned round-robin, and
//! they never spin without yielding. The threads of a ring with several streams, which
//! spread the kernel's copies over cores, are released to every core this process may use.

use std::sync::OnceLock;
use std::time::Duration;

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// The CPUs this process could use before any pinning (0 is the calling thread).
static PROCESS_CPUS: OnceLock<CpuSet> = OnceLock::new();

/// How long a freshly pinned rank waits before its first operation. Right after the ranks
/// start, the first ~100 ms of small-message figures were 5-30× the steady ones in
/// measurements on a 2-core VM (local ranks still starting, threads exiting, the pinned
/// threads migrating); a pause costs one tenth of a second per run, not per size.
pub(crate) const SETTLE: Duration = Duration::from_millis(150);

/// Pins the calling thread to one core for the `index`th of `local` ranks on this host, and
/// returns that core (see [`core_for`]); `None` when nothing could be pinned.
pub(crate) fn pin_calling_thread(index: usize, local: usize) -> Option<usize> {
    let allowed = *PROCESS_CPUS
        .get_or_init(|| sched_getaffinity(Pid::from_raw(0)).unwrap_or_else(|_| CpuSet::new()));
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| allowed.is_set(c).unwrap_or(false))
        .collect();
    let cpu = core_for(index, local, &cpus)?;
    let mut one = CpuSet::new();
    one.set(cpu).ok()?;
    sched_setaffinity(Pid::from_raw(0), &one).ok()?;
    Some(cpu)
}

/// The core of the `index`th of `local` ranks among `cpus`. Ranks that do not outnumber the
/// cores are spread over them, a core each (0 and 1 of 2; 0, 4, 8, 12 of 16 for 4 ranks).
/// More ranks than cores go round-robin (rank i on core i mod cores), so the two ends of
/// every ring link (i, i+1) sit on different cores and can move data at the same time, and
/// no rank migrates: with 4 ranks on 2 cores this took 2 MiB in 1.40 ms (median) against
/// 2.00 left to the scheduler, and 1.82 ms with neighbours sharing a core.
pub(crate) fn core_for(index: usize, local: usize, cpus: &[usize]) -> Option<usize> {
    if local == 0 || index >= local || cpus.is_empty() {
        return None;
    }
    if local > cpus.len() {
        return Some(cpus[index % cpus.len()]);
    }
    Some(cpus[index * (cpus.len() / local)])
}

/// Lets the calling thread (one started by a pinned thread, which inherits its core)
/// run on every CPU the process could use before pinning.
pub(crate) fn release_current_thread() {
    if let Some(allowed) = PROCESS_CPUS.get() {
        let _ = sched_setaffinity(Pid::from_raw(0), allowed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_get_a_core_each_or_go_round_robin_when_they_outnumber_cores() {
        let two = [0, 1];
        let sixteen: Vec<usize> = (0..16).collect();
        let cores = |local, cpus: &[usize]| -> Vec<Option<usize>> {
            (0..local).map(|i| core_for(i, local, cpus)).collect()
        };
        assert_eq!(cores(2, &two), [Some(0), Some(1)]);
        assert_eq!(cores(4, &sixteen), [Some(0), Some(4), Some(8), Some(12)]);
        // Ring neighbours on different cores; the ring closes 3 -> 0 across cores too.
        assert_eq!(cores(4, &two), [Some(0), Some(1), Some(0), Some(1)]);
        assert_eq!(cores(3, &[5, 7]), [Some(5), Some(7), Some(5)]);
        assert_eq!(core_for(2, 2, &two), None);
        assert_eq!(core_for(0, 1, &[]), None);
    }

    #[test]
    fn pins_a_thread_to_one_allowed_core_and_releases_workers() {
        std::thread::spawn(|| {
            let before = sched_getaffinity(Pid::from_raw(0)).unwrap();
            let allowed = (0..CpuSet::count())
                .filter(|&c| before.is_set(c).unwrap())
                .count();
            assert_eq!(pin_calling_thread(allowed, allowed), None, "no such rank");
            let cpu = pin_calling_thread(allowed - 1, allowed).expect("pinned");
            let now = sched_getaffinity(Pid::from_raw(0)).unwrap();
            let set: Vec<usize> = (0..CpuSet::count())
                .filter(|&c| now.is_set(c).unwrap())
                .collect();
            assert_eq!(set, vec![cpu]);
            assert!(before.is_set(cpu).unwrap());
            let worker = std::thread::spawn(|| {
                release_current_thread();
                sched_getaffinity(Pid::from_raw(0)).unwrap()
            })
            .join()
            .unwrap();
            for c in 0..CpuSet::count() {
                assert_eq!(worker.is_set(c).unwrap(), before.is_set(c).unwrap());
            }
        })
        .join()
        .unwrap();
    }
}

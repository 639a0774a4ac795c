//! Binding the current process to CPUs and NUMA memory with the real syscalls
//! (`sched_setaffinity`, `set_mempolicy`, in [`crate::ffi::linux`]); the binding is inherited across `exec`, which is
//! how `gputune pin` places a training rank next to its GPU.

use std::io;

use super::cpulist::CpuList;
use crate::ffi::linux;

pub(crate) use crate::ffi::linux::MemPolicy;

/// A CPU or node set as the kernel's bitmask of unsigned longs.
pub(crate) fn mask_words(set: &CpuList) -> Vec<libc::c_ulong> {
    let bits = libc::c_ulong::BITS;
    let top = set.0.iter().next_back().copied().unwrap_or(0);
    let mut words = vec![0 as libc::c_ulong; (top / bits + 1) as usize];
    for &n in &set.0 {
        words[(n / bits) as usize] |= 1 << (n % bits);
    }
    words
}

/// The mask of a set that must not be empty (an empty one would be the kernel's EINVAL, or
/// for a memory policy mean "local" instead of what was asked); `what` names it.
fn nonempty_mask(set: &CpuList, what: &str) -> io::Result<Vec<libc::c_ulong>> {
    if set.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("empty {what} list"),
        ));
    }
    Ok(mask_words(set))
}

/// Restricts the calling thread (and what it execs) to `cpus`.
pub(crate) fn set_cpu_affinity(cpus: &CpuList) -> io::Result<()> {
    linux::sched_setaffinity(&nonempty_mask(cpus, "CPU")?)
}

/// Sets the calling thread's NUMA memory policy over `nodes`.
pub(crate) fn set_memory_policy(policy: MemPolicy, nodes: &CpuList) -> io::Result<()> {
    linux::set_mempolicy(policy, &nonempty_mask(nodes, "node")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        let m = mask_words(&CpuList::parse("0,2,64").unwrap());
        assert_eq!(m, vec![0b101, 1]);
        assert_eq!(mask_words(&CpuList::parse("").unwrap()), vec![0]);
    }

    #[test]
    fn empty_sets_are_refused_before_any_syscall() {
        assert!(set_cpu_affinity(&CpuList::default()).is_err());
        assert!(set_memory_policy(MemPolicy::Bind, &CpuList::default()).is_err());
    }

    #[test]
    fn a_node_that_does_not_exist_is_refused_by_the_kernel() {
        let err = set_memory_policy(MemPolicy::Bind, &CpuList::parse("1000").unwrap());
        assert!(err.is_err());
    }
}

//! Binding the current process to CPUs and NUMA memory with the real syscalls
//! (`sched_setaffinity`, `set_mempolicy`); the binding is inherited across `exec`, which is
//! how `gputune pin` places a training rank next to its GPU.

use std::io;

use super::cpulist::CpuList;

/// `MPOL_PREFERRED` and `MPOL_BIND` of `<linux/mempolicy.h>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemPolicy {
    /// Allocate from these nodes only (OOM rather than spill to another socket).
    Bind = 2,
    /// Prefer the first node, fall back to others when it is full.
    Preferred = 1,
}

/// A CPU or node set as the kernel's bitmask of unsigned longs.
pub fn mask_words(set: &CpuList) -> Vec<libc::c_ulong> {
    let bits = libc::c_ulong::BITS;
    let top = set.0.iter().next_back().copied().unwrap_or(0);
    let mut words = vec![0 as libc::c_ulong; (top / bits + 1) as usize];
    for &n in &set.0 {
        words[(n / bits) as usize] |= 1 << (n % bits);
    }
    words
}

/// Restricts the calling thread (and what it execs) to `cpus`.
pub fn set_cpu_affinity(cpus: &CpuList) -> io::Result<()> {
    if cpus.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "empty CPU list",
        ));
    }
    let words = mask_words(cpus);
    let bytes = std::mem::size_of_val(words.as_slice());
    // SAFETY: the mask is valid for `bytes` bytes; pid 0 is the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setaffinity, 0, bytes, words.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the calling thread's NUMA memory policy over `nodes`.
pub fn set_memory_policy(policy: MemPolicy, nodes: &CpuList) -> io::Result<()> {
    if nodes.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "empty node list",
        ));
    }
    let words = mask_words(nodes);
    let maxnode = words.len() as libc::c_ulong * libc::c_ulong::BITS as libc::c_ulong + 1;
    // SAFETY: the mask holds `maxnode - 1` bits, as set_mempolicy(2) requires.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            policy as libc::c_int,
            words.as_ptr(),
            maxnode,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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

# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_gputune_global_optspecs
    string join \n root= h/help V/version
end

function __fish_gputune_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_gputune_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_gputune_using_subcommand
    set -l cmd (__fish_gputune_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c gputune -n "__fish_gputune_needs_command" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_needs_command" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_needs_command" -s V -l version -d 'Print version'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "audit" -d 'Check the node against a profile and report every finding with its fix'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "apply" -d 'Apply a profile: preview, journal, apply, verify and persist'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "rollback" -d 'Restore the values saved by the last apply'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "status" -d 'What gputune applied here, when and by whom, and whether it still holds (exit 1 when something drifted)'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "profiles" -d 'List profiles, or show one fully resolved'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "topo" -d 'Show GPUs, NICs, NUMA nodes, CPU lists, PCIe links and their affinity'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "pin" -d 'Run a command bound to the CPUs and memory local to its GPU'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "bench" -d 'Benchmark collectives across the node\'s GPUs and between nodes'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "health" -d 'Audit as a Slurm health check or node-problem-detector plugin; drain/resume with --slurm'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "fleet" -d 'Compare many nodes\' audit reports: value groups per check and fact, nodes as hostlists'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "explain" -d 'Explain an NCCL/PyTorch log: what NCCL did, each problem\'s cause, fix and checks'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "preflight" -d 'Run by the job\'s launcher on every node: will this job start? Names, MASTER_ADDR, NCCL\'s interface, versions that must agree, every pair\'s ports'
complete -c gputune -n "__fish_gputune_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gputune -n "__fish_gputune_using_subcommand audit" -l profile -d 'Profile name or TOML file [default: chosen from the node, see `gputune profiles list`]' -r
complete -c gputune -n "__fish_gputune_using_subcommand audit" -l format -d 'Output format' -r -f -a "table\t''
json\t''
junit\t''
prometheus\t''"
complete -c gputune -n "__fish_gputune_using_subcommand audit" -l output -d 'Write the report to FILE (atomically: temp file + rename; missing directories are created) instead of stdout' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand audit" -l only -d 'Check only these areas' -r -f -a "network\t'Kernel network sysctls'
memory\t'Swap, swappiness, transparent huge pages, NUMA balancing, file-max'
numa\t'NUMA topology and placement'
nic\t'Network interfaces: speed, MTU, driver, firmware'
gpu\t'GPUs, NVIDIA driver, CUDA and NCCL'
platform\t'PCIe ACS, IOMMU, peer memory'
limits\t'ulimits, /dev/shm, logind'
cgroup\t'cgroup limits'
firewall\t'Firewall rules for rendezvous and NCCL ports'"
complete -c gputune -n "__fish_gputune_using_subcommand audit" -l cgroup -d 'Judge the limits of this cgroup [default: the current process\'s]' -r
complete -c gputune -n "__fish_gputune_using_subcommand audit" -l peer -d 'Judge the NIC that routes to this peer node [default: the default route\'s], and connect to its rendezvous PORT [default: the profile\'s first rendezvous port]' -r
complete -c gputune -n "__fish_gputune_using_subcommand audit" -l skip -d 'Report these checks as skipped, whatever they find (an ID covers its subjects: `ulimit.nofile` skips `ulimit.nofile.login` too)' -r
complete -c gputune -n "__fish_gputune_using_subcommand audit" -l since -d 'Judge NVIDIA Xid events in the kernel log from TIME instead of boot: @SECONDS, a duration ago (30m, 2h, 1d) or a UTC time (2026-11-25 14:00)' -r
complete -c gputune -n "__fish_gputune_using_subcommand audit" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand audit" -l strict -d 'Treat warnings as failures (exit 1)'
complete -c gputune -n "__fish_gputune_using_subcommand audit" -l persisted -d 'Judge what the node would have after a reboot, from its configuration files alone'
complete -c gputune -n "__fish_gputune_using_subcommand audit" -s v -l verbose -d 'Table: list passing checks too (by default only what needs attention, skips and the counts are shown)'
complete -c gputune -n "__fish_gputune_using_subcommand audit" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gputune -n "__fish_gputune_using_subcommand apply" -l profile -d 'Profile name or TOML file to apply' -r
complete -c gputune -n "__fish_gputune_using_subcommand apply" -l only -d 'Apply only the changes of these areas' -r -f -a "network\t'Kernel network sysctls'
memory\t'Swap, swappiness, transparent huge pages, NUMA balancing, file-max'
numa\t'NUMA topology and placement'
nic\t'Network interfaces: speed, MTU, driver, firmware'
gpu\t'GPUs, NVIDIA driver, CUDA and NCCL'
platform\t'PCIe ACS, IOMMU, peer memory'
limits\t'ulimits, /dev/shm, logind'
cgroup\t'cgroup limits'
firewall\t'Firewall rules for rendezvous and NCCL ports'"
complete -c gputune -n "__fish_gputune_using_subcommand apply" -l skip -d 'Leave these checks alone: no change for them is planned (an ID covers its subjects, as in `audit --skip`)' -r
complete -c gputune -n "__fish_gputune_using_subcommand apply" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand apply" -l dry-run -d 'Print the plan (before -> after) and change nothing'
complete -c gputune -n "__fish_gputune_using_subcommand apply" -s y -l yes -d 'Apply without asking for confirmation'
complete -c gputune -n "__fish_gputune_using_subcommand apply" -l no-persist -d 'Change the live values only; write nothing that survives a reboot'
complete -c gputune -n "__fish_gputune_using_subcommand apply" -l live -d 'Write live kernel values even though --root has a mounted /proc (the running kernel\'s)'
complete -c gputune -n "__fish_gputune_using_subcommand apply" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gputune -n "__fish_gputune_using_subcommand rollback" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand rollback" -l dry-run -d 'Print what rollback would restore (before -> after per target, files removed or restored) and change nothing'
complete -c gputune -n "__fish_gputune_using_subcommand rollback" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_using_subcommand status" -l format -d 'Output format' -r -f -a "table\t''
json\t''"
complete -c gputune -n "__fish_gputune_using_subcommand status" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand status" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and not __fish_seen_subcommand_from list show help" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and not __fish_seen_subcommand_from list show help" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and not __fish_seen_subcommand_from list show help" -f -a "list" -d 'List built-in and site profiles (/etc/gputune/profiles wins on a name clash)'
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and not __fish_seen_subcommand_from list show help" -f -a "show" -d 'Print a profile fully resolved (includes merged), each setting with its origin'
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and not __fish_seen_subcommand_from list show help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and __fish_seen_subcommand_from list" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and __fish_seen_subcommand_from list" -l names -d 'Print only the names, one per line (for scripts and shell completion)'
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and __fish_seen_subcommand_from show" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and __fish_seen_subcommand_from help" -f -a "list" -d 'List built-in and site profiles (/etc/gputune/profiles wins on a name clash)'
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and __fish_seen_subcommand_from help" -f -a "show" -d 'Print a profile fully resolved (includes merged), each setting with its origin'
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gputune -n "__fish_gputune_using_subcommand topo" -l format -d 'Output format' -r -f -a "table\t''
json\t''"
complete -c gputune -n "__fish_gputune_using_subcommand topo" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand topo" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_using_subcommand pin" -l local-rank -d 'The GPU index to bind to [default: $LOCAL_RANK, as torchrun, Slurm and Open MPI set it]' -r
complete -c gputune -n "__fish_gputune_using_subcommand pin" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand pin" -s v -l verbose -d 'Say which CPUs and memory nodes the command was bound to'
complete -c gputune -n "__fish_gputune_using_subcommand pin" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and not __fish_seen_subcommand_from allreduce allgather reducescatter broadcast help" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand bench; and not __fish_seen_subcommand_from allreduce allgather reducescatter broadcast help" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and not __fish_seen_subcommand_from allreduce allgather reducescatter broadcast help" -f -a "allreduce" -d 'AllReduce bandwidth and latency, with nccl-tests-compatible numbers'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and not __fish_seen_subcommand_from allreduce allgather reducescatter broadcast help" -f -a "allgather" -d 'AllGather (FSDP\'s parameter gathering), as nccl-tests\' all_gather_perf: the size is the gathered whole, busbw = algbw · (n−1)/n'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and not __fish_seen_subcommand_from allreduce allgather reducescatter broadcast help" -f -a "reducescatter" -d 'ReduceScatter (FSDP\'s gradient sharding), as nccl-tests\' reduce_scatter_perf: the size is the whole before scattering, busbw = algbw · (n−1)/n'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and not __fish_seen_subcommand_from allreduce allgather reducescatter broadcast help" -f -a "broadcast" -d 'Broadcast from rank 0, as nccl-tests\' broadcast_perf: busbw = algbw'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and not __fish_seen_subcommand_from allreduce allgather reducescatter broadcast help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l backend -d 'Which transport to measure: NCCL on GPUs, or TCP between CPU ranks. `auto` uses NCCL when a GPU and libnccl.so.2 are usable, and says why when it falls back to TCP' -r -f -a "auto\t''
nccl\t''
tcp\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -s b -l minbytes -d 'Smallest message size (K/M/G are powers of two)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -s e -l maxbytes -d 'Largest message size (K/M/G are powers of two)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -s f -l stepfactor -d 'Multiply the size by this from one row to the next' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -s i -l stepbytes -d 'Add this many bytes from one row to the next, instead of a factor' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -s n -l iters -d 'Timed iterations per size' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -s w -l warmup-iters -d 'Untimed warm-up iterations before each timed run' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -s c -l check -d 'Checked iterations per size (0 prints N/A for #wrong)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -s d -l dtype -d 'Element type' -r -f -a "f32\t''
f16\t''
bf16\t''
f64\t''
i32\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -s o -l op -d 'Reduction operation' -r -f -a "sum\t''
prod\t''
min\t''
max\t''
avg\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l format -d 'Output: the nccl-tests table, or one JSON document' -r -f -a "table\t''
json\t''
prometheus\t'node_exporter textfile gauges in base units (bandwidth in bytes per second); with --output, written atomically for the collector'"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l pairs-threshold -d 'With --pairs: the fraction of the job\'s median pair bandwidth below which a node is slow' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l output -d 'Write the JSON or Prometheus document to FILE (atomically: temp file + rename; missing directories are created)' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l min-busbw -d 'Fail (exit 1) when the average bus bandwidth is below this: GB/s (1e9 bytes/s), or a percentage of what the path can carry, per direction (`80%`: of the link rate of the NICs rank 0 routes to the other hosts through, summed, or for NCCL of the active RDMA ports NCCL_IB_HCA selects; for NCCL on one host, the slowest GPU\'s active NVLinks × the generation\'s rate, else its PCIe link as trained; for TCP on one host, the memory copy rate measured in the run). The table\'s footer and the JSON `reference` say which and how; a percentage with no rate to resolve it against is exit 2' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l profile -d 'Take the threshold from this profile\'s `[bench]` (`min_busbw` for allreduce, `allgather_min_busbw`, `reducescatter_min_busbw`, `broadcast_min_busbw`; `--min-busbw` wins) and judge each size against its `[bench.baseline]`' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l timeout -d 'Seconds any rank may wait for another (rendezvous, a transfer, a barrier) before the job stops with exit 3 naming the missing rank' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l ranks -d 'Start this many local ranks (child processes). Without it, a launcher\'s environment (torchrun, Slurm, Open MPI) is joined; with neither, 2 ranks for TCP, one per GPU for NCCL' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l streams -d 'TCP backend: connections per ring neighbour and direction' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l sockbuf -d 'TCP backend: SO_SNDBUF/SO_RCVBUF for data sockets (0: the kernel\'s autotuning)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l algo -d 'TCP backend: the AllReduce algorithm (auto: recursive doubling for small messages, Rabenseifner for medium, the ring for large)' -r -f -a "auto\t'By size and rank count, as MPI\'s tuned collectives choose'
ring\t'The pipelined ring: 2(n−1) steps of 1/n of the message, for large messages'
rd\t'Recursive doubling: log2(n) exchanges of the whole message, for small messages'
rabenseifner\t'Recursive halving then doubling: log2(n) steps each way, for medium messages'"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -l pairs -d 'Measure disjoint pairs of ranks (one per node) in rounds, at the largest size, and name the nodes whose median pair bandwidth is below --pairs-threshold of the job\'s median'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allreduce" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l backend -d 'Which transport to measure: NCCL on GPUs, or TCP between CPU ranks. `auto` uses NCCL when a GPU and libnccl.so.2 are usable, and says why when it falls back to TCP' -r -f -a "auto\t''
nccl\t''
tcp\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -s b -l minbytes -d 'Smallest message size (K/M/G are powers of two)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -s e -l maxbytes -d 'Largest message size (K/M/G are powers of two)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -s f -l stepfactor -d 'Multiply the size by this from one row to the next' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -s i -l stepbytes -d 'Add this many bytes from one row to the next, instead of a factor' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -s n -l iters -d 'Timed iterations per size' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -s w -l warmup-iters -d 'Untimed warm-up iterations before each timed run' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -s c -l check -d 'Checked iterations per size (0 prints N/A for #wrong)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -s d -l dtype -d 'Element type' -r -f -a "f32\t''
f16\t''
bf16\t''
f64\t''
i32\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -s o -l op -d 'Reduction operation' -r -f -a "sum\t''
prod\t''
min\t''
max\t''
avg\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l format -d 'Output: the nccl-tests table, or one JSON document' -r -f -a "table\t''
json\t''
prometheus\t'node_exporter textfile gauges in base units (bandwidth in bytes per second); with --output, written atomically for the collector'"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l pairs-threshold -d 'With --pairs: the fraction of the job\'s median pair bandwidth below which a node is slow' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l output -d 'Write the JSON or Prometheus document to FILE (atomically: temp file + rename; missing directories are created)' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l min-busbw -d 'Fail (exit 1) when the average bus bandwidth is below this: GB/s (1e9 bytes/s), or a percentage of what the path can carry, per direction (`80%`: of the link rate of the NICs rank 0 routes to the other hosts through, summed, or for NCCL of the active RDMA ports NCCL_IB_HCA selects; for NCCL on one host, the slowest GPU\'s active NVLinks × the generation\'s rate, else its PCIe link as trained; for TCP on one host, the memory copy rate measured in the run). The table\'s footer and the JSON `reference` say which and how; a percentage with no rate to resolve it against is exit 2' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l profile -d 'Take the threshold from this profile\'s `[bench]` (`min_busbw` for allreduce, `allgather_min_busbw`, `reducescatter_min_busbw`, `broadcast_min_busbw`; `--min-busbw` wins) and judge each size against its `[bench.baseline]`' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l timeout -d 'Seconds any rank may wait for another (rendezvous, a transfer, a barrier) before the job stops with exit 3 naming the missing rank' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l ranks -d 'Start this many local ranks (child processes). Without it, a launcher\'s environment (torchrun, Slurm, Open MPI) is joined; with neither, 2 ranks for TCP, one per GPU for NCCL' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l streams -d 'TCP backend: connections per ring neighbour and direction' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l sockbuf -d 'TCP backend: SO_SNDBUF/SO_RCVBUF for data sockets (0: the kernel\'s autotuning)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l algo -d 'TCP backend: the AllReduce algorithm (auto: recursive doubling for small messages, Rabenseifner for medium, the ring for large)' -r -f -a "auto\t'By size and rank count, as MPI\'s tuned collectives choose'
ring\t'The pipelined ring: 2(n−1) steps of 1/n of the message, for large messages'
rd\t'Recursive doubling: log2(n) exchanges of the whole message, for small messages'
rabenseifner\t'Recursive halving then doubling: log2(n) steps each way, for medium messages'"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -l pairs -d 'Measure disjoint pairs of ranks (one per node) in rounds, at the largest size, and name the nodes whose median pair bandwidth is below --pairs-threshold of the job\'s median'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from allgather" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l backend -d 'Which transport to measure: NCCL on GPUs, or TCP between CPU ranks. `auto` uses NCCL when a GPU and libnccl.so.2 are usable, and says why when it falls back to TCP' -r -f -a "auto\t''
nccl\t''
tcp\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -s b -l minbytes -d 'Smallest message size (K/M/G are powers of two)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -s e -l maxbytes -d 'Largest message size (K/M/G are powers of two)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -s f -l stepfactor -d 'Multiply the size by this from one row to the next' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -s i -l stepbytes -d 'Add this many bytes from one row to the next, instead of a factor' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -s n -l iters -d 'Timed iterations per size' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -s w -l warmup-iters -d 'Untimed warm-up iterations before each timed run' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -s c -l check -d 'Checked iterations per size (0 prints N/A for #wrong)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -s d -l dtype -d 'Element type' -r -f -a "f32\t''
f16\t''
bf16\t''
f64\t''
i32\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -s o -l op -d 'Reduction operation' -r -f -a "sum\t''
prod\t''
min\t''
max\t''
avg\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l format -d 'Output: the nccl-tests table, or one JSON document' -r -f -a "table\t''
json\t''
prometheus\t'node_exporter textfile gauges in base units (bandwidth in bytes per second); with --output, written atomically for the collector'"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l pairs-threshold -d 'With --pairs: the fraction of the job\'s median pair bandwidth below which a node is slow' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l output -d 'Write the JSON or Prometheus document to FILE (atomically: temp file + rename; missing directories are created)' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l min-busbw -d 'Fail (exit 1) when the average bus bandwidth is below this: GB/s (1e9 bytes/s), or a percentage of what the path can carry, per direction (`80%`: of the link rate of the NICs rank 0 routes to the other hosts through, summed, or for NCCL of the active RDMA ports NCCL_IB_HCA selects; for NCCL on one host, the slowest GPU\'s active NVLinks × the generation\'s rate, else its PCIe link as trained; for TCP on one host, the memory copy rate measured in the run). The table\'s footer and the JSON `reference` say which and how; a percentage with no rate to resolve it against is exit 2' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l profile -d 'Take the threshold from this profile\'s `[bench]` (`min_busbw` for allreduce, `allgather_min_busbw`, `reducescatter_min_busbw`, `broadcast_min_busbw`; `--min-busbw` wins) and judge each size against its `[bench.baseline]`' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l timeout -d 'Seconds any rank may wait for another (rendezvous, a transfer, a barrier) before the job stops with exit 3 naming the missing rank' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l ranks -d 'Start this many local ranks (child processes). Without it, a launcher\'s environment (torchrun, Slurm, Open MPI) is joined; with neither, 2 ranks for TCP, one per GPU for NCCL' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l streams -d 'TCP backend: connections per ring neighbour and direction' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l sockbuf -d 'TCP backend: SO_SNDBUF/SO_RCVBUF for data sockets (0: the kernel\'s autotuning)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l algo -d 'TCP backend: the AllReduce algorithm (auto: recursive doubling for small messages, Rabenseifner for medium, the ring for large)' -r -f -a "auto\t'By size and rank count, as MPI\'s tuned collectives choose'
ring\t'The pipelined ring: 2(n−1) steps of 1/n of the message, for large messages'
rd\t'Recursive doubling: log2(n) exchanges of the whole message, for small messages'
rabenseifner\t'Recursive halving then doubling: log2(n) steps each way, for medium messages'"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -l pairs -d 'Measure disjoint pairs of ranks (one per node) in rounds, at the largest size, and name the nodes whose median pair bandwidth is below --pairs-threshold of the job\'s median'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from reducescatter" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l backend -d 'Which transport to measure: NCCL on GPUs, or TCP between CPU ranks. `auto` uses NCCL when a GPU and libnccl.so.2 are usable, and says why when it falls back to TCP' -r -f -a "auto\t''
nccl\t''
tcp\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -s b -l minbytes -d 'Smallest message size (K/M/G are powers of two)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -s e -l maxbytes -d 'Largest message size (K/M/G are powers of two)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -s f -l stepfactor -d 'Multiply the size by this from one row to the next' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -s i -l stepbytes -d 'Add this many bytes from one row to the next, instead of a factor' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -s n -l iters -d 'Timed iterations per size' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -s w -l warmup-iters -d 'Untimed warm-up iterations before each timed run' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -s c -l check -d 'Checked iterations per size (0 prints N/A for #wrong)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -s d -l dtype -d 'Element type' -r -f -a "f32\t''
f16\t''
bf16\t''
f64\t''
i32\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -s o -l op -d 'Reduction operation' -r -f -a "sum\t''
prod\t''
min\t''
max\t''
avg\t''"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l format -d 'Output: the nccl-tests table, or one JSON document' -r -f -a "table\t''
json\t''
prometheus\t'node_exporter textfile gauges in base units (bandwidth in bytes per second); with --output, written atomically for the collector'"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l pairs-threshold -d 'With --pairs: the fraction of the job\'s median pair bandwidth below which a node is slow' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l output -d 'Write the JSON or Prometheus document to FILE (atomically: temp file + rename; missing directories are created)' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l min-busbw -d 'Fail (exit 1) when the average bus bandwidth is below this: GB/s (1e9 bytes/s), or a percentage of what the path can carry, per direction (`80%`: of the link rate of the NICs rank 0 routes to the other hosts through, summed, or for NCCL of the active RDMA ports NCCL_IB_HCA selects; for NCCL on one host, the slowest GPU\'s active NVLinks × the generation\'s rate, else its PCIe link as trained; for TCP on one host, the memory copy rate measured in the run). The table\'s footer and the JSON `reference` say which and how; a percentage with no rate to resolve it against is exit 2' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l profile -d 'Take the threshold from this profile\'s `[bench]` (`min_busbw` for allreduce, `allgather_min_busbw`, `reducescatter_min_busbw`, `broadcast_min_busbw`; `--min-busbw` wins) and judge each size against its `[bench.baseline]`' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l timeout -d 'Seconds any rank may wait for another (rendezvous, a transfer, a barrier) before the job stops with exit 3 naming the missing rank' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l ranks -d 'Start this many local ranks (child processes). Without it, a launcher\'s environment (torchrun, Slurm, Open MPI) is joined; with neither, 2 ranks for TCP, one per GPU for NCCL' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l streams -d 'TCP backend: connections per ring neighbour and direction' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l sockbuf -d 'TCP backend: SO_SNDBUF/SO_RCVBUF for data sockets (0: the kernel\'s autotuning)' -r
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l algo -d 'TCP backend: the AllReduce algorithm (auto: recursive doubling for small messages, Rabenseifner for medium, the ring for large)' -r -f -a "auto\t'By size and rank count, as MPI\'s tuned collectives choose'
ring\t'The pipelined ring: 2(n−1) steps of 1/n of the message, for large messages'
rd\t'Recursive doubling: log2(n) exchanges of the whole message, for small messages'
rabenseifner\t'Recursive halving then doubling: log2(n) steps each way, for medium messages'"
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -l pairs -d 'Measure disjoint pairs of ranks (one per node) in rounds, at the largest size, and name the nodes whose median pair bandwidth is below --pairs-threshold of the job\'s median'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from broadcast" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "allreduce" -d 'AllReduce bandwidth and latency, with nccl-tests-compatible numbers'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "allgather" -d 'AllGather (FSDP\'s parameter gathering), as nccl-tests\' all_gather_perf: the size is the gathered whole, busbw = algbw · (n−1)/n'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "reducescatter" -d 'ReduceScatter (FSDP\'s gradient sharding), as nccl-tests\' reduce_scatter_perf: the size is the whole before scattering, busbw = algbw · (n−1)/n'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "broadcast" -d 'Broadcast from rank 0, as nccl-tests\' broadcast_perf: busbw = algbw'
complete -c gputune -n "__fish_gputune_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gputune -n "__fish_gputune_using_subcommand health" -l profile -d 'Profile name or TOML file [default: chosen from the node, as audit does]' -r
complete -c gputune -n "__fish_gputune_using_subcommand health" -l format -d 'Output: `text` (NHC style) or `npd` (node-problem-detector plugin: exit 0 OK, 1 problem, 2 unknown, one short line)' -r -f -a "text\t''
npd\t''"
complete -c gputune -n "__fish_gputune_using_subcommand health" -l timeout -d 'The most seconds the checks may take in all; an area that hangs is reported as an error naming it' -r
complete -c gputune -n "__fish_gputune_using_subcommand health" -l skip -d 'Do not judge these checks (an ID covers its subjects, as in `audit --skip`)' -r
complete -c gputune -n "__fish_gputune_using_subcommand health" -l since -d 'Judge NVIDIA Xid events in the kernel log from TIME instead of boot: @SECONDS, a duration ago (30m, 2h, 1d) or a UTC time (2026-11-25 14:00)' -r
complete -c gputune -n "__fish_gputune_using_subcommand health" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand health" -l slurm -d 'Drain the node in Slurm when a check fails (reason "gputune: ..."), and resume it once it passes if gputune drained it'
complete -c gputune -n "__fish_gputune_using_subcommand health" -l strict -d 'Treat warnings as failures'
complete -c gputune -n "__fish_gputune_using_subcommand health" -l as-job -d 'Judge this process\'s own resource limits as the job\'s, as when run by the job itself (a TaskProlog, a step of the job). Without it, health run by slurmd (SLURMD_NODENAME set, SLURM_PROCID not) judges what a job gets: the login session\'s limits as slurm.conf\'s PropagateResourceLimits passes them on, and slurmd\'s for the rest'
complete -c gputune -n "__fish_gputune_using_subcommand health" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_using_subcommand fleet" -l format -d 'Output format' -r -f -a "table\t''
json\t''
prometheus\t''"
complete -c gputune -n "__fish_gputune_using_subcommand fleet" -l output -d 'Write the result to FILE (atomically; missing directories are created) instead of stdout' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand fleet" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand fleet" -l failing -d 'Print only the hostlist of the nodes that fail a check (for scontrol or pdsh -w)'
complete -c gputune -n "__fish_gputune_using_subcommand fleet" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_using_subcommand explain" -l format -d 'Output format' -r -f -a "text\t''
json\t''"
complete -c gputune -n "__fish_gputune_using_subcommand explain" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand explain" -l check -d 'Run the checks each problem (or possible cause) names on this node (or --root) and say whether the node confirms or refutes it; also flag what NCCL left unused here (active RDMA ports, nvidia_peermem, NVLink)'
complete -c gputune -n "__fish_gputune_using_subcommand explain" -s h -l help -d 'Print help'
complete -c gputune -n "__fish_gputune_using_subcommand preflight" -l timeout -d 'Hard deadline in seconds for the whole check, on every rank: a rank that has not joined by then is reported missing' -r
complete -c gputune -n "__fish_gputune_using_subcommand preflight" -l format -d 'Output format (rank 0\'s report; the other ranks print one line each)' -r -f -a "table\t''
json\t''
html\t'One self-contained page: the reachability matrix and, with --pairs-report, bandwidth'"
complete -c gputune -n "__fish_gputune_using_subcommand preflight" -l output -d 'Write rank 0\'s report to FILE (atomically) instead of stdout' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand preflight" -l pairs-report -d '`bench allreduce --pairs --format json` output, drawn as a bandwidth heat map in the HTML page' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand preflight" -l root -d 'Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a fixture tree or a mounted golden image' -r -F
complete -c gputune -n "__fish_gputune_using_subcommand preflight" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "audit" -d 'Check the node against a profile and report every finding with its fix'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "apply" -d 'Apply a profile: preview, journal, apply, verify and persist'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "rollback" -d 'Restore the values saved by the last apply'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "status" -d 'What gputune applied here, when and by whom, and whether it still holds (exit 1 when something drifted)'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "profiles" -d 'List profiles, or show one fully resolved'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "topo" -d 'Show GPUs, NICs, NUMA nodes, CPU lists, PCIe links and their affinity'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "pin" -d 'Run a command bound to the CPUs and memory local to its GPU'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "bench" -d 'Benchmark collectives across the node\'s GPUs and between nodes'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "health" -d 'Audit as a Slurm health check or node-problem-detector plugin; drain/resume with --slurm'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "fleet" -d 'Compare many nodes\' audit reports: value groups per check and fact, nodes as hostlists'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "explain" -d 'Explain an NCCL/PyTorch log: what NCCL did, each problem\'s cause, fix and checks'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "preflight" -d 'Run by the job\'s launcher on every node: will this job start? Names, MASTER_ADDR, NCCL\'s interface, versions that must agree, every pair\'s ports'
complete -c gputune -n "__fish_gputune_using_subcommand help; and not __fish_seen_subcommand_from audit apply rollback status profiles topo pin bench health fleet explain preflight help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gputune -n "__fish_gputune_using_subcommand help; and __fish_seen_subcommand_from profiles" -f -a "list" -d 'List built-in and site profiles (/etc/gputune/profiles wins on a name clash)'
complete -c gputune -n "__fish_gputune_using_subcommand help; and __fish_seen_subcommand_from profiles" -f -a "show" -d 'Print a profile fully resolved (includes merged), each setting with its origin'
complete -c gputune -n "__fish_gputune_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "allreduce" -d 'AllReduce bandwidth and latency, with nccl-tests-compatible numbers'
complete -c gputune -n "__fish_gputune_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "allgather" -d 'AllGather (FSDP\'s parameter gathering), as nccl-tests\' all_gather_perf: the size is the gathered whole, busbw = algbw · (n−1)/n'
complete -c gputune -n "__fish_gputune_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "reducescatter" -d 'ReduceScatter (FSDP\'s gradient sharding), as nccl-tests\' reduce_scatter_perf: the size is the whole before scattering, busbw = algbw · (n−1)/n'
complete -c gputune -n "__fish_gputune_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "broadcast" -d 'Broadcast from rank 0, as nccl-tests\' broadcast_perf: busbw = algbw'

# Profile names for --profile and `profiles show`, asked of gputune itself.
complete -c gputune -l profile -a '(gputune profiles list --names 2>/dev/null)'
complete -c gputune -n "__fish_gputune_using_subcommand profiles; and __fish_seen_subcommand_from show" -a '(gputune profiles list --names 2>/dev/null)'

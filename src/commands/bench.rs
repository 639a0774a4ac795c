//! `gputune bench allreduce`: the flags (nccl-tests' short names where they exist), checked
//! without touching the host, then handed to [`crate::bench::job`].

use std::time::Duration;

use clap::{Args, Subcommand};

use crate::bench::BenchError;
use crate::bench::control::launch;
use crate::bench::job::{self, Choice, Format, Job};
use crate::bench::measure::collective::Collective;
use crate::bench::measure::data::{DType, Op};
use crate::bench::measure::harness::Sweep;
use crate::bench::measure::size::{self, SizeStep};
use crate::bench::{Algo, Settings};
use crate::error::{ExitCode, Result};
use crate::host::Root;
use crate::profile::Threshold;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// AllReduce bandwidth and latency, with nccl-tests-compatible numbers.
    Allreduce(CollectiveArgs),
    /// AllGather (FSDP's parameter gathering), as nccl-tests' all_gather_perf: the size is
    /// the gathered whole, busbw = algbw · (n−1)/n.
    Allgather(CollectiveArgs),
    /// ReduceScatter (FSDP's gradient sharding), as nccl-tests' reduce_scatter_perf: the
    /// size is the whole before scattering, busbw = algbw · (n−1)/n.
    Reducescatter(CollectiveArgs),
    /// Broadcast from rank 0, as nccl-tests' broadcast_perf: busbw = algbw.
    Broadcast(CollectiveArgs),
}

impl BenchCommand {
    /// The collective and its flags.
    pub fn collective(&self) -> (Collective, &CollectiveArgs) {
        match self {
            BenchCommand::Allreduce(a) => (Collective::AllReduce, a),
            BenchCommand::Allgather(a) => (Collective::AllGather, a),
            BenchCommand::Reducescatter(a) => (Collective::ReduceScatter, a),
            BenchCommand::Broadcast(a) => (Collective::Broadcast, a),
        }
    }
}

#[derive(Debug, Args)]
pub struct CollectiveArgs {
    /// Which transport to measure: NCCL on GPUs, or TCP between CPU ranks. `auto` uses NCCL
    /// when a GPU and libnccl.so.2 are usable, and says why when it falls back to TCP.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Choice,
    /// Smallest message size (K/M/G are powers of two).
    #[arg(
        short = 'b',
        long = "minbytes",
        default_value = "8",
        value_name = "SIZE"
    )]
    pub min_bytes: String,
    /// Largest message size (K/M/G are powers of two).
    #[arg(
        short = 'e',
        long = "maxbytes",
        default_value = "128M",
        value_name = "SIZE"
    )]
    pub max_bytes: String,
    /// Multiply the size by this from one row to the next.
    #[arg(
        short = 'f',
        long = "stepfactor",
        value_name = "FACTOR",
        conflicts_with = "step_bytes"
    )]
    pub step_factor: Option<u64>,
    /// Add this many bytes from one row to the next, instead of a factor.
    #[arg(short = 'i', long = "stepbytes", value_name = "SIZE")]
    pub step_bytes: Option<String>,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20, value_name = "N")]
    pub iters: usize,
    /// Untimed warm-up iterations before each timed run.
    #[arg(
        short = 'w',
        long = "warmup-iters",
        default_value_t = 1,
        value_name = "N"
    )]
    pub warmup: usize,
    /// Checked iterations per size (0 prints N/A for #wrong).
    #[arg(short = 'c', long = "check", default_value_t = 1, value_name = "N")]
    pub check: usize,
    /// Element type.
    #[arg(short = 'd', long = "dtype", value_enum, default_value = "f32")]
    pub dtype: DType,
    /// Reduction operation.
    #[arg(short = 'o', long = "op", value_enum, default_value = "sum")]
    pub op: Op,
    /// Output: the nccl-tests table, or one JSON document.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Measure disjoint pairs of ranks (one per node) in rounds, at the largest size, and name
    /// the nodes whose median pair bandwidth is below --pairs-threshold of the job's median.
    #[arg(long)]
    pub pairs: bool,
    /// With --pairs: the fraction of the job's median pair bandwidth below which a node is slow.
    #[arg(long, default_value_t = 0.8, value_name = "FRACTION")]
    pub pairs_threshold: f64,
    /// Write the JSON or Prometheus document to FILE (atomically: temp file + rename;
    /// missing directories are created).
    #[arg(long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Fail (exit 1) when the average bus bandwidth is below this: GB/s (1e9 bytes/s), or a
    /// percentage of what the path can carry, per direction (`80%`: of the link rate of the
    /// NICs rank 0 routes to the other hosts through, summed, or for NCCL of the active RDMA
    /// ports NCCL_IB_HCA selects; for NCCL on one host, the
    /// slowest GPU's active NVLinks × the generation's rate, else its PCIe link as trained;
    /// for TCP on one host, the memory copy rate measured in the run). The table's footer and
    /// the JSON `reference` say which and how; a percentage with no rate to resolve it
    /// against is exit 2.
    #[arg(
        long = "min-busbw",
        value_name = "GBPS|PCT%",
        allow_negative_numbers = true
    )]
    pub min_busbw: Option<String>,
    /// Take the threshold from this profile's `[bench]` (`min_busbw` for allreduce,
    /// `allgather_min_busbw`, `reducescatter_min_busbw`, `broadcast_min_busbw`; `--min-busbw`
    /// wins) and judge each size against its `[bench.baseline]`.
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: Option<String>,
    /// Seconds any rank may wait for another (rendezvous, a transfer, a barrier) before the
    /// job stops with exit 3 naming the missing rank.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    pub timeout: u64,
    /// Start this many local ranks (child processes). Without it, a launcher's environment
    /// (torchrun, Slurm, Open MPI) is joined; with neither, 2 ranks for TCP, one per GPU for NCCL.
    #[arg(long, value_name = "N")]
    pub ranks: Option<usize>,
    /// TCP backend: connections per ring neighbour and direction.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub streams: usize,
    /// TCP backend: SO_SNDBUF/SO_RCVBUF for data sockets (0: the kernel's autotuning).
    #[arg(long, default_value = "0", value_name = "SIZE")]
    pub sockbuf: String,
    /// TCP backend: the AllReduce algorithm (auto: recursive doubling for small messages,
    /// Rabenseifner for medium, the ring for large).
    #[arg(long, value_enum, default_value = "auto")]
    pub algo: Algo,
}

/// Checks the flags (no I/O) and builds the job.
pub fn validate(
    collective: Collective,
    args: &CollectiveArgs,
) -> std::result::Result<Job, BenchError> {
    let usage = |m: String| BenchError::Usage(m);
    let size_flag =
        |flag: &str, text: &str| size::parse_size(text).map_err(|e| usage(format!("{flag}: {e}")));
    let min = size_flag("-b/--minbytes", &args.min_bytes)?;
    let max = size_flag("-e/--maxbytes", &args.max_bytes)?;
    if max < min {
        return Err(usage(format!(
            "-e/--maxbytes ({max}) is smaller than -b/--minbytes ({min})"
        )));
    }
    if max > 64 << 30 {
        return Err(usage(format!(
            "-e/--maxbytes: {max} bytes is over the 64G limit"
        )));
    }
    let step = match (&args.step_bytes, args.step_factor) {
        (Some(i), _) => {
            let i = size_flag("-i/--stepbytes", i)?;
            if i == 0 {
                return Err(usage("-i/--stepbytes must be at least 1".into()));
            }
            SizeStep::Increment(i)
        }
        (None, Some(f)) if f < 2 => {
            return Err(usage(format!(
                "-f/--stepfactor must be at least 2, not {f}"
            )));
        }
        (None, f) => SizeStep::Factor(f.unwrap_or(2)),
    };
    // Counted before the list is built: `-b 1 -e 1G -i 1` must not allocate a billion sizes.
    if let SizeStep::Increment(i) = step
        && (max - min) / i >= 10_000
    {
        return Err(usage(format!(
            "{} sizes from -b to -e: raise -i",
            (max - min) / i + 1
        )));
    }
    if args.iters == 0 {
        return Err(usage("-n/--iters must be at least 1".into()));
    }
    if args.timeout == 0 {
        return Err(usage("--timeout must be at least 1 second".into()));
    }
    if args.ranks == Some(0) || args.ranks.is_some_and(|r| r > launch::MAX_WORLD) {
        return Err(usage(format!(
            "--ranks must be between 1 and {}",
            launch::MAX_WORLD
        )));
    }
    if !(1..=64).contains(&args.streams) {
        return Err(usage("--streams must be between 1 and 64".into()));
    }
    let min_busbw = match &args.min_busbw {
        Some(m) => Some(Threshold::parse(m).map_err(|e| usage(format!("--min-busbw: {e}")))?),
        None => None,
    };
    if args.output.is_some() && args.format == Format::Table {
        return Err(usage(
            "--output needs --format json or prometheus (the table is printed as it runs)".into(),
        ));
    }
    if !(args.pairs_threshold > 0.0 && args.pairs_threshold <= 1.0) {
        return Err(usage(format!(
            "--pairs-threshold must be a fraction in (0, 1], not {}",
            args.pairs_threshold
        )));
    }
    if args.pairs && collective != Collective::AllReduce {
        return Err(usage(format!(
            "--pairs measures AllReduce only, not {}",
            collective.name()
        )));
    }
    if args.pairs && args.format == Format::Prometheus {
        return Err(usage(
            "--pairs prints a table or JSON, not Prometheus gauges".into(),
        ));
    }
    let sockbuf = size_flag("--sockbuf", &args.sockbuf)?;
    if sockbuf > 1 << 30 {
        return Err(usage("--sockbuf: at most 1G".into()));
    }
    let settings = Settings {
        sweep: Sweep {
            collective,
            min_bytes: min,
            max_bytes: max,
            step,
            dtype: args.dtype,
            op: args.op,
            iters: args.iters,
            warmup: args.warmup,
            check: args.check,
        },
        backend: args.backend,
        streams: args.streams,
        sockbuf,
        algo: args.algo,
    };
    Ok(Job {
        settings,
        choice: args.backend,
        format: args.format,
        output: args.output.clone(),
        pairs: args.pairs,
        pairs_fraction: args.pairs_threshold,
        min_busbw: min_busbw.map(|m| (m, "--min-busbw".to_string())),
        baseline: None,
        timeout: Duration::from_secs(args.timeout),
        ranks: args.ranks,
    })
}

pub(crate) fn run(args: &BenchArgs, root: &Root) -> Result<ExitCode> {
    let (collective, a) = args.command.collective();
    let mut job = validate(collective, a)?;
    if let Some(name) = &a.profile {
        let (profile, _) = super::audit::load_profile(Some(name), root)?;
        let index = match collective {
            Collective::AllReduce => 0,
            Collective::AllGather => 1,
            Collective::ReduceScatter => 2,
            Collective::Broadcast => 3,
        };
        let (key, min) = profile.bench.thresholds()[index];
        if job.min_busbw.is_none() {
            job.min_busbw = min.map(|m| (*m, format!("profile {name} [bench] {key}")));
        }
        let (key, baseline) = profile.bench.baselines()[index];
        job.baseline = baseline.map(|b| (b.clone(), format!("profile {name} [bench.{key}]")));
    }
    job::run(&job, root).map_err(|e| match e {
        // The one error type knows how to keep a broken pipe quiet.
        BenchError::Stdout(io) => crate::error::Error::Stdout(io),
        other => other.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> std::result::Result<Job, BenchError> {
        let mut full = vec!["gputune", "bench", "allreduce"];
        full.extend_from_slice(args);
        let cli = crate::cli::Cli::try_parse_from(full).unwrap();
        let crate::cli::Command::Bench(b) = cli.command else {
            panic!()
        };
        let (collective, a) = b.command.collective();
        validate(collective, a)
    }

    #[test]
    fn good_flags() {
        let job = parse(&[
            "-b",
            "8",
            "-e",
            "1K",
            "-f",
            "4",
            "-n",
            "5",
            "-w",
            "0",
            "-c",
            "2",
            "-d",
            "bf16",
            "-o",
            "avg",
            "--min-busbw",
            "1.5",
        ])
        .unwrap();
        assert_eq!(job.settings.sweep.sizes(), [8, 32, 128, 512]);
        assert_eq!(
            (
                job.settings.sweep.iters,
                job.settings.sweep.warmup,
                job.settings.sweep.check
            ),
            (5, 0, 2)
        );
        assert_eq!(
            (job.settings.sweep.dtype, job.settings.sweep.op),
            (DType::Bf16, Op::Avg)
        );
        assert_eq!(job.min_busbw.unwrap().0, Threshold::Gbps(1.5));
        let pct = parse(&["--min-busbw", "80%"]).unwrap();
        assert_eq!(pct.min_busbw.unwrap().0, Threshold::Fraction(0.8));
        let stepped = parse(&["-b", "1K", "-e", "4K", "-i", "1K"]).unwrap();
        assert_eq!(stepped.settings.sweep.sizes(), [1024, 2048, 3072, 4096]);
    }

    #[test]
    fn bad_flags_name_the_flag() {
        let cases: &[(&[&str], &str)] = &[
            (&["-b", "8X"], "-b/--minbytes"),
            (&["-e", "lots"], "-e/--maxbytes"),
            (&["-b", "1M", "-e", "1K"], "smaller than -b"),
            (&["-f", "1"], "-f/--stepfactor"),
            (&["-i", "0"], "-i/--stepbytes"),
            (&["-n", "0"], "-n/--iters"),
            (&["--timeout", "0"], "--timeout"),
            (&["--ranks", "0"], "--ranks"),
            (&["--streams", "0"], "--streams"),
            (&["--min-busbw", "-1"], "--min-busbw"),
            (&["--min-busbw", "120%"], "--min-busbw"),
            (&["--min-busbw", "fast"], "--min-busbw"),
            (&["--sockbuf", "2G"], "--sockbuf"),
            (&["--output", "/tmp/x.prom"], "--output needs --format"),
            (&["--pairs-threshold", "1.5"], "--pairs-threshold"),
            (&["--pairs", "--format", "prometheus"], "--pairs prints"),
            (&["-b", "1", "-e", "1G", "-i", "1"], "sizes from -b to -e"),
        ];
        for (args, want) in cases {
            let err = parse(args).unwrap_err();
            assert_eq!(err.exit_code(), ExitCode::Usage, "{args:?}");
            assert!(err.to_string().contains(want), "{args:?}: {err}");
        }
    }
}

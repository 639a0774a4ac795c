//! Joining a job started by an external launcher: who this rank is, how many ranks there are,
//! where rank 0's rendezvous listens, and the job's token. Pure: it reads a map of variables,
//! so every launcher's environment is a table test.

use std::collections::BTreeMap;

/// torchrun's default rendezvous port, used when only `MASTER_ADDR` is set.
pub(crate) const DEFAULT_PORT: u16 = 29500;
/// The most ranks a job may have, from `--ranks` or a launcher's world size alike: rank 0
/// keeps a connection and a thread per rank, so a typo'd size must not reach it.
pub(crate) const MAX_WORLD: usize = 1024;
/// Set by `--ranks` in the ranks it starts, and by users who want an explicit job secret.
pub(crate) const TOKEN_VAR: &str = "GPUTUNE_BENCH_TOKEN";

/// Which launcher's variables were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Launcher {
    /// `RANK`/`WORLD_SIZE` (torchrun, and `--ranks` itself).
    Torchrun,
    Slurm,
    OpenMpi,
}

/// This process's place in a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobEnv {
    pub launcher: Launcher,
    pub rank: usize,
    pub world: usize,
    pub local_rank: usize,
    /// Rank 0's rendezvous: host and port.
    pub master: (String, u16),
    pub token: String,
}

/// A variable is missing or malformed; the message names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct EnvError(pub String);

/// Reads the job from the environment, or `None` when no launcher's variables are set.
pub(crate) fn from_vars(vars: &BTreeMap<String, String>) -> Result<Option<JobEnv>, EnvError> {
    from_vars_up_to(vars, MAX_WORLD)
}

/// [`from_vars`] with another limit on the world size (`preflight` keeps no thread per rank).
pub(crate) fn from_vars_up_to(
    vars: &BTreeMap<String, String>,
    max_world: usize,
) -> Result<Option<JobEnv>, EnvError> {
    let get = |k: &str| vars.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let (launcher, rank_var, size_var, local_var) =
        if get("RANK").is_some() || get("WORLD_SIZE").is_some() {
            (Launcher::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK")
        } else if get("SLURM_PROCID").is_some() {
            (
                Launcher::Slurm,
                "SLURM_PROCID",
                "SLURM_NTASKS",
                "SLURM_LOCALID",
            )
        } else if get("OMPI_COMM_WORLD_RANK").is_some() {
            (
                Launcher::OpenMpi,
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
            )
        } else {
            return Ok(None);
        };
    let number = |name: &str| -> Result<usize, EnvError> {
        let text = get(name).ok_or_else(|| {
            EnvError(format!(
                "{name} is not set (the launcher sets {rank_var}, so it must set {name} too)"
            ))
        })?;
        text.parse()
            .map_err(|_| EnvError(format!("{name}={text} is not a whole number")))
    };
    let rank = number(rank_var)?;
    let world = number(size_var)?;
    if world == 0 {
        return Err(EnvError(format!(
            "{size_var}=0: a job needs at least one rank"
        )));
    }
    if world > max_world {
        return Err(EnvError(format!(
            "{size_var}={world} is over the limit of {max_world} ranks"
        )));
    }
    if rank >= world {
        return Err(EnvError(format!(
            "{rank_var}={rank} is not below {size_var}={world}"
        )));
    }
    let local_rank = match get(local_var) {
        Some(_) => number(local_var)?,
        None => 0,
    };
    let port =
        match get("MASTER_PORT") {
            Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                EnvError(format!("MASTER_PORT={p} is not a port number (1-65535)"))
            })?),
            None => None,
        };
    let master = match get("MASTER_ADDR") {
        Some(addr) => (addr.to_string(), port.unwrap_or(DEFAULT_PORT)),
        None if world == 1 => ("127.0.0.1".to_string(), 0),
        None if launcher == Launcher::Slurm => slurm_master(&get, port)?,
        None => {
            return Err(EnvError(
                "MASTER_ADDR is not set: export the address of rank 0's host \
                 and optionally MASTER_PORT (default 29500)"
                    .to_string(),
            ));
        }
    };
    let token = match get(TOKEN_VAR) {
        Some(t) => t.to_string(),
        None => derived_token(vars, world, &master),
    };
    Ok(Some(JobEnv {
        launcher,
        rank,
        world,
        local_rank,
        master,
        token,
    }))
}

/// Under Slurm, the ports rank 0 listens on when `MASTER_PORT` is not set:
/// `SLURM_PORT_BASE + (job id × 131 + step id) mod SLURM_PORT_SPAN`, so two steps of one job
/// and most concurrent jobs differ, and the range is the one the profiles open (29500–29549).
pub(crate) const SLURM_PORT_BASE: u16 = 29500;
pub(crate) const SLURM_PORT_SPAN: u16 = 50;

/// Rank 0's host and port from Slurm's own variables: the first host of the step's node list
/// (rank 0 runs there under every distribution Slurm has, as task 0 is placed first), and a
/// port from the job and step ids.
fn slurm_master<'v>(
    get: &impl Fn(&str) -> Option<&'v str>,
    port: Option<u16>,
) -> Result<(String, u16), EnvError> {
    let (var, list) = [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ]
    .into_iter()
    .find_map(|var| get(var).map(|list| (var, list)))
    .ok_or_else(|| {
        EnvError(
            "MASTER_ADDR is not set and neither is SLURM_STEP_NODELIST or \
                 SLURM_JOB_NODELIST: run under srun, or export MASTER_ADDR"
                .to_string(),
        )
    })?;
    let host = super::hostlist::first(list).map_err(|e| EnvError(format!("{var}: {e}")))?;
    let port = match port {
        Some(port) => port,
        None => {
            let id = |name: &str| -> Result<u64, EnvError> {
                let text = get(name).ok_or_else(|| {
                    EnvError(format!(
                        "{name} is not set: it picks the rendezvous port (or export MASTER_PORT)"
                    ))
                })?;
                // Batch and interactive steps have names, not numbers; they count as 0.
                match text {
                    "batch" | "extern" | "interactive" => Ok(0),
                    _ => text
                        .parse()
                        .map_err(|_| EnvError(format!("{name}={text} is not a whole number"))),
                }
            };
            let job = id("SLURM_JOB_ID")?;
            let step = match get("SLURM_STEP_ID") {
                Some(_) => id("SLURM_STEP_ID")?,
                None => 0,
            };
            let offset = (job.wrapping_mul(131).wrapping_add(step)) % u64::from(SLURM_PORT_SPAN);
            SLURM_PORT_BASE + offset as u16
        }
    };
    Ok((host, port))
}

/// With no explicit token, one built from what every rank of the job sees alike: the world
/// size, the rendezvous address and the launchers' job ids. It keeps a stray rank of another
/// job (or another run on the same port) out; it is not a secret, `GPUTUNE_BENCH_TOKEN` is.
fn derived_token(vars: &BTreeMap<String, String>, world: usize, master: &(String, u16)) -> String {
    let mut token = format!("derived:world={world}:master={}:{}", master.0, master.1);
    for key in [
        "TORCHELASTIC_RUN_ID",
        "SLURM_JOB_ID",
        "SLURM_STEP_ID",
        "OMPI_MCA_ess_base_jobid",
        "PMIX_NAMESPACE",
    ] {
        if let Some(v) = vars.get(key).filter(|v| !v.is_empty()) {
            token.push_str(&format!(":{key}={v}"));
        }
    }
    token
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn launchers() {
        let torchrun = from_vars(&vars(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29501"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (
                torchrun.launcher,
                torchrun.rank,
                torchrun.world,
                torchrun.local_rank
            ),
            (Launcher::Torchrun, 1, 4, 1)
        );
        assert_eq!(torchrun.master, ("10.0.0.1".to_string(), 29501));

        let slurm = from_vars(&vars(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "3"),
            ("SLURM_JOB_ID", "42"),
            ("MASTER_ADDR", "n01"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (slurm.launcher, slurm.rank, slurm.world, slurm.local_rank),
            (Launcher::Slurm, 3, 8, 3)
        );
        assert_eq!(slurm.master.1, DEFAULT_PORT);
        assert!(slurm.token.contains("SLURM_JOB_ID=42"));

        let mpi = from_vars(&vars(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1234"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (mpi.launcher, mpi.rank, mpi.world),
            (Launcher::OpenMpi, 0, 2)
        );

        assert_eq!(from_vars(&vars(&[("PATH", "/bin")])).unwrap(), None);
        // One rank needs no rendezvous address.
        let single = from_vars(&vars(&[("RANK", "0"), ("WORLD_SIZE", "1")]))
            .unwrap()
            .unwrap();
        assert_eq!(single.world, 1);
        let largest = from_vars(&vars(&[
            ("RANK", "1023"),
            ("WORLD_SIZE", "1024"),
            ("MASTER_ADDR", "h"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(largest.world, MAX_WORLD);
    }

    #[test]
    fn slurm_ranks_find_rank_0_with_nothing_exported() {
        let env = |rank: &str, extra: &[(&str, &str)]| {
            let mut v = vars(&[
                ("SLURM_PROCID", rank),
                ("SLURM_NTASKS", "4"),
                ("SLURM_JOB_ID", "1234"),
                ("SLURM_STEP_ID", "2"),
                ("SLURM_STEP_NODELIST", "gpu[03-04,07],io1"),
                ("SLURM_JOB_NODELIST", "gpu[01-09]"),
            ]);
            v.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            from_vars(&v).unwrap().unwrap()
        };
        let port = SLURM_PORT_BASE + ((1234 * 131 + 2) % 50) as u16;
        assert_eq!(env("0", &[]).master, ("gpu03".to_string(), port));
        assert_eq!(env("3", &[]).master, env("0", &[]).master);
        assert_eq!(env("3", &[]).token, env("0", &[]).token);
        assert_eq!(env("1", &[("MASTER_PORT", "40000")]).master.1, 40000);
        assert_eq!(
            env("1", &[("MASTER_ADDR", "10.1.1.1")]).master.0,
            "10.1.1.1"
        );
        // The next step of the job gets another port.
        assert_ne!(env("0", &[("SLURM_STEP_ID", "3")]).master.1, port);
        let job_only = from_vars(&vars(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_NODELIST", "n[1-2]"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            job_only.master,
            ("n1".to_string(), SLURM_PORT_BASE + 7 * 131 % 50)
        );
        for step in 0..200u64 {
            for job in [1u64, 99, 123_456_789, u64::from(u32::MAX)] {
                let p = SLURM_PORT_BASE as u64 + (job * 131 + step) % 50;
                assert!((29500..29550).contains(&p));
            }
        }
    }

    #[test]
    fn plain_torchrun_ranks_derive_the_same_token() {
        let env = |rank: &str| {
            from_vars(&vars(&[
                ("RANK", rank),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "10.0.0.1"),
                ("MASTER_PORT", "29500"),
            ]))
            .unwrap()
            .unwrap()
        };
        assert_eq!(env("0").token, env("1").token);
        assert_eq!(env("1").local_rank, 0);
        let other_port = from_vars(&vars(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29501"),
        ]))
        .unwrap()
        .unwrap();
        assert_ne!(env("0").token, other_port.token);
        let explicit = from_vars(&vars(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            (TOKEN_VAR, "s3cret"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(explicit.token, "s3cret");
    }

    #[test]
    fn bad_environments_name_the_variable() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("RANK", "x"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")],
                "RANK=x",
            ),
            (
                &[("RANK", "2"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")],
                "RANK=2 is not below WORLD_SIZE=2",
            ),
            (&[("RANK", "0"), ("WORLD_SIZE", "0")], "WORLD_SIZE=0"),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "5000000"),
                    ("MASTER_ADDR", "h"),
                ],
                "WORLD_SIZE=5000000 is over the limit of 1024",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "1025"),
                    ("MASTER_ADDR", "h"),
                ],
                "SLURM_NTASKS=1025 is over",
            ),
            (
                &[
                    ("OMPI_COMM_WORLD_RANK", "3"),
                    ("OMPI_COMM_WORLD_SIZE", "100000000"),
                    ("MASTER_ADDR", "h"),
                ],
                "OMPI_COMM_WORLD_SIZE=100000000 is over",
            ),
            (&[("RANK", "0")], "WORLD_SIZE is not set"),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "2")],
                "MASTER_ADDR is not set",
            ),
            (
                &[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")],
                "neither is SLURM_STEP_NODELIST",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_STEP_NODELIST", "n[1-"),
                    ("SLURM_JOB_ID", "1"),
                ],
                "SLURM_STEP_NODELIST: hostlist",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_STEP_NODELIST", "n1"),
                ],
                "SLURM_JOB_ID is not set",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_STEP_NODELIST", "n1"),
                    ("SLURM_JOB_ID", "x1"),
                ],
                "SLURM_JOB_ID=x1",
            ),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "2"),
                    ("MASTER_ADDR", "h"),
                    ("MASTER_PORT", "70000"),
                ],
                "MASTER_PORT=70000",
            ),
            (
                &[
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_LOCALID", "a"),
                    ("MASTER_ADDR", "h"),
                ],
                "SLURM_LOCALID=a",
            ),
        ];
        for (pairs, want) in cases {
            let err = from_vars(&vars(pairs)).unwrap_err().to_string();
            assert!(err.contains(want), "{pairs:?}: {err}");
        }
    }
}

//! Integration tests of `gputune bench`: every collective and algorithm, the rendezvous, network
//! namespaces and pairwise runs, through the built binary.

mod common;

mod bench_allreduce;
mod bench_collectives;
mod bench_context;
mod bench_flood;
mod bench_netns;
mod bench_rendezvous;
mod bench_wrong;
mod pairs_netns;

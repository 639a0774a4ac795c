//! `gputune topo` on real snapshots and built fixtures: what a person reading those trees
//! would see (GPU and NIC counts, NUMA nodes, CPU lists, link widths).

use crate::common;

use serde_json::Value;

fn topo_json(root: &std::path::Path) -> Value {
    let out = common::gputune()
        .args(["topo", "--format", "json", "--root"])
        .arg(root)
        .output()
        .unwrap();
    common::assert_success(&out);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn topo_table(root: &std::path::Path) -> String {
    let out = common::gputune()
        .args(["topo", "--root"])
        .arg(root)
        .output()
        .unwrap();
    common::assert_success(&out);
    String::from_utf8(out.stdout).unwrap()
}

/// The names of the items listed under `key`.
fn names<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    common::column(&v[key], "name")
}

/// How many items are listed under `key`.
fn count(v: &Value, key: &str) -> usize {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} list: {v:#}"))
        .len()
}

/// `gputune topo --format json` of the snapshot in `archive` (under tests/fixtures).
fn snapshot(archive: &str) -> (tempfile::TempDir, std::path::PathBuf, Value) {
    let (dir, root) = common::extract(archive);
    let v = topo_json(&root);
    (dir, root, v)
}

/// The NUMA node with this id.
fn numa_node(v: &Value, id: u64) -> &Value {
    v["numa_nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["id"] == id))
        .unwrap_or_else(|| panic!("no NUMA node {id}: {v:#}"))
}

/// What a POWER9-style node shows, a trimmed tree and hwloc's capture alike: its first GPU
/// at `gpu0`, bound to nvidia, with its memory as NUMA node 255, and node 0 with CPUs 0-15
/// online and 16-87 offline.
fn assert_power9(v: &Value, gpu0: &str) {
    let gpu = &v["gpus"][0];
    assert_eq!(gpu["pci_address"], gpu0);
    assert_eq!(gpu["driver"], "nvidia");
    assert_eq!(gpu["memory_numa_node"], 255);
    assert_eq!(numa_node(v, 0)["cpus"], "0-15");
    assert_eq!(numa_node(v, 0)["offline_cpus"], "16-87");
    assert_eq!(numa_node(v, 255)["gpu_memory_of"], gpu0);
}

/// `gputune --root ROOT pin --local-rank RANK -v -- true`: its exit code and stderr.
fn pin(root: &std::path::Path, rank: &str) -> (Option<i32>, String) {
    let out = common::pin(root)
        .args(["--local-rank", rank, "-v", "--", "true"])
        .output()
        .unwrap();
    (out.status.code(), common::text(&out.stderr))
}

#[test]
fn hgx_node_has_8_gpus_8_nics_2_nodes_and_gpu_nic_pairs_behind_switches() {
    let t = common::hgx(Default::default());
    let v = topo_json(t.root());
    assert_eq!(v["schema_version"], 1);
    let nodes = v["numa_nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0]["cpus"], common::NODE0_CPUS);
    assert_eq!(nodes[1]["cpus"], common::NODE1_CPUS);
    assert_eq!(nodes[0]["memory"], 1_056_000_000u64 * 1024);
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8);
    assert_eq!(gpus[0]["pci_address"], "0000:13:00.0");
    assert_eq!(gpus[4]["numa_node"], 1);
    assert_eq!(gpus[0]["link"]["current_width"], 16);
    assert_eq!(gpus[0]["link"]["max_gts"], 32.0);
    let nics = v["nics"].as_array().unwrap();
    assert_eq!(nics.len(), 8);
    assert_eq!(nics[0]["name"], "ens0np0");
    assert_eq!(nics[0]["speed_mbps"], 400_000);
    assert_eq!(nics[0]["mtu"], 9000);
    assert_eq!(nics[0]["operstate"], "up");
    assert_eq!(nics[0]["driver"], "mlx5_core");
    assert_eq!(nics[0]["rdma"][0], "mlx5_0");
    assert!(nics[0]["firmware"].is_null(), "ethtool is live-only");
    assert_eq!(names(&v, "skipped_nics"), ["lo"]);
    // Matrix: GPU0 reaches GPU1 through the host (other switch, same socket), GPU4 across
    // sockets, its own NIC through the shared switch.
    let m = &v["affinity"];
    assert_eq!(m["columns"].as_array().unwrap().len(), 16);
    let row0: Vec<&str> = m["rows"][0]["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert_eq!(row0[0], "X");
    assert_eq!(row0[1], "NODE");
    assert_eq!(row0[4], "SYS");
    assert_eq!(row0[8], "PIX");
    assert_eq!(row0[9], "NODE");
    assert_eq!(row0[12], "SYS");
    assert_eq!(m["rows"][5]["cpus"], common::NODE1_CPUS);
    assert!(v["nvml_skipped"].as_str().unwrap().contains("--root"));

    let table = topo_table(t.root());
    assert!(table.contains("GPUs: 8"), "{table}");
    assert!(table.contains("NICs: 8"), "{table}");
    assert!(table.contains("Gen5 x16"), "{table}");
    assert!(table.contains("skipped lo: virtual: loopback"), "{table}");
}

#[test]
fn downtrained_fixture_shows_current_below_max() {
    let t = common::hgx(common::HgxFaults {
        downtrained: true,
        ..Default::default()
    });
    let v = topo_json(t.root());
    assert_eq!(v["gpus"][3]["link"]["current_width"], 8);
    assert_eq!(v["gpus"][3]["link"]["max_width"], 16);
    assert_eq!(v["gpus"][5]["link"]["current_gts"], 8.0);
}

#[test]
fn ghw_vm_with_a_passthrough_tesla_p100() {
    let (_d, _, v) = snapshot("ghw/linux-amd64-accel-nvidia/linux-amd64-accel-nvidia.tar.gz");
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0]["pci_address"], "0000:06:00.0");
    assert_eq!(gpus[0]["device_id"], "10de:15f8");
    assert_eq!(gpus[0]["driver"], "nvidia");
    // numa_node is -1 in the snapshot; the VM has one node, so the GPU is on it.
    assert_eq!(gpus[0]["numa_node"], 0);
    assert_eq!(gpus[0]["local_cpus"], "0-7");
    assert_eq!(count(&v, "numa_nodes"), 1);
    assert_eq!(v["numa_nodes"][0]["cpus"], "0-7");
    assert_eq!(count(&v, "nics"), 0, "the snapshot has no /sys/class/net");
}

#[test]
fn hwloc_2_socket_xeon_with_i40e_nics() {
    let (_d, _, v) = snapshot("hwloc/32intel64-2p8co2t+8ve/32intel64-2p8co2t+8ve.tar.bz2");
    assert_eq!(
        count(&v, "gpus"),
        0,
        "its 8 accelerators are NEC VEs, not GPUs"
    );
    let nodes = v["numa_nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0]["cpus"], "0-7,16-23");
    assert_eq!(nodes[1]["cpus"], "8-15,24-31");
    assert_eq!(names(&v, "nics"), ["enp96s0f0", "enp96s0f1"]);
    let nic = &v["nics"][0];
    assert_eq!(nic["driver"], "i40e");
    assert_eq!(nic["pci_address"], "0000:60:00.0");
    assert_eq!(nic["speed_mbps"], 1000);
    assert_eq!(nic["numa_node"], 0);
    assert_eq!(nic["link"]["current_width"], 1);
    // The second port is down with an empty speed file: no speed, not an error.
    assert_eq!(v["nics"][1]["operstate"], "down");
    assert!(v["nics"][1]["speed_mbps"].is_null());
}

#[test]
fn hwloc_4_node_host_with_a_qlogic_infiniband_hca() {
    let (_d, _, v) =
        snapshot("hwloc/40intel64-2g2n4c+pcilocality/40intel64-2g2n4c+pcilocality.tar.bz2");
    assert_eq!(count(&v, "numa_nodes"), 4);
    assert_eq!(v["numa_nodes"][2]["cpus"], "2,6,10,14,18,22,26,30,34,38");
    assert_eq!(names(&v, "nics"), ["eth0", "eth1", "eth2", "eth3", "ib0"]);
    let ib = &v["nics"][4];
    assert_eq!(ib["kind"], "infiniband");
    assert_eq!(ib["numa_node"], 2);
    assert_eq!(ib["link"]["current_width"], 4);
    assert_eq!(ib["rdma"][0], "qib0");
    assert_eq!(v["rdma_devices"][0]["name"], "qib0");
    let port = &v["rdma_devices"][0]["ports"][0];
    assert_eq!(
        (&port["state"], &port["phys_state"], &port["rate"]),
        (
            &Value::from("ACTIVE"),
            &Value::from("LinkUp"),
            &Value::from("40 Gb/sec (4X QDR)")
        )
    );
    assert_eq!(port["rate_mbps"], 40000);
    assert_eq!(v["rdma_devices"][0]["netdevs"][0], "ib0");
    assert_eq!(v["rdma_devices"][0]["driver"], "ib_qib");
    // Chipset NICs with numa_node=-1 on a 4-node host: unknown, not guessed.
    assert!(v["nics"][0]["numa_node"].is_null());
}

#[test]
fn dgx_spark_snapshot_without_pci_directories() {
    let (_d, _, v) = snapshot("hwloc/nvidia-dgx-gb10/nvidia-dgx-gb10.tar.bz2");
    assert_eq!(count(&v, "numa_nodes"), 1);
    assert_eq!(v["numa_nodes"][0]["cpus"], "0-19");
    assert_eq!(count(&v, "gpus"), 0, "the capture has no PCI tree");
}

#[test]
fn live_topo_is_sensible_on_this_machine() {
    let out = common::gputune()
        .args(["topo", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!v["numa_nodes"].as_array().unwrap().is_empty());
    assert!(names(&v, "skipped_nics").contains(&"lo"));
    assert!(!names(&v, "nics").contains(&"lo"));
}

#[test]
fn offline_cpus_are_shown_apart_and_never_local() {
    let t = common::Tree::new();
    t.numa_node(0, "0-11", Some(4_000_000));
    t.numa_node(1, "12-23", Some(4_000_000));
    t.file("/sys/devices/system/cpu/online", "0,2,4-20,22\n");
    t.pci(
        "/sys/devices/pci0000:00/0000:00:04.0",
        &common::Pci::h100().on(0, "0-11"),
    );
    let v = topo_json(t.root());
    let nodes = v["numa_nodes"].as_array().unwrap();
    assert_eq!(nodes[0]["cpus"], "0,2,4-11");
    assert_eq!(nodes[0]["offline_cpus"], "1,3");
    assert_eq!(nodes[1]["cpus"], "12-20,22");
    assert_eq!(nodes[1]["offline_cpus"], "21,23");
    assert_eq!(v["gpus"][0]["local_cpus"], "0,2,4-11");
    assert_eq!(v["affinity"]["rows"][0]["cpus"], "0,2,4-11");
    let table = topo_table(t.root());
    assert!(table.contains("21,23"), "{table}");
}

#[test]
fn rdma_ports_from_node_exporters_infiniband_capture() {
    let root = common::fixture("node_exporter-ib");
    let v = topo_json(&root);
    let rdma = v["rdma_devices"].as_array().unwrap();
    assert_eq!(names(&v, "rdma_devices"), ["i40iw0", "mlx4_0"]);
    let mlx4 = &rdma[1];
    assert_eq!(mlx4["firmware"], "2.31.5050");
    assert_eq!(mlx4["hca_type"], "MT4099");
    let ports = mlx4["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 2);
    assert_eq!(ports[0]["state"], "ACTIVE");
    assert_eq!(ports[0]["phys_state"], "LinkUp");
    assert_eq!(ports[0]["rate_mbps"], 40000);
    assert_eq!(ports[0]["width"], 4);
    assert_eq!(ports[0]["signalling"], "QDR");
    assert_eq!(ports[0]["link_layer"], "InfiniBand");
    assert_eq!(rdma[0]["ports"][0]["rate_mbps"], 10000);
    assert!(rdma[0]["ports"][0]["signalling"].is_null());
    let table = topo_table(&root);
    assert!(table.contains("40 Gb/sec (4X QDR)"), "{table}");
}

#[test]
fn roce_gid_tables_are_shown() {
    let t = common::hgx(Default::default());
    let v = topo_json(t.root());
    let port = &v["rdma_devices"][0]["ports"][0];
    assert_eq!(port["link_layer"], "Ethernet");
    assert_eq!(port["active_mtu"], 4096, "9000-byte netdev MTU");
    let gids = port["gids"].as_array().unwrap();
    assert_eq!(gids.len(), 4, "the all-zero entry is unused");
    assert_eq!(gids[3]["kind"], "RoCE v2");
    assert_eq!(gids[3]["netdev"], "ens0np0");
    assert_eq!(v["rdma_devices"][0]["netdevs"][0], "ens0np0");
    assert_eq!(v["rdma_devices"][0]["driver"], "mlx5_core");
    let table = topo_table(t.root());
    assert!(table.contains("mlx5_0 port 1 GIDs:"), "{table}");
    assert!(
        table.contains("0000:0000:0000:0000:0000:ffff:0a00:0001"),
        "{table}"
    );
}

/// A POWER9-style node as trimmed captures show it: GPUs whose sysfs lacks `vendor` but
/// which the driver lists (with their memory as NUMA node 255), CPUs 16-87 offline, a NIC
/// behind a VMD domain wider than 16 bits with only a `local_cpus` mask, and a NIC whose
/// `device` link is missing but whose class/net link points into its PCI function.
#[test]
fn trimmed_and_unusual_sysfs() {
    let t = common::Tree::new();
    t.numa_node(0, "0-87", Some(256_000_000));
    t.numa_node(255, "", Some(16_000_000));
    t.file("/sys/devices/system/cpu/online", "0-15\n");
    let gpu = "/sys/devices/pci0004:00/0004:00:00.0/0004:04:00.0";
    t.file(&format!("{gpu}/numa_node"), "0\n");
    t.file(&format!("{gpu}/local_cpulist"), "0-87\n");
    t.sys_link("/sys/bus/pci/devices/0004:04:00.0", gpu);
    let proc_gpu = "/proc/driver/nvidia/gpus/0004:04:00.0";
    t.file(
        &format!("{proc_gpu}/information"),
        "Model: \t\t Tesla V100-SXM2-16GB\nIRQ:   \t\t 83\nBus Location: \t 0004:04:00.0\n",
    );
    t.file(
        &format!("{proc_gpu}/numa_status"),
        "Node: 255\nStatus: online_movable\n",
    );
    // VMD: the NIC's domain is 10000, its functions under the VMD controller 0000:00:0e.0.
    let vmd_nic = "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0";
    t.file(&format!("{vmd_nic}/vendor"), "0x8086\n");
    t.file(&format!("{vmd_nic}/class"), "0x020000\n");
    t.file(&format!("{vmd_nic}/numa_node"), "0\n");
    t.file(&format!("{vmd_nic}/local_cpus"), "00000000,0000ffff\n");
    t.sys_link("/sys/bus/pci/devices/10000:e1:00.0", vmd_nic);
    t.netdev(vmd_nic, "ens9", 25_000, 9000, true, 5);
    // A NIC without a `device` link.
    let plain = "/sys/devices/pci0000:00/0000:00:03.0";
    t.file(&format!("{plain}/vendor"), "0x15b3\n");
    t.file(&format!("{plain}/class"), "0x020000\n");
    t.sys_link("/sys/bus/pci/devices/0000:00:03.0", plain);
    let dir = format!("{plain}/net/eth1");
    t.file(&format!("{dir}/operstate"), "up\n");
    t.file(&format!("{dir}/speed"), "100000\n");
    t.sys_link("/sys/class/net/eth1", &dir);

    let v = topo_json(t.root());
    assert_eq!(
        count(&v, "gpus"),
        1,
        "listed by the driver though sysfs has no vendor"
    );
    assert_power9(&v, "0004:04:00.0");
    let gpus = &v["gpus"];
    assert_eq!(gpus[0]["model"], "Tesla V100-SXM2-16GB");
    assert_eq!(
        gpus[0]["local_cpus"], "0-15",
        "offline CPUs are never local"
    );
    let nodes = &v["numa_nodes"];
    assert_eq!((&nodes[0]["id"], &nodes[1]["id"]), (&0.into(), &255.into()));
    let nics = v["nics"].as_array().unwrap();
    let ens9 = nics.iter().find(|n| n["name"] == "ens9").unwrap();
    assert_eq!(ens9["pci_address"], "10000:e1:00.0");
    assert_eq!(ens9["numa_node"], 0);
    assert_eq!(ens9["local_cpus"], "0-15");
    let eth1 = nics
        .iter()
        .find(|n| n["name"] == "eth1")
        .expect("not virtual");
    assert_eq!(eth1["pci_address"], "0000:00:03.0");
    assert_eq!(names(&v, "skipped_nics"), Vec::<&str>::new());

    // pin binds rank 0 to the online CPUs of the GPU's node only.
    let (_, err) = pin(t.root(), "0");
    assert!(err.contains("0-15"), "{err}");
    assert!(!err.contains("0-87"), "{err}");
}

/// hwloc's real POWER9 capture with six V100s: GPUs known only from the driver's /proc
/// listing, their memory as NUMA nodes 250-255, and most CPUs offline.
#[test]
fn power9_node_with_gpu_memory_nodes_and_offline_cpus() {
    let (_d, root, v) = snapshot("hwloc/nvidiagpunumanodes/nvidiagpunumanodes.tar.bz2");
    assert_eq!(
        count(&v, "gpus"),
        6,
        "sysfs has no vendor files; the driver lists six"
    );
    assert_power9(&v, "0004:05:00.0");
    assert_eq!(v["gpus"][5]["memory_numa_node"], 250);
    assert_eq!(numa_node(&v, 8)["cpus"], "88-103");
    assert_eq!(numa_node(&v, 250)["gpu_memory_of"], "0035:05:00.0");
    assert_eq!(numa_node(&v, 250)["cpus"], "");

    let out = common::gputune()
        .arg("--root")
        .arg(&root)
        .args("audit --profile base --only gpu,numa --format json".split_whitespace())
        .output()
        .unwrap();
    let doc = common::stdout_json(&out);
    let get = |id: &str| common::finding(&doc, id);
    assert_eq!(get("gpu.count")["actual"], "6");
    let nodes = get("numa.nodes")["message"].as_str().unwrap().to_string();
    assert!(
        nodes.contains("node 255: CPUs  (15360 MiB, memory of GPU 0004:05:00.0)"),
        "{nodes}"
    );
    assert!(nodes.contains("node 0: CPUs 0-15 "), "{nodes}");
    assert!(
        !get("driver.version")["message"]
            .as_str()
            .unwrap()
            .contains("not loaded")
    );
    // The GPUs' sysfs has no numa_node, but their local_cpus masks name nodes 0 and 8.
    assert_eq!(get("numa.gpu0.node")["actual"], "0");
    assert_eq!(get("numa.gpu5.node")["actual"], "8");

    // pin binds to the node's online CPUs only (0-15 of 0-87; 88-103 of 88-175), never
    // the offline ones. GPU4's CPUs do not exist on this machine, so binding is refused.
    let (code, err) = pin(&root, "0");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("CPUs 0-15") && err.contains("node 0"), "{err}");
    let (code, err) = pin(&root, "4");
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("CPUs 88-103 of NUMA node 8"), "{err}");
}

/// hwloc's capture whose PCI functions have `local_cpus` masks and no `local_cpulist`.
#[test]
fn local_cpus_masks_when_local_cpulist_is_absent() {
    let (_d, _, v) = snapshot("hwloc/fakepcilocalities/fakepcilocalities.tar.bz2");
    let nics = v["nics"].as_array().unwrap();
    let nic = |name: &str| nics.iter().find(|n| n["name"] == name).unwrap();
    assert_eq!(nic("eth0")["local_cpus"], "0,4,8,12,16,20,24,28,32,36");
    assert_eq!(nic("ib0")["local_cpus"], "1,5,9,13,17,21,25,29,33,37");
}

/// The strings of a JSON array.
fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v:#}"))
        .iter()
        .map(|s| s.as_str().unwrap_or_else(|| panic!("not a string: {s}")))
        .collect()
}

/// The affinity matrix's column names.
fn columns(v: &Value) -> Vec<&str> {
    strings(&v["affinity"]["columns"])
}

/// Row `gpu` of the affinity matrix, one label per column.
fn links(v: &Value, gpu: usize) -> Vec<&str> {
    strings(&v["affinity"]["rows"][gpu]["links"])
}

/// An AWS p4d.24xlarge (constructed, tests/fixtures/aws-p4d/SOURCE.txt): the EFA devices
/// have no netdev and the ENA eth0 is the only interface. The NIC columns are the EFA
/// devices each GPU pair shares a PCIe switch with, never eth0.
#[test]
fn aws_p4d_matrix_pairs_gpus_with_their_efa_devices_not_the_ena_port() {
    let root = common::fixture("aws-p4d");
    let v = topo_json(&root);
    assert_eq!(names(&v, "nics"), ["eth0"]);
    assert_eq!(
        names(&v, "rdma_devices"),
        ["efa_0", "efa_1", "efa_2", "efa_3"]
    );
    let gpus: Vec<String> = (0..8).map(|i| format!("GPU{i}")).collect();
    let mut want: Vec<&str> = gpus.iter().map(String::as_str).collect();
    want.extend(["efa_0", "efa_1", "efa_2", "efa_3"]);
    assert_eq!(columns(&v), want);
    assert_eq!(links(&v, 0)[8..], ["PIX", "PHB", "SYS", "SYS"]);
    assert_eq!(links(&v, 5)[8..], ["SYS", "SYS", "PIX", "PHB"]);
    assert!(
        v["affinity"]["fabric"]
            .as_str()
            .unwrap()
            .contains("aws-ofi-nccl"),
        "{v:#}"
    );
    let port = &v["rdma_devices"][0]["ports"][0];
    assert_eq!(port["link_layer"], "Unknown", "EFA is not InfiniBand");
    let table = topo_table(&root);
    assert!(
        table.contains("NIC columns: the training fabric (efa_0, efa_1, efa_2, efa_3)"),
        "{table}"
    );
}

/// A POWER9 node (constructed, tests/fixtures/power9-ib/SOURCE.txt): its InfiniBand HCA
/// (no IPoIB, so no netdev) on socket 8, its 1 GbE management port on socket 0. The matrix
/// shows the HCA, and the management port is no column.
#[test]
fn power9_matrix_shows_the_hca_not_the_management_port() {
    let root = common::fixture("power9-ib");
    let v = topo_json(&root);
    assert_eq!(names(&v, "nics"), ["enP5p1s0f0"]);
    assert_eq!(columns(&v), ["GPU0", "GPU1", "GPU2", "GPU3", "mlx5_0"]);
    assert_eq!(links(&v, 0)[4], "SYS");
    assert_eq!(links(&v, 2)[4], "NODE");
    assert_eq!(v["rdma_devices"][0]["numa_node"], 8);
    let table = topo_table(&root);
    let matrix = table.split("Affinity").nth(1).unwrap();
    assert!(!matrix.contains("enP5p1s0f0"), "{table}");
}

/// hwloc's POWER9 capture as a kernel before 2.6.26 shows it: no `cpu/online` (only each
/// `cpuN/online` flag, and no directory for CPUs that are not present), and, older still,
/// no `nodeN/cpulist` (only the `cpumap` mask, which here lists the online CPUs). The nodes
/// keep their CPUs, offline CPUs stay out of every local list, and `pin` binds to online
/// ones.
#[test]
fn old_sysfs_layouts_cpumap_and_per_cpu_online_flags() {
    for keep_cpulist in [true, false] {
        let (_d, root) = common::extract("hwloc/nvidiagpunumanodes/nvidiagpunumanodes.tar.bz2");
        std::fs::remove_file(root.join("sys/devices/system/cpu/online")).unwrap();
        if !keep_cpulist {
            for entry in std::fs::read_dir(root.join("sys/devices/system/node")).unwrap() {
                let cpulist = entry.unwrap().path().join("cpulist");
                if cpulist.exists() {
                    std::fs::remove_file(&cpulist).unwrap();
                }
            }
        }
        let v = topo_json(&root);
        let case = format!("cpulist kept: {keep_cpulist}");
        assert_eq!(numa_node(&v, 0)["cpus"], "0-15", "{case}");
        assert_eq!(numa_node(&v, 8)["cpus"], "88-103", "{case}");
        if keep_cpulist {
            assert_power9(&v, "0004:05:00.0");
            assert_eq!(numa_node(&v, 8)["offline_cpus"], "104-175");
        }
        assert_eq!(v["gpus"][0]["local_cpus"], "0-15", "{case}");
        assert_eq!(v["gpus"][5]["local_cpus"], "88-103", "{case}");
        let (code, err) = pin(&root, "0");
        assert_eq!(code, Some(0), "{case}: {err}");
        assert!(
            err.contains("CPUs 0-15") && err.contains("node 0"),
            "{case}: {err}"
        );
    }
}

/// An interface name may hold an escape sequence (the kernel refuses only `/`, `:` and
/// white space): the table never hands it to the terminal.
#[test]
fn escape_sequences_in_interface_names_never_reach_the_terminal() {
    let t = common::Tree::new();
    t.numa_node(0, "0-1", Some(4_000_000));
    let nic = "/sys/devices/pci0000:00/0000:00:05.0";
    t.pci(
        nic,
        &common::Pci::of(0x8086, 0x1572, 0x020000, "i40e").on(0, "0-1"),
    );
    t.netdev(nic, "eth\u{1b}[2J0", 10_000, 1500, true, 2);
    t.pci(
        "/sys/devices/pci0000:00/0000:00:04.0",
        &common::Pci::h100().on(0, "0-1"),
    );
    let table = topo_table(t.root());
    assert!(!table.contains('\u{1b}'), "{table:?}");
    assert!(table.contains("eth[2J0"), "{table}");
    let v = topo_json(t.root());
    assert_eq!(names(&v, "nics"), ["eth\u{1b}[2J0"], "JSON escapes it");
}

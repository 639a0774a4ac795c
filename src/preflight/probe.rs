//! The reachability matrix's two ends: listeners that accept and close at once (nothing is
//! read from a prober, nothing sent), a UDP echo that answers path-MTU probes with 12 bytes,
//! and the prober: TCP connects and MTU probes on a bounded pool of threads, every one
//! ending by one deadline.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::wire::{Cell, Listen, Mtu, Target};

/// Probes running at once on one node: enough to finish thousands of connects in seconds
/// when peers answer, few enough that a node is no flood to its neighbours.
pub(crate) const CONCURRENCY: usize = 32;
/// The longest one TCP connect may take: a dropped SYN shows as "timed out" after this.
pub(crate) const CONNECT_LIMIT: Duration = Duration::from_millis(1500);
/// How long an MTU probe waits for its answer, and how often it is sent.
const ECHO_WAIT: Duration = Duration::from_millis(300);
const ECHO_TRIES: usize = 3;
/// Marks a path-MTU probe and its answer.
const ECHO_MAGIC: &[u8; 4] = b"GTPM";

/// Open listeners and the echo, served until dropped.
pub(crate) struct Listeners {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Listeners {
    /// Binds `ports` at `addr` (each kind kept with its port) and the UDP echo; a port that
    /// cannot be bound is reported with why, not fatal.
    pub(crate) fn open(
        addr: Option<IpAddr>,
        ports: &[(u16, &str)],
    ) -> (Listeners, Vec<Listen>, Option<u16>) {
        let stop = Arc::new(AtomicBool::new(false));
        let mut listens = Vec::new();
        let mut sockets = Vec::new();
        let mut threads = Vec::new();
        let mut echo_port = None;
        if let Some(ip) = addr {
            for (port, kind) in ports {
                let error = match TcpListener::bind(SocketAddr::new(ip, *port))
                    .and_then(|l| l.set_nonblocking(true).map(|_| l))
                {
                    Ok(l) => {
                        sockets.push(l);
                        None
                    }
                    Err(e) => Some(format!("cannot listen on {ip}:{port}: {e}")),
                };
                listens.push(Listen {
                    port: *port,
                    kind: (*kind).to_string(),
                    error,
                    firewall: None,
                });
            }
            if !sockets.is_empty() {
                let stop = stop.clone();
                threads.push(thread::spawn(move || accept_loop(sockets, &stop)));
            }
            if let Ok(udp) = UdpSocket::bind(SocketAddr::new(ip, 0)) {
                echo_port = udp.local_addr().ok().map(|a| a.port());
                let _ = udp.set_read_timeout(Some(Duration::from_millis(100)));
                let stop = stop.clone();
                threads.push(thread::spawn(move || echo_loop(udp, &stop)));
            }
        }
        (Listeners { stop, threads }, listens, echo_port)
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn accept_loop(sockets: Vec<TcpListener>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let mut any = false;
        for s in &sockets {
            while let Ok((conn, _)) = s.accept() {
                any = true;
                drop(conn);
            }
        }
        if !any {
            thread::sleep(Duration::from_millis(5));
        }
    }
}

fn echo_loop(udp: UdpSocket, stop: &AtomicBool) {
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::SeqCst) {
        let Ok((n, from)) = udp.recv_from(&mut buf) else {
            continue;
        };
        if n >= 12 && &buf[..4] == ECHO_MAGIC {
            let mut answer = [0u8; 12];
            answer[..8].copy_from_slice(&buf[..8]);
            answer[8..].copy_from_slice(&(n as u32).to_be_bytes());
            let _ = udp.send_to(&answer, from);
        }
    }
}

/// One unit of work for the pool.
enum Job {
    Connect(usize, IpAddr, u16),
    Mtu(usize, IpAddr, u16, Vec<u32>),
}

/// The words for a failed connect.
pub(crate) fn classify(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::ConnectionRefused => "refused".into(),
        ErrorKind::TimedOut | ErrorKind::WouldBlock => "timed out".into(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => "reset".into(),
        ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => "unreachable".into(),
        _ => e.to_string(),
    }
}

/// The sizes a path-MTU probe tries: this side's MTU, then 1500 and 1280 where smaller.
pub(crate) fn mtu_sizes(local: Option<u32>) -> Vec<u32> {
    let local = local.unwrap_or(1500);
    let mut sizes = vec![local];
    sizes.extend([1500, 1280].into_iter().filter(|s| *s < local));
    sizes
}

/// Probes every target's ports (and path MTU) from `me` at `from`, until `deadline`.
pub(crate) fn run(
    me: usize,
    from: Option<IpAddr>,
    local_mtu: Option<u32>,
    targets: &[Target],
    deadline: Instant,
) -> (Vec<Cell>, Vec<Mtu>) {
    let mut jobs = Vec::new();
    for t in targets {
        if let Some(echo) = t.echo_port {
            jobs.push(Job::Mtu(t.rank, t.addr, echo, mtu_sizes(local_mtu)));
        }
        for p in &t.ports {
            jobs.push(Job::Connect(t.rank, t.addr, *p));
        }
    }
    let queue = Arc::new(Mutex::new(jobs));
    let cells = Arc::new(Mutex::new(Vec::new()));
    let mtus = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (queue, cells, mtus) = (queue.clone(), cells.clone(), mtus.clone());
            thread::spawn(move || {
                loop {
                    let job = lock(&queue).pop();
                    let Some(job) = job else { break };
                    match job {
                        Job::Connect(to, ip, port) => {
                            let cell = connect(me, to, ip, port, deadline);
                            lock(&cells).push(cell);
                        }
                        Job::Mtu(to, ip, port, sizes) => {
                            let tried = mtu_probe(from, ip, port, &sizes, deadline);
                            lock(&mtus).push(Mtu { to, tried });
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let mut cells = std::mem::take(&mut *lock(&cells));
    cells.sort_by_key(|c| (c.to, c.port));
    let mut mtus = std::mem::take(&mut *lock(&mtus));
    mtus.sort_by_key(|m| m.to);
    (cells, mtus)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn connect(me: usize, to: usize, ip: IpAddr, port: u16, deadline: Instant) -> Cell {
    let remaining = deadline.saturating_duration_since(Instant::now());
    let mut cell = Cell {
        from: me,
        to,
        port,
        ms: None,
        error: None,
    };
    if remaining < Duration::from_millis(20) {
        cell.error = Some("not probed (deadline)".into());
        return cell;
    }
    let start = Instant::now();
    match TcpStream::connect_timeout(&SocketAddr::new(ip, port), remaining.min(CONNECT_LIMIT)) {
        Ok(_) => cell.ms = Some(start.elapsed().as_secs_f64() * 1e3),
        Err(e) => cell.error = Some(classify(&e)),
    }
    cell
}

fn mtu_probe(
    from: Option<IpAddr>,
    ip: IpAddr,
    port: u16,
    sizes: &[u32],
    deadline: Instant,
) -> Vec<(u32, bool)> {
    let bind = SocketAddr::new(
        from.unwrap_or(if ip.is_ipv4() {
            IpAddr::from([0, 0, 0, 0])
        } else {
            IpAddr::from([0u16; 8])
        }),
        0,
    );
    let Ok(udp) = UdpSocket::bind(bind).and_then(|u| u.connect((ip, port)).map(|_| u)) else {
        return Vec::new();
    };
    let header = if ip.is_ipv4() { 28 } else { 48 };
    let mut tried = Vec::new();
    let mut id: u32 = 0;
    for &size in sizes {
        let payload = size.saturating_sub(header).max(12) as usize;
        let mut ok = false;
        for _ in 0..ECHO_TRIES {
            if Instant::now() + ECHO_WAIT > deadline {
                break;
            }
            id += 1;
            let mut packet = vec![0u8; payload];
            packet[..4].copy_from_slice(ECHO_MAGIC);
            packet[4..8].copy_from_slice(&id.to_be_bytes());
            if udp.send(&packet).is_err() {
                break;
            }
            let until = Instant::now() + ECHO_WAIT;
            let mut answer = [0u8; 12];
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                let _ = udp.set_read_timeout(Some(left.max(Duration::from_millis(1))));
                match udp.recv(&mut answer) {
                    Ok(12) if answer[..8] == packet[..8] => {
                        ok = true;
                        break;
                    }
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
            if ok {
                break;
            }
        }
        tried.push((size, ok));
        if ok {
            break;
        }
    }
    tried
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_outcomes_and_echo_on_loopback() {
        let lo = IpAddr::from([127, 0, 0, 1]);
        let free = TcpListener::bind((lo, 0)).unwrap();
        let closed = free.local_addr().unwrap().port();
        drop(free);
        let open_port = {
            let l = TcpListener::bind((lo, 0)).unwrap();
            let p = l.local_addr().unwrap().port();
            drop(l);
            p
        };
        let (listeners, listens, echo) = Listeners::open(Some(lo), &[(open_port, "nccl")]);
        assert_eq!(listens[0].error, None);
        let target = Target {
            rank: 1,
            host: "peer".into(),
            addr: lo,
            ports: vec![open_port, closed],
            echo_port: echo,
            mtu: None,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        let (cells, mtus) = run(0, Some(lo), Some(1500), &[target], deadline);
        let open = cells.iter().find(|c| c.port == open_port).unwrap();
        assert!(open.ms.is_some(), "{open:?}");
        let shut = cells.iter().find(|c| c.port == closed).unwrap();
        assert_eq!(shut.error.as_deref(), Some("refused"));
        assert_eq!(mtus[0].tried, vec![(1500, true)]);
        drop(listeners);
        // Past the deadline nothing is tried.
        let late = connect(0, 1, lo, open_port, Instant::now());
        assert_eq!(late.error.as_deref(), Some("not probed (deadline)"));
    }

    #[test]
    fn mtu_sizes_step_down_from_the_local_mtu() {
        assert_eq!(mtu_sizes(Some(9000)), vec![9000, 1500, 1280]);
        assert_eq!(mtu_sizes(Some(1500)), vec![1500, 1280]);
        assert_eq!(mtu_sizes(None), vec![1500, 1280]);
        assert_eq!(mtu_sizes(Some(1280)), vec![1280]);
    }
}

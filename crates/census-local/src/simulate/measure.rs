//! What a load test measures of its own process (Linux): CPU, the
//! simulated workers' apart from the coordinator's, and memory. The
//! coordinator and the workers run on two runtimes of their own
//! ([`Runtimes`], threads named [`COORDINATOR_THREADS`] and
//! [`WORKER_THREADS`]) so that their CPU can be told apart. Memory cannot
//! be: the resident set is the process's, workers included.

/// The name of the coordinator's runtime threads.
pub const COORDINATOR_THREADS: &str = "coordinator";
/// The name of the simulated workers' runtime threads.
pub const WORKER_THREADS: &str = "sim-worker";

/// The two runtimes of a load test, `threads` threads each.
pub struct Runtimes {
    /// Runs the local cluster: the coordinator and its store.
    pub coordinator: tokio::runtime::Runtime,
    /// Runs the simulated workers.
    pub workers: tokio::runtime::Runtime,
}

impl Runtimes {
    pub fn new(threads: usize) -> std::io::Result<Runtimes> {
        let runtime = |name: &str| {
            tokio::runtime::Builder::new_multi_thread().thread_name(name).worker_threads(threads).enable_all().build()
        };
        Ok(Runtimes { coordinator: runtime(COORDINATOR_THREADS)?, workers: runtime(WORKER_THREADS)? })
    }
}

/// CPU seconds so far: the whole process (getrusage), and the simulated
/// workers' threads alone (/proc/self/task/*/stat, by thread name).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuSample {
    pub process: f64,
    pub workers: f64,
}

impl CpuSample {
    pub fn now() -> CpuSample {
        // SAFETY: getrusage writes into the struct it is given, which is ours.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut usage);
            usage
        };
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        CpuSample { process: seconds(usage.ru_utime) + seconds(usage.ru_stime), workers: thread_cpu(WORKER_THREADS) }
    }

    /// The coordinator's CPU seconds (the process's but the workers')
    /// from `before` to `self`.
    pub fn coordinator_since(&self, before: &CpuSample) -> f64 {
        round3(self.process - before.process - (self.workers - before.workers))
    }

    /// The simulated workers' CPU seconds from `before` to `self`.
    pub fn workers_since(&self, before: &CpuSample) -> f64 {
        round3(self.workers - before.workers)
    }
}

/// CPU seconds of this process's live threads named `name`.
fn thread_cpu(name: &str) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    let mut total = 0u64;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        // "tid (comm) state ppid ...": comm may hold spaces; fields 14 and 15 (utime, stime) follow it.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if &stat[open + 1..close] != name {
            continue;
        }
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        total += field(14) + field(15);
    }
    total as f64 / ticks
}

/// The process's resident memory now and at its peak (/proc/self/status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    pub rss_kib: u64,
    pub peak_kib: u64,
}

impl Memory {
    pub fn now() -> Memory {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        Memory { rss_kib: kib("VmRSS:"), peak_kib: kib("VmHWM:") }
    }
}

/// `x` to three decimals, as the summary shows seconds and milliseconds.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::{CpuSample, Memory, WORKER_THREADS, round3, thread_cpu};

    /// CPU seconds the calling thread has run, by its own clock.
    fn own_cpu() -> f64 {
        // SAFETY: clock_gettime writes into the struct it is given, which is ours.
        let time = unsafe {
            let mut time: libc::timespec = std::mem::zeroed();
            libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time);
            time
        };
        time.tv_sec as f64 + time.tv_nsec as f64 / 1e9
    }

    /// A thread's CPU is found by its name: a thread that has run 50 ms
    /// (by its own clock, however long that takes on a busy machine) shows
    /// at least a tick of 10 ms; no thread of another name does.
    #[test]
    fn a_named_threads_cpu_is_told_apart() {
        let before = CpuSample::now();
        let spin = || {
            let mut x = 0u64;
            while own_cpu() < 0.05 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
            (x, thread_cpu(WORKER_THREADS))
        };
        let (_, seen) = std::thread::Builder::new().name(WORKER_THREADS.into()).spawn(spin).unwrap().join().unwrap();
        assert!(seen >= 0.01, "{seen}");
        let after = CpuSample::now();
        assert!(after.process >= before.process + 0.04, "{before:?} {after:?}");
        assert_eq!(thread_cpu("no-thread-has-this-name"), 0.0);
    }

    #[test]
    fn memory_is_read_from_the_process() {
        let memory = Memory::now();
        assert!(memory.rss_kib > 0 && memory.peak_kib >= memory.rss_kib, "{memory:?}");
    }

    #[test]
    fn seconds_are_rounded_to_three_decimals() {
        assert_eq!(round3(1.234_56), 1.235);
        assert_eq!(round3(0.0004), 0.0);
    }
}

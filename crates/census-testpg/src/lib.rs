//! Test harness: a throw-away PostgreSQL server for the census's tests.
//!
//! [`server_url`] gives the URL of a server for this test process: the one
//! named by `CENSUS_TEST_DATABASE_URL` if set, otherwise a fresh cluster made
//! with `initdb` in a temporary directory and started with `postgres` on a
//! free loopback port. [`fresh_database`] creates an empty database on it for
//! one test. When the binaries are missing or the server does not start, the
//! harness panics with the reason: a Postgres test never skips silently.
//!
//! [`SmallDisk`] is a small filesystem of a test's own (a tmpfs), to fill;
//! [`scratch_dir`] a directory of the test process's own for its SQLite files.
//!
//! This crate is for tests only; nothing in the census depends on it at run time.
//! The server dies with the test process (it is given a parent-death signal),
//! and its directory is removed by the next harness that starts.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The environment variable naming a server to use instead of a throw-away one.
pub const URL_VARIABLE: &str = "CENSUS_TEST_DATABASE_URL";

const USER: &str = "census";

/// The base URL (ending in the database name `postgres`) of this process's server.
pub fn server_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| match std::env::var(URL_VARIABLE) {
        Ok(url) if !url.is_empty() => url,
        _ => start_server_on_a_lasting_thread(),
    })
}

/// Creates a new, empty database on the server and returns its URL.
pub fn fresh_database() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!("census_test_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let base = server_url();
    let psql = binary("psql");
    let status = Command::new(&psql)
        .arg(base)
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-c", &format!("CREATE DATABASE {name}")])
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", psql.display()));
    assert!(status.success(), "CREATE DATABASE {name} failed on {base}");
    match base.rfind('/') {
        Some(slash) => {
            let (server, rest) = base.split_at(slash);
            let query = rest.find('?').map(|q| &rest[q..]).unwrap_or("");
            format!("{server}/{name}{query}")
        }
        None => panic!("{URL_VARIABLE} must be a postgres:// URL, got {base}"),
    }
}

/// Where PostgreSQL's server binaries are: next to `initdb` on PATH (through
/// its symlink), or under `/usr/lib/postgresql/<version>/bin`.
pub fn binary(name: &str) -> PathBuf {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            candidates.push(dir.join(name));
            if let Ok(initdb) = std::fs::canonicalize(dir.join("initdb")) {
                candidates.push(initdb.with_file_name(name));
            }
        }
    }
    if let Ok(versions) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut dirs: Vec<PathBuf> = versions.flatten().map(|e| e.path().join("bin")).collect();
        dirs.sort();
        candidates.extend(dirs.into_iter().rev().map(|d| d.join(name)));
    }
    candidates.into_iter().find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "PostgreSQL's `{name}` was not found on PATH or in /usr/lib/postgresql/*/bin; install the PostgreSQL \
             server (Debian: postgresql-15) or set {URL_VARIABLE} to a server's URL"
        )
    })
}

/// PostgreSQL refuses to run as root; then the server runs as `postgres`.
fn server_account() -> Option<(u32, u32)> {
    // SAFETY: geteuid and getpwnam have no preconditions; the passwd record is read at once.
    unsafe {
        if libc::geteuid() != 0 {
            return None;
        }
        let entry = libc::getpwnam(c"postgres".as_ptr());
        assert!(!entry.is_null(), "running as root and there is no `postgres` user to run the test server as");
        Some(((*entry).pw_uid, (*entry).pw_gid))
    }
}

fn command_as(binary: &Path, account: Option<(u32, u32)>) -> Command {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(binary);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if let Some((uid, gid)) = account
                && (libc::setgid(gid) != 0 || libc::setuid(uid) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            // After the credentials change, which would clear it: the server
            // dies with the test process instead of outliving it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command
}

/// The parent-death signal fires when the *thread* that started the server
/// ends, so the server is started by a thread that lives as long as the process.
fn start_server_on_a_lasting_thread() -> String {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("census-testpg".into())
        .spawn(move || {
            let started = std::panic::catch_unwind(start_server);
            let failed = started.is_err();
            let _ = sender.send(started);
            if !failed {
                loop {
                    std::thread::park();
                }
            }
        })
        .expect("spawn the test server's thread");
    match receiver.recv().expect("the test server's thread reports") {
        Ok(url) => url,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

// The server is never waited for: it lives as long as the test process and
// dies with it (parent-death signal).
#[allow(clippy::zombie_processes)]
fn start_server() -> String {
    let dir = std::env::temp_dir().join(format!("census-testpg-{}", std::process::id()));
    let cluster = Cluster::init(dir);
    let port = free_port();
    cluster.spawn(port);
    cluster.wait_ready(port)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// A data directory made by `initdb`, and how to run a server on it.
struct Cluster {
    dir: PathBuf,
    account: Option<(u32, u32)>,
    /// Commits survive a server crash (synchronous_commit on): crash tests
    /// need it; the shared server trades it for speed.
    durable: bool,
    /// The user's password, when the server asks for one.
    password: Option<String>,
}

impl Cluster {
    fn init(dir: PathBuf) -> Cluster {
        Cluster::init_with(dir, None)
    }

    /// `password`: the user must give it (scram-sha-256), instead of being trusted.
    fn init_with(dir: PathBuf, password: Option<&str>) -> Cluster {
        let initdb = binary("initdb");
        let account = server_account();
        remove_stale_directories("census-testpg");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test server's directory");
        if let Some((uid, gid)) = account {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("give the test server's directory to postgres");
        }
        let mut initdb_command = command_as(&initdb, account);
        initdb_command.arg("-D").arg(dir.join("data")).args(["-U", USER, "--no-sync", "-E", "UTF8", "--locale=C"]);
        match password {
            None => initdb_command.args(["-A", "trust"]),
            Some(password) => {
                let file = dir.join("password");
                std::fs::write(&file, format!("{password}\n")).expect("write the password file");
                if let Some((uid, gid)) = account {
                    std::os::unix::fs::chown(&file, Some(uid), Some(gid)).expect("give the password file to postgres");
                }
                initdb_command.args(["-A", "scram-sha-256"]).arg(format!("--pwfile={}", file.display()))
            }
        };
        let output = initdb_command.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", initdb.display()));
        assert!(output.status.success(), "initdb failed: {}", String::from_utf8_lossy(&output.stderr));
        Cluster { dir, account, durable: false, password: password.map(str::to_string) }
    }

    /// Starts the server from the process's lasting thread: the parent-death
    /// signal fires when the spawning *thread* ends, and a test's threads
    /// (tokio's blocking pool, say) end long before the test does.
    fn spawn(&self, port: u16) -> Child {
        let cluster = Cluster {
            dir: self.dir.clone(),
            account: self.account,
            durable: self.durable,
            password: self.password.clone(),
        };
        on_lasting_thread(move || cluster.spawn_here(port))
    }

    fn spawn_here(&self, port: u16) -> Child {
        let postgres = binary("postgres");
        let log_path = self.dir.join("server.log");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).expect("open the server log");
        if let Some((uid, gid)) = self.account {
            std::os::unix::fs::chown(&log_path, Some(uid), Some(gid)).expect("give the log to postgres");
        }
        command_as(&postgres, self.account)
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &port.to_string(), "-h", "127.0.0.1", "-k"])
            .arg(&self.dir)
            .args(["-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=200"])
            .args(["-c", if self.durable { "synchronous_commit=on" } else { "synchronous_commit=off" }])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", postgres.display()))
    }

    fn wait_ready(&self, port: u16) -> String {
        let user = match &self.password {
            Some(password) => format!("{USER}:{password}"),
            None => USER.to_string(),
        };
        let url = format!("postgres://{user}@127.0.0.1:{port}/postgres");
        let psql = binary("psql");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = Command::new(&psql)
                .arg(&url)
                .args(["-q", "-c", "SELECT 1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return url;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                panic!("the test PostgreSQL server did not start within 60 s; its log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Runs `job` on one thread that lives as long as the process.
fn on_lasting_thread<T: Send + 'static>(job: impl FnOnce() -> T + Send + 'static) -> T {
    static JOBS: OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Job>>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("census-testpg-spawner".into())
            .spawn(move || {
                for job in receiver {
                    job();
                }
            })
            .expect("spawn the test servers' thread");
        std::sync::Mutex::new(sender)
    });
    let (result_sender, result) = std::sync::mpsc::channel();
    let job: Job = Box::new(move || {
        let _ = result_sender.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)));
    });
    jobs.lock().expect("never poisoned").send(job).expect("the spawner thread lives");
    match result.recv().expect("the spawner thread answers") {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// A server of its own for one test that stops and restarts it (crash
/// tests): never shared, so stopping it disturbs no other test, and with
/// every commit durable across its crashes.
pub struct OwnServer {
    cluster: Cluster,
    port: u16,
    url: String,
    child: Option<Child>,
}

impl OwnServer {
    /// Initialises and starts a server in a new directory.
    pub fn start(name: &str) -> OwnServer {
        OwnServer::start_with(name, None)
    }

    /// Initialises and starts a server whose user `census` must give
    /// `password` (scram-sha-256; letters and digits, as it goes into URLs
    /// unescaped). [`OwnServer::url`] holds the password.
    pub fn start_with_password(name: &str, password: &str) -> OwnServer {
        assert!(password.chars().all(|c| c.is_ascii_alphanumeric()), "a password of letters and digits");
        OwnServer::start_with(name, Some(password))
    }

    /// Initialises and starts a server whose data directory is in `parent`
    /// (a [`SmallDisk`], say, to fill the server's disk).
    pub fn start_in(name: &str, parent: &Path) -> OwnServer {
        OwnServer::start_at(parent.join(format!("census-testpg-{}-{name}", std::process::id())), None)
    }

    fn start_with(name: &str, password: Option<&str>) -> OwnServer {
        let dir = std::env::temp_dir().join(format!("census-testpg-{}-{name}", std::process::id()));
        OwnServer::start_at(dir, password)
    }

    fn start_at(dir: PathBuf, password: Option<&str>) -> OwnServer {
        let cluster = Cluster { durable: true, ..Cluster::init_with(dir, password) };
        let port = free_port();
        let child = cluster.spawn(port);
        let url = cluster.wait_ready(port);
        OwnServer { cluster, port, url, child: Some(child) }
    }

    /// The URL of its `postgres` database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the server the way a crash does: SIGQUIT is PostgreSQL's
    /// immediate shutdown (no checkpoint; recovery runs at the next start).
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGQUIT);
            }
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and data, and waits until it answers.
    pub fn restart(&mut self) {
        self.crash();
        self.child = Some(self.cluster.spawn(self.port));
        self.cluster.wait_ready(self.port);
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.cluster.dir);
    }
}

/// The directory `<temp>/<prefix>-<pid>` of this test process's own, created
/// if need be, for the files its tests make (SQLite databases). No test
/// process can remove its own when it ends (statics are never dropped), so
/// the first call of a prefix in a process removes the directories of that
/// prefix left by test processes that are gone: a machine that runs the
/// tests again and again keeps one generation of them, not every one.
pub fn scratch_dir(prefix: &str) -> PathBuf {
    static CLEANED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    {
        let mut cleaned = CLEANED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !cleaned.iter().any(|done| done == prefix) {
            remove_stale_directories(prefix);
            cleaned.push(prefix.to_owned());
        }
    }
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create the test directory {}: {e}", dir.display()));
    dir
}

/// Removes the directories `<prefix>-<pid>[-...]` under the temp dir whose
/// processes are gone.
fn remove_stale_directories(prefix: &str) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix)?.strip_prefix('-'))
            .and_then(|p| p.split('-').next()?.parse::<u32>().ok())
        else {
            continue;
        };
        if entry.path().is_dir() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A small filesystem of a test's own (a tmpfs mounted on a new directory),
/// to fill and free: what a database does when its disk is full, tested on
/// a real full disk. Mounting needs root; without it the test fails and
/// says so, it never skips. Unmounted when dropped.
pub struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `bytes` on a new directory named after `name`.
    pub fn mount(name: &str, bytes: u64) -> SmallDisk {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "this test fills a disk of its own, a tmpfs it mounts, which needs root: run the tests as root \
             (CI does), e.g. `sudo -E cargo test`"
        );
        let dir = std::env::temp_dir().join(format!("census-small-disk-{}-{name}", std::process::id()));
        let _ = Command::new("umount").arg("-l").arg(&dir).stderr(Stdio::null()).status();
        std::fs::create_dir_all(&dir).expect("create the small disk's mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes},mode=0777"), "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
        assert!(status.success(), "mount -t tmpfs on {} failed", dir.display());
        SmallDisk { dir }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Bytes free for files.
    pub fn available(&self) -> u64 {
        let path = std::ffi::CString::new(self.dir.as_os_str().as_encoded_bytes()).expect("a path without NUL");
        // SAFETY: statvfs writes into the zeroed struct it is given; the path is NUL-terminated.
        unsafe {
            let mut stat: libc::statvfs = std::mem::zeroed();
            assert_eq!(libc::statvfs(path.as_ptr(), &mut stat), 0, "statvfs {}", self.dir.display());
            stat.f_bavail as u64 * stat.f_frsize as u64
        }
    }

    /// Fills the disk with a file of its own until about `leave` bytes are free.
    pub fn fill(&self, leave: u64) {
        use std::io::Write;
        let mut filler = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("filler"))
            .expect("create the filler file");
        let chunk = vec![0x5a_u8; 64 * 1024];
        while self.available() > leave {
            let want = (self.available() - leave).min(chunk.len() as u64) as usize;
            if filler.write_all(&chunk[..want]).is_err() {
                break;
            }
            filler.flush().expect("flush the filler file");
        }
    }

    /// Frees what [`SmallDisk::fill`] took.
    pub fn free(&self) {
        std::fs::remove_file(self.dir.join("filler")).expect("remove the filler file");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

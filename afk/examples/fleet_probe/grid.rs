//! The grid of cells, from flags and `AFK_FLEET_…` variables, each cell run in a child process.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::cell::{Cell, Mode};

/// Print `why` and the usage, then exit 2.
pub fn usage(why: &str) -> ! {
    eprintln!(
        "{why}\nusage: fleet_probe [--stores LIST] [--runs LIST] [--s3-runs LIST] \
         [--latencies MS_LIST] [--loops closed,open] [--quick] [--out PATH]\n\
         (or AFK_FLEET_STORES, AFK_FLEET_RUNS, AFK_FLEET_S3_RUNS, AFK_FLEET_LATENCIES_MS, \
         AFK_FLEET_LOOPS, AFK_FLEET_QUICK=1; see the module docs)"
    );
    std::process::exit(2)
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Grid {
    stores: Vec<String>,
    runs: Vec<u64>,
    s3_runs: Vec<u64>,
    latencies_ms: Vec<u64>,
    modes: Vec<Mode>,
    /// `system` (the process's own `malloc`), `jemalloc`, or the path of a `malloc` library:
    /// each cell runs once per entry, the library preloaded (`LD_PRELOAD`) into its process.
    allocators: Vec<String>,
    /// Where to write the table too.
    pub out: Option<PathBuf>,
}

fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_owned)
        .collect()
}

fn numbers(s: &str) -> Result<Vec<u64>, String> {
    list(s)
        .iter()
        .map(|x| {
            x.replace('_', "")
                .parse()
                .map_err(|_| format!("not a number: {x}"))
        })
        .collect()
}

fn modes(s: &str) -> Result<Vec<Mode>, String> {
    list(s)
        .iter()
        .map(|m| match m.as_str() {
            "closed" => Ok(Mode::Closed),
            "open" => Ok(Mode::Open),
            _ => Err(format!("unknown loop {m} (closed, open)")),
        })
        .collect()
}

impl Grid {
    fn defaults(quick: bool) -> Grid {
        let (runs, s3, lat) = if quick {
            (vec![1, 100, 1000], vec![100], vec![0, 50])
        } else {
            (vec![1, 100, 1000, 10_000], vec![1000], vec![0, 50, 1000])
        };
        Grid {
            stores: list("memory,rocksdb,redis,s3"),
            runs,
            s3_runs: s3,
            latencies_ms: lat,
            modes: vec![Mode::Closed, Mode::Open],
            allocators: list("system"),
            out: None,
        }
    }

    /// The grid of the environment, then of the flags (a flag wins).
    pub fn from_args(args: &[String]) -> Result<Grid, String> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let quick =
            env("AFK_FLEET_QUICK").is_some_and(|v| v == "1") || args.iter().any(|a| a == "--quick");
        let mut g = Grid::defaults(quick);
        let mut set: Vec<(String, String)> = Vec::new();
        for (k, var) in [
            ("--stores", "AFK_FLEET_STORES"),
            ("--runs", "AFK_FLEET_RUNS"),
            ("--s3-runs", "AFK_FLEET_S3_RUNS"),
            ("--latencies", "AFK_FLEET_LATENCIES_MS"),
            ("--loops", "AFK_FLEET_LOOPS"),
            ("--allocators", "AFK_FLEET_ALLOCATORS"),
        ] {
            if let Some(v) = env(var) {
                set.push((k.to_owned(), v));
            }
        }
        let mut it = args.iter().filter(|a| *a != "--quick");
        while let Some(flag) = it.next() {
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            set.push((flag.clone(), value.clone()));
        }
        for (flag, v) in set {
            g.set(&flag, &v)?;
        }
        Ok(g)
    }

    fn set(&mut self, flag: &str, v: &str) -> Result<(), String> {
        match flag {
            "--stores" => self.stores = list(v),
            "--runs" => self.runs = numbers(v)?,
            "--s3-runs" => self.s3_runs = numbers(v)?,
            "--latencies" => self.latencies_ms = numbers(v)?,
            "--loops" => self.modes = modes(v)?,
            "--allocators" => self.allocators = list(v),
            "--out" => self.out = Some(PathBuf::from(v)),
            _ => return Err(format!("unknown option {flag}")),
        }
        Ok(())
    }

    /// The cells of one store, in order (the reference cell first).
    fn cells(&self, store: &str) -> Vec<Cell> {
        let cell = |runs, ms, mode| Cell {
            store: store.to_owned(),
            runs,
            latency: Duration::from_millis(ms),
            mode,
        };
        let mut out = vec![cell(50, 0, Mode::Alone)];
        let runs = if store == "s3" {
            &self.s3_runs
        } else {
            &self.runs
        };
        for &ms in &self.latencies_ms {
            for &n in runs {
                for &mode in &self.modes {
                    out.push(cell(n, ms, mode));
                }
            }
        }
        out
    }

    /// Run every cell and return the report.
    pub fn run(&self) -> String {
        let mut rows: Vec<Value> = Vec::new();
        let mut skipped = Vec::new();
        for store in &self.stores {
            if !crate::stores::available(store) {
                skipped.push(store.clone());
                continue;
            }
            for alloc in &self.allocators {
                for c in self.cells(store) {
                    let row = run_child(&c, alloc);
                    eprintln!("{}", crate::table::progress(&row));
                    rows.push(row);
                }
            }
        }
        crate::table::report(&rows, &skipped)
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Alone => "alone",
        Mode::Closed => "closed",
        Mode::Open => "open",
    }
}

/// Parse `STORE RUNS LATENCY_MS MODE` (the child's arguments).
pub fn parse_cell(args: &[String]) -> Result<Cell, String> {
    let [store, runs, ms, mode] = args else {
        return Err("--cell needs STORE RUNS LATENCY_MS MODE".into());
    };
    let mode = match mode.as_str() {
        "alone" => Mode::Alone,
        m => *modes(m)?.first().ok_or("no mode")?,
    };
    Ok(Cell {
        store: store.clone(),
        runs: runs.parse().map_err(|_| "bad RUNS")?,
        latency: Duration::from_millis(ms.parse().map_err(|_| "bad LATENCY_MS")?),
        mode,
    })
}

/// The `malloc` library to preload for `alloc` (`None`: the process's own), or why not.
fn preload(alloc: &str) -> Result<Option<PathBuf>, String> {
    let path = match alloc {
        "system" => return Ok(None),
        "jemalloc" => std::env::var_os("AFK_FLEET_JEMALLOC")
            .map_or_else(|| PathBuf::from(JEMALLOC), PathBuf::from),
        p if p.contains('/') => PathBuf::from(p),
        other => {
            return Err(format!(
                "unknown allocator {other:?}: system, jemalloc or a path"
            ));
        }
    };
    if path.is_file() {
        Ok(Some(path))
    } else {
        Err(format!(
            "{} not found (Debian: apt-get install libjemalloc2; or set AFK_FLEET_JEMALLOC)",
            path.display()
        ))
    }
}

/// Debian's jemalloc (package `libjemalloc2`).
const JEMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";

/// Run `c` in a child process with allocator `alloc`; its JSON line, or a row saying why there
/// is none. Under an allocator other than `system`, the row's store reads `store + alloc`.
fn run_child(c: &Cell, alloc: &str) -> Value {
    let mut row = run_child_with(c, alloc);
    if alloc != "system" {
        let name = alloc.rsplit('/').next().unwrap_or(alloc);
        row["store"] = Value::from(format!("{} + {name}", c.store));
    }
    row
}

fn run_child_with(c: &Cell, alloc: &str) -> Value {
    let exe = std::env::current_exe().expect("current exe");
    let ms = c.latency.as_millis().to_string();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--cell",
        &c.store,
        &c.runs.to_string(),
        &ms,
        mode_name(c.mode),
    ]);
    let out = match preload(alloc) {
        Ok(Some(lib)) => cmd.env("LD_PRELOAD", lib).output(),
        Ok(None) => cmd.output(),
        Err(why) => Err(std::io::Error::other(why)),
    };
    let parsed = out.as_ref().ok().and_then(|o| {
        let s = String::from_utf8_lossy(&o.stdout);
        s.lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l).ok())
    });
    parsed.unwrap_or_else(|| {
        let why = match &out {
            Ok(o) => format!("{}: {}", o.status, String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("")),
            Err(e) => e.to_string(),
        };
        serde_json::json!({"store": c.store, "runs": c.runs, "latency_ms": c.latency.as_millis() as u64,
            "mode": mode_name(c.mode), "error": why})
    })
}

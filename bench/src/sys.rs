//! Process and thread accounting from `/proc` (Linux): resident memory and CPU
//! time per runtime, told apart by thread name.

use std::collections::BTreeMap;

fn status_kib(field: &str) -> Option<u64> {
    status_kib_of("self", field)
}

/// A `kB` field of `/proc/<pid>/status` (`pid` may be `self`).
fn status_kib_of(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Current resident set size, KiB.
pub fn rss_kib() -> u64 {
    status_kib("VmRSS:").unwrap_or(0)
}

/// Peak resident set size since start or the last [`reset_peak_rss`], KiB.
pub fn peak_rss_kib() -> u64 {
    status_kib("VmHWM:").unwrap_or(0)
}

/// Peak resident set size of another process, KiB.
pub fn peak_rss_kib_of(pid: u32) -> Option<u64> {
    status_kib_of(&pid.to_string(), "VmHWM:")
}

/// Reset the peak resident set size to the current one (`clear_refs` 5).
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// CPU time (ns, from `schedstat`) of this process's threads, summed by thread name.
pub fn cpu_ns_by_thread_name() -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        let ns = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
            .unwrap_or(0u64);
        *out.entry(name).or_insert(0) += ns;
    }
    out
}

/// The machine: logical CPUs and CPU model.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    format!("{cpus} logical CPU(s), {model}")
}

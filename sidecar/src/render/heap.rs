//! Heap sizes as Cassandra's `cassandra-env.sh` computes them
//! (`calculate_heap_sizes`), from the container's limits instead of the
//! node's memory and processors. Pure.
//!
//! The function is the same in the 3.11, 4.1 and 5.0 scripts:
//!
//! - max heap = max(min(1/2 ram, 1024 MB), min(1/4 ram, 8192 MB))
//! - young generation = min(100 MB * cores, 1/4 max heap)
//!
//! with integer (`expr`) division, memory in MiB (`free -m`) and at least one
//! core. Inside a container `free` and `/proc/cpuinfo` show the node, not
//! the limits, which is why the sidecar computes the sizes and hands them to
//! `cassandra-env.sh` through `MAX_HEAP_SIZE` and `HEAP_NEWSIZE`.

use crds::quantity::Quantity;

/// Heap sizes in MiB, as `MAX_HEAP_SIZE` and `HEAP_NEWSIZE` take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapSizes {
    /// `-Xms` and `-Xmx` (`MAX_HEAP_SIZE`).
    pub max_heap_mb: u64,
    /// `-Xmn` (`HEAP_NEWSIZE`; `cassandra-env.sh` only uses it with CMS).
    pub new_size_mb: u64,
}

impl HeapSizes {
    /// `MAX_HEAP_SIZE` as `cassandra-env.sh` writes it (`2048M`).
    pub fn max_heap_size(&self) -> String {
        format!("{}M", self.max_heap_mb)
    }

    /// `HEAP_NEWSIZE` as `cassandra-env.sh` writes it (`400M`).
    pub fn heap_newsize(&self) -> String {
        format!("{}M", self.new_size_mb)
    }
}

/// `calculate_heap_sizes` of `cassandra-env.sh`, for `system_memory_mb` of
/// memory and `cpu_cores` cores (0 counts as 1, as in the script).
pub fn calculate_heap_sizes(system_memory_mb: u64, cpu_cores: u64) -> HeapSizes {
    let cores = cpu_cores.max(1);
    let half = system_memory_mb / 2;
    let quarter = half / 2;
    let max_heap_mb = half.min(1024).max(quarter.min(8192));
    let max_sensible_yg = 100 * cores;
    let desired_yg = max_heap_mb / 4;
    HeapSizes {
        max_heap_mb,
        new_size_mb: desired_yg.min(max_sensible_yg),
    }
}

/// Memory as `free -m` reports it: whole MiB, rounded down.
pub fn memory_mb(limit: Quantity) -> u64 {
    limit.ceil_units() / (1024 * 1024)
}

/// Cores from a CPU limit: rounded up (a 1500m limit lets the JVM run on
/// two processors, throttled), at least one.
pub fn cpu_cores(limit: Quantity) -> u64 {
    limit.ceil_millis().div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    /// The table the script implies, worked out by hand from its text.
    #[test]
    fn heap_table_of_cassandra_env() {
        // (memory MiB, cores) -> (MAX_HEAP_SIZE MiB, HEAP_NEWSIZE MiB)
        let table = [
            ((512, 1), (256, 64)),    // 1/2 ram wins below 2 GiB
            ((1024, 1), (512, 100)),  // young gen capped at 100 MB per core
            ((1024, 2), (512, 128)),  // young gen capped at 1/4 heap
            ((1500, 2), (750, 187)),  // integer division all the way
            ((2048, 4), (1024, 256)), // 1/2 ram hits its 1024 MB cap
            ((4096, 2), (1024, 200)), // 1/2 capped == 1/4
            ((6000, 8), (1500, 375)), // 1/4 ram wins above 4 GiB
            ((8192, 2), (2048, 200)), // the DESIGN example: 8Gi, 2 cores
            ((8192, 8), (2048, 512)),
            ((16384, 4), (4096, 400)),
            ((32768, 16), (8192, 1600)),
            ((65536, 32), (8192, 2048)), // 1/4 ram capped at 8 GB
            ((262144, 64), (8192, 2048)),
            ((1, 1), (0, 0)),
            ((3, 0), (1, 0)), // zero cores count as one
        ];
        for ((mem, cores), (heap, young)) in table {
            assert_eq!(
                calculate_heap_sizes(mem, cores),
                HeapSizes {
                    max_heap_mb: heap,
                    new_size_mb: young
                },
                "memory {mem} MiB, {cores} cores"
            );
        }
    }

    #[test]
    fn env_values_carry_the_unit_suffix() {
        let h = calculate_heap_sizes(8192, 2);
        assert_eq!(h.max_heap_size(), "2048M");
        assert_eq!(h.heap_newsize(), "200M");
    }

    #[test]
    fn limits_become_mib_and_cores() {
        assert_eq!(memory_mb(q("8Gi")), 8192);
        assert_eq!(memory_mb(q("1500Mi")), 1500);
        // 8G (decimal) is 7629.39 MiB: free -m style rounds down.
        assert_eq!(memory_mb(q("8G")), 7629);
        assert_eq!(cpu_cores(q("2")), 2);
        assert_eq!(cpu_cores(q("1500m")), 2);
        assert_eq!(cpu_cores(q("2001m")), 3);
        assert_eq!(cpu_cores(q("100m")), 1);
        assert_eq!(cpu_cores(q("0")), 1);
    }

    /// Runs the real `calculate_heap_sizes` of every fixture version in bash,
    /// with `uname`, `free` and `egrep` replaced by functions that report the
    /// given memory and cores, and compares it with ours.
    #[test]
    fn matches_the_shell_function_of_every_version() {
        // The boundaries of every branch (1/2 ram at 2048, the caps at
        // 4096 and 32768 MiB, the young generation where 1/4 heap meets
        // 100 MiB per core).
        let cases: Vec<(u64, u64)> = [
            1u64, 511, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097, 6000, 32767, 32768,
            32769, 262144,
        ]
        .into_iter()
        .flat_map(|m| [1u64, 2, 3, 16].map(|c| (m, c)))
        .collect();
        for version in crate::render::fixtures::CASSANDRA_VERSIONS {
            let script =
                crate::render::fixtures::read(&format!("cassandra/{version}/cassandra-env.sh"));
            let start = script.find("calculate_heap_sizes()").unwrap_or_else(|| {
                panic!("{version}: no calculate_heap_sizes in cassandra-env.sh")
            });
            let end = start
                + script[start..]
                    .find("\n}\n")
                    .unwrap_or_else(|| panic!("{version}: calculate_heap_sizes has no end"))
                + 3;
            let function = &script[start..end];
            let mut program = String::from(
                "uname() { echo Linux; }\n\
                 free() { printf 'total used\\nMem: %s 0\\n' \"$MEM\"; }\n\
                 egrep() { echo \"$CORES\"; }\n",
            );
            program.push_str(function);
            for (mem, cores) in &cases {
                program.push_str(&format!(
                    "MEM={mem} CORES={cores}; calculate_heap_sizes; echo \"{mem} {cores} $MAX_HEAP_SIZE $HEAP_NEWSIZE\"\n"
                ));
            }
            let out = Command::new("bash")
                .arg("-c")
                .arg(&program)
                .output()
                .expect("bash runs");
            assert!(
                out.status.success(),
                "{version}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let stdout = String::from_utf8(out.stdout).unwrap();
            let lines: Vec<&str> = stdout.lines().collect();
            assert_eq!(lines.len(), cases.len(), "{version}: {stdout}");
            for ((mem, cores), line) in cases.iter().zip(lines) {
                let h = calculate_heap_sizes(*mem, *cores);
                assert_eq!(
                    line,
                    format!("{mem} {cores} {} {}", h.max_heap_size(), h.heap_newsize()),
                    "cassandra {version}: memory {mem} MiB, {cores} cores"
                );
            }
        }
    }
}

//! The maintenance operations that take time (issue 33): `cleanup`,
//! `upgradesstables` and repairs, full or of subranges (`repairAsync` with
//! the `ranges` option). Each runs for a while ([`Timing::cleanup_ms`],
//! [`Timing::upgrade_ms`], [`Timing::repair_ms`] per range), registered on
//! the ring as a [`RunningOp`] so that a test can see it in progress and
//! kill its node in the middle; its effect on the data directories lands
//! when it completes ([`Ring::advance`]); a kill of its process abandons
//! it, with nothing done. Every start is kept in [`Ring::maintenance_log`]
//! (how many repair commands a node ran, on which ranges). Pure.
//!
//! After Cassandra (3.11, 4.1, 5.0): `StorageService.repairAsync` fills
//! the ranges when none are given (the node's primary ranges with
//! `primaryRange`, else every local range; with `ranges` given,
//! `primaryRange` is not looked at), answers 0 when there is nothing to
//! repair (no range, or a replication factor below 2), and otherwise
//! submits the command; `RepairRunnable` (`RepairCoordinator` in 5.0) then
//! fails it when a requested range straddles a local range ("intersects a
//! local range ... but is not fully contained in one") or lies in none
//! ("Nothing to repair for ... - aborting"), or a neighbour is down.
//! `RepairOption.parse` refuses a range whose ends are equal at the call.
//! `forceTerminateAllRepairSessions` fails the running sessions
//! (`ActiveRepairService.terminateSessions`: "Terminate session is
//! called").

use super::*;

/// A token range `(left, right]` (wrapping when `left >= right`; the whole
/// ring when they are equal), as Cassandra's `Range<Token>`.
pub type TokenRange = (Token, Token);

/// Which maintenance operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Maintenance {
    Cleanup,
    Upgradesstables,
    Repair,
}

/// An operation in progress on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunningOp {
    pub id: u64,
    pub host_id: HostId,
    pub operation: Maintenance,
    pub keyspace: String,
    /// Repairs: the ranges repaired.
    pub ranges: Vec<TokenRange>,
    pub started_ms: u64,
    /// Repairs: until when it waits in the executor's queue.
    pub queued_until_ms: u64,
    pub until_ms: u64,
    /// A repair that fails when its time comes (a range it cannot repair),
    /// with the message.
    #[serde(skip)]
    fails_with: Option<String>,
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "state", content = "message")]
pub enum OpEnd {
    Completed,
    Failed(String),
    /// Its process died first: nothing of it was done.
    Abandoned,
}

/// Where an operation stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum OpState {
    /// A repair command waiting in the executor's queue.
    Queued,
    Running,
    Ended(OpEnd),
    /// No such operation.
    Unknown,
}

/// What `repairAsync` does with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairStart {
    /// Nothing to repair: command 0.
    Nothing,
    /// A command runs: the operation's id.
    Started(u64),
}

/// What `cleanup` does with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CleanupStart {
    /// Answered at once with this status (1: ABORTED, not NORMAL).
    Status(i32),
    /// Runs: the operation's id (status 0 once completed).
    Started(u64),
}

/// Whether `(left, right]` holds `token`.
pub fn range_contains(range: TokenRange, token: Token) -> bool {
    let (left, right) = range;
    if left < right {
        left < token && token <= right
    } else {
        token > left || token <= right
    }
}

/// `Range.contains(Range)`: whether `outer` holds all of `inner`.
pub fn range_contains_range(outer: TokenRange, inner: TokenRange) -> bool {
    if outer.0 == outer.1 {
        return true;
    }
    let outer_wraps = outer.0 >= outer.1;
    let inner_wraps = inner.0 >= inner.1;
    match (outer_wraps, inner_wraps) {
        (a, b) if a == b => outer.0 <= inner.0 && inner.1 <= outer.1,
        (true, false) => outer.0 <= inner.0 || inner.1 <= outer.1,
        _ => false,
    }
}

/// A range as pieces that do not wrap, `(a, b]` with `a < b`.
fn unwrapped(range: TokenRange) -> Vec<(i128, i128)> {
    let (l, r) = (i128::from(range.0), i128::from(range.1));
    let (min, max) = (i128::from(Token::MIN) - 1, i128::from(Token::MAX));
    if l < r {
        vec![(l, r)]
    } else if l == r {
        vec![(min, max)]
    } else {
        vec![(l, max), (min, r)]
    }
}

/// Whether two ranges share a token.
pub fn ranges_intersect(a: TokenRange, b: TokenRange) -> bool {
    unwrapped(a)
        .iter()
        .any(|x| unwrapped(b).iter().any(|y| x.0.max(y.0) < x.1.min(y.1)))
}

/// `Range.toString`: `(left,right]`.
pub fn range_text(range: TokenRange) -> String {
    format!("({},{}]", range.0, range.1)
}

/// The `ranges` option as `RepairOption.parse` reads it: `start:end`
/// pairs separated by commas (a piece without `:` is skipped); an
/// unreadable token is Murmur3's `NumberFormatException`, equal ends
/// "Start and end tokens must be different.".
pub fn parse_ranges(text: &str) -> Result<Vec<TokenRange>, RingError> {
    let mut out = Vec::new();
    for piece in text.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((start, end)) = piece.split_once(':') else {
            continue;
        };
        let token = |t: &str| {
            t.trim()
                .parse::<Token>()
                .map_err(|_| RingError::RepairOption {
                    message: format!("For input string: \"{}\"", t.trim()),
                })
        };
        let (start, end) = (token(start)?, token(end)?);
        if start == end {
            return Err(RingError::RepairOption {
                message: "Start and end tokens must be different.".into(),
            });
        }
        out.push((start, end));
    }
    Ok(out)
}

impl Ring {
    /// The ranges of the ring now, each `(previous token, token]` with its
    /// replicas in `keyspace` (primary first).
    fn ranges_of(&self, keyspace: &Keyspace) -> Vec<(TokenRange, Vec<HostId>)> {
        let map = self.natural_map();
        let tokens: Vec<Token> = self.token_to_endpoint().into_keys().collect();
        tokens
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let prev = if i == 0 {
                    tokens[tokens.len() - 1]
                } else {
                    tokens[i - 1]
                };
                ((prev, t), map.replicas(&keyspace.replication, t))
            })
            .collect()
    }

    /// `StorageService.getLocalRanges(keyspace)`: every range `host_id`
    /// replicates.
    pub fn local_ranges(
        &self,
        host_id: &str,
        keyspace: &str,
    ) -> Result<Vec<TokenRange>, RingError> {
        let ks = self.keyspace_or_err(keyspace)?;
        Ok(self
            .ranges_of(ks)
            .into_iter()
            .filter(|(_, replicas)| replicas.iter().any(|h| h == host_id))
            .map(|(r, _)| r)
            .collect())
    }

    /// `StorageService.getPrimaryRanges(keyspace)`: the ranges whose first
    /// replica is `host_id` (each range is some node's primary range).
    pub fn primary_ranges(
        &self,
        host_id: &str,
        keyspace: &str,
    ) -> Result<Vec<TokenRange>, RingError> {
        let ks = self.keyspace_or_err(keyspace)?;
        Ok(self
            .ranges_of(ks)
            .into_iter()
            .filter(|(_, replicas)| replicas.first().is_some_and(|h| h == host_id))
            .map(|(r, _)| r)
            .collect())
    }

    /// Whether `host_id`'s own disk has `key` of `keyspace`: a read at ONE
    /// answered by that node alone.
    pub fn read_one_from(&self, host_id: &str, keyspace: &str, key: &str) -> bool {
        self.holds(host_id, keyspace, key)
    }

    /// The keys of `keyspace` that `host_id` replicates but does not hold:
    /// what a read at ONE from it alone misses.
    pub fn missing_on(&self, host_id: &str, keyspace: &str) -> Vec<String> {
        let Some(ks) = self.keyspaces.get(keyspace) else {
            return Vec::new();
        };
        let map = self.natural_map();
        ks.keys
            .iter()
            .filter(|(key, token)| {
                map.replicas(&ks.replication, **token)
                    .iter()
                    .any(|h| h == host_id)
                    && !self.holds(host_id, keyspace, key)
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The keys of `keyspace` on `host_id`'s disk that it does not
    /// replicate: what a cleanup drops.
    pub fn unowned_on(&self, host_id: &str, keyspace: &str) -> Vec<String> {
        let (Some(ks), Some(disk)) = (self.keyspaces.get(keyspace), self.disk_of(host_id)) else {
            return Vec::new();
        };
        let map = self.natural_map();
        disk.copies
            .get(keyspace)
            .into_iter()
            .flatten()
            .filter(|key| {
                !map.replicas(&ks.replication, token_of(key.as_bytes()))
                    .iter()
                    .any(|h| h == host_id)
            })
            .cloned()
            .collect()
    }

    fn register(
        &mut self,
        host_id: &str,
        operation: Maintenance,
        keyspace: &str,
        ranges: Vec<TokenRange>,
        duration_ms: u64,
        fails_with: Option<String>,
    ) -> u64 {
        let queue_ms = if operation == Maintenance::Repair {
            self.options.timing.repair_queue_ms
        } else {
            0
        };
        self.next_op += 1;
        let op = RunningOp {
            id: self.next_op,
            host_id: host_id.to_string(),
            operation,
            keyspace: keyspace.to_string(),
            ranges,
            started_ms: self.now_ms,
            queued_until_ms: self.now_ms + queue_ms,
            until_ms: self.now_ms + queue_ms + duration_ms,
            fails_with,
        };
        self.maintenance_log.push(op.clone());
        self.maintenance.insert(op.id, op);
        self.next_op
    }

    /// `forceKeyspaceCleanup` of `keyspace` on `host_id`: the checks of
    /// [`Ring::cleanup_keyspace`], then a cleanup that runs for
    /// [`Timing::cleanup_ms`] and drops the keys the node no longer
    /// replicates (as the ring is then) when it completes.
    pub fn start_cleanup(
        &mut self,
        host_id: &str,
        keyspace: &str,
    ) -> Result<CleanupStart, RingError> {
        let status = self.cleanup_checks(host_id, keyspace)?;
        if status != 0 {
            return Ok(CleanupStart::Status(status));
        }
        let ms = self.options.timing.cleanup_ms;
        Ok(CleanupStart::Started(self.register(
            host_id,
            Maintenance::Cleanup,
            keyspace,
            Vec::new(),
            ms,
            None,
        )))
    }

    /// `upgradeSSTables` of `keyspace` on `host_id`, which has old-format
    /// files to rewrite (the node's own files; the ring only times it):
    /// runs for [`Timing::upgrade_ms`].
    pub fn start_upgrade(&mut self, host_id: &str, keyspace: &str) -> Result<u64, RingError> {
        self.running(host_id)?;
        let ms = self.options.timing.upgrade_ms;
        Ok(self.register(
            host_id,
            Maintenance::Upgradesstables,
            keyspace,
            Vec::new(),
            ms,
            None,
        ))
    }

    /// `repairAsync(keyspace, options)` on `host_id` (see the module's
    /// doc): the ranges are the `ranges` option's, else the primary ranges
    /// with `primaryRange`, else every local range. A command that will
    /// fail still starts (and fails at once).
    pub fn start_repair(
        &mut self,
        host_id: &str,
        keyspace: &str,
        options: &BTreeMap<String, String>,
    ) -> Result<RepairStart, RingError> {
        self.running(host_id)?;
        let ks = self.keyspace_or_err(keyspace)?.clone();
        let flag = |key: &str| {
            options
                .get(key)
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        };
        let mut ranges = parse_ranges(options.get("ranges").map_or("", String::as_str))?;
        if ranges.is_empty() {
            ranges = if flag("primaryRange") {
                self.primary_ranges(host_id, keyspace)?
            } else {
                self.local_ranges(host_id, keyspace)?
            };
        }
        if ranges.is_empty() || ks.replication.total_rf() < 2 {
            return Ok(RepairStart::Nothing);
        }
        let local = self.local_ranges(host_id, keyspace)?;
        let mut failure = None;
        for &range in &ranges {
            let mut container = None;
            for &l in &local {
                if range_contains_range(l, range) {
                    container = Some(l);
                    break;
                } else if ranges_intersect(l, range) {
                    failure = Some(format!(
                        "Requested range {} intersects a local range ({}) but is not fully contained in one; this would lead to imprecise repair. keyspace: {keyspace}",
                        range_text(range),
                        range_text(l)
                    ));
                    break;
                }
            }
            if failure.is_some() {
                break;
            }
            if container.is_none() {
                failure = Some(format!(
                    "Nothing to repair for {} in {keyspace} - aborting",
                    range_text(range)
                ));
                break;
            }
        }
        // RepairRunnable's prepare: every neighbour must be alive.
        if failure.is_none()
            && let Some(dead) = self.dead_neighbour(host_id, &ks, &ranges)
        {
            failure = Some(
                RingError::RepairNeighborDown {
                    address: self.address_of(&dead),
                }
                .to_string(),
            );
        }
        let ms = if failure.is_some() {
            0
        } else {
            self.options.timing.repair_ms * ranges.len() as u64
        };
        Ok(RepairStart::Started(self.register(
            host_id,
            Maintenance::Repair,
            keyspace,
            ranges,
            ms,
            failure,
        )))
    }

    /// `forceTerminateAllRepairSessions` on `host_id`: its running repairs
    /// fail, nothing more of them done. How many.
    pub fn terminate_repairs(&mut self, host_id: &str) -> Result<usize, RingError> {
        self.running(host_id)?;
        let ids: Vec<u64> = self
            .maintenance
            .values()
            .filter(|op| op.host_id == host_id && op.operation == Maintenance::Repair)
            .map(|op| op.id)
            .collect();
        for id in &ids {
            self.maintenance.remove(id);
            self.maintenance_ended
                .insert(*id, OpEnd::Failed("Terminate session is called".into()));
        }
        Ok(ids.len())
    }

    /// Where operation `id` stands.
    pub fn op_state(&self, id: u64) -> OpState {
        if let Some(op) = self.maintenance.get(&id) {
            if self.now_ms < op.queued_until_ms {
                OpState::Queued
            } else {
                OpState::Running
            }
        } else if let Some(end) = self.maintenance_ended.get(&id) {
            OpState::Ended(end.clone())
        } else {
            OpState::Unknown
        }
    }

    /// The operations running on `host_id`.
    pub fn running_ops(&self, host_id: &str) -> Vec<&RunningOp> {
        self.maintenance
            .values()
            .filter(|op| op.host_id == host_id)
            .collect()
    }

    /// Every operation started, in order.
    pub fn maintenance_log(&self) -> &[RunningOp] {
        &self.maintenance_log
    }

    /// The operations of `host_id`'s process end with it, abandoned.
    pub(super) fn abandon_ops(&mut self, host_id: &str) {
        let ids: Vec<u64> = self
            .maintenance
            .values()
            .filter(|op| op.host_id == host_id)
            .map(|op| op.id)
            .collect();
        for id in ids {
            self.maintenance.remove(&id);
            self.maintenance_ended.insert(id, OpEnd::Abandoned);
        }
    }

    /// Completes the operations due by now; whether any ended.
    pub(super) fn complete_ops(&mut self) -> bool {
        let now = self.now_ms;
        let due: Vec<u64> = self
            .maintenance
            .values()
            .filter(|op| op.until_ms <= now)
            .map(|op| op.id)
            .collect();
        for id in &due {
            let op = self.maintenance.remove(id).expect("due");
            let end = self.complete(&op);
            self.maintenance_ended.insert(*id, end);
        }
        !due.is_empty()
    }

    fn complete(&mut self, op: &RunningOp) -> OpEnd {
        if let Some(message) = &op.fails_with {
            return OpEnd::Failed(message.clone());
        }
        match op.operation {
            Maintenance::Cleanup => {
                self.drop_unowned(&op.host_id, Some(&op.keyspace));
                OpEnd::Completed
            }
            Maintenance::Upgradesstables => OpEnd::Completed,
            Maintenance::Repair => {
                match self.repair_ranges(&op.host_id, &op.keyspace, &op.ranges) {
                    Ok(()) => OpEnd::Completed,
                    Err(e) => OpEnd::Failed(e.to_string()),
                }
            }
        }
    }

    /// A replica of `ranges` (the local ranges holding them) that is down.
    fn dead_neighbour(
        &self,
        host_id: &str,
        ks: &Keyspace,
        ranges: &[TokenRange],
    ) -> Option<HostId> {
        let mut neighbours = BTreeSet::new();
        for (range, replicas) in self.ranges_of(ks) {
            if ranges.iter().any(|r| range_contains_range(range, *r))
                && replicas.iter().any(|h| h == host_id)
            {
                neighbours.extend(replicas);
            }
        }
        neighbours.into_iter().find(|h| !self.is_up(h))
    }

    /// The repair of `ranges` of `keyspace` coordinated by `host_id`: every
    /// replica of those ranges must be up; then each key whose token is in
    /// them gets to every replica the copy any of them has.
    fn repair_ranges(
        &mut self,
        host_id: &str,
        keyspace: &str,
        ranges: &[TokenRange],
    ) -> Result<(), RingError> {
        let ks = self.keyspace_or_err(keyspace)?.clone();
        let map = self.natural_map();
        if let Some(dead) = self.dead_neighbour(host_id, &ks, ranges) {
            return Err(RingError::RepairNeighborDown {
                address: self.address_of(&dead),
            });
        }
        let mut plan = CopyPlan::new();
        for (key, token) in &ks.keys {
            if !ranges.iter().any(|r| range_contains(*r, *token)) {
                continue;
            }
            let replicas = map.replicas(&ks.replication, *token);
            if !replicas.iter().any(|h| self.holds(h, keyspace, key)) {
                continue;
            }
            for h in replicas {
                plan.push((
                    self.nodes[&h].data_dir.clone(),
                    keyspace.to_string(),
                    key.clone(),
                ));
            }
        }
        self.apply_copies(plan);
        Ok(())
    }
}

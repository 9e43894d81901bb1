//! Leaving the ring and the other operations on members: decommission,
//! removenode, kill, disk wipe, drain, repair and cleanup. Pure, like the
//! rest of the model.

use super::*;

impl Ring {
    // ---- decommission ----

    /// `StorageService.decommission` (`force` is ignored on 3.11, whose
    /// operation has no argument): the checks, then LEAVING. The JMX call
    /// blocks until [`Ring::finish`] (or [`Ring::advance`]) streams the
    /// ranges away.
    pub fn start_decommission(
        &mut self,
        host_id: &str,
        force: bool,
    ) -> Result<DecommissionStart, RingError> {
        let process = self.running(host_id)?.clone();
        let node = &self.nodes[host_id];
        let v5 = node.version >= Version::V5_0;
        let decommissioning = process.busy.map(|b| b.operation) == Some(Operation::Decommission);
        if v5 && (process.mode == OperationMode::Decommissioned || decommissioning) {
            return Ok(DecommissionStart::AlreadyDone);
        }
        if decommissioning {
            return Err(RingError::StillDecommissioning);
        }
        if !matches!(node.state, RingState::Normal | RingState::Leaving) {
            return Err(RingError::NotAMember);
        }
        let others = self
            .nodes
            .values()
            .filter(|n| n.host_id != host_id && n.state == RingState::Normal)
            .count();
        if others == 0 {
            return Err(RingError::NoOtherNormalNodes);
        }
        let allowed = matches!(process.mode, OperationMode::Normal | OperationMode::Leaving)
            || (v5 && process.mode == OperationMode::DecommissionFailed);
        if !allowed {
            return Err(RingError::WrongMode { mode: process.mode });
        }
        if node.version >= Version::V4_0 && !force {
            let members: Vec<&Node> = self.nodes.values().filter(|n| n.is_natural()).collect();
            let refusal = self.keyspaces.values().find_map(|ks| {
                let (rf, nodes) = match &ks.replication {
                    Replication::Simple { replication_factor } => {
                        (*replication_factor, members.len())
                    }
                    Replication::NetworkTopology { .. } => (
                        ks.replication.rf_in(&node.dc),
                        members.iter().filter(|n| n.dc == node.dc).count(),
                    ),
                };
                (rf > 0 && nodes <= rf).then(|| RingError::NotEnoughNodes {
                    keyspace: ks.name.clone(),
                    rf,
                    nodes,
                })
            });
            if let Some(refusal) = refusal {
                // 5.0 marks the failed attempt (DECOMMISSION_FAILED, from
                // which a retry is allowed).
                if v5 {
                    self.set_mode(host_id, OperationMode::DecommissionFailed);
                }
                return Err(refusal);
            }
        }
        let now = self.now_ms;
        let until_ms = now + self.options.timing.decommission_ms;
        let node = self.nodes.get_mut(host_id).expect("exists");
        node.state = RingState::Leaving;
        let p = node.process.as_mut().expect("running");
        if p.mode != OperationMode::Leaving {
            p.status_since_ms = now;
        }
        p.mode = OperationMode::Leaving;
        p.busy = Some(Busy {
            operation: Operation::Decommission,
            until_ms,
        });
        Ok(DecommissionStart::Started { until_ms })
    }

    /// Streams the leaving node's ranges to their new replicas (each gets
    /// the copies the leaving node holds), then the node leaves the ring:
    /// mode DECOMMISSIONED, data directory marked decommissioned. A new
    /// replica that is down fails the stream: DECOMMISSION_FAILED on 5.0,
    /// still LEAVING before.
    pub(super) fn finish_decommission(&mut self, host_id: &str) -> Result<(), RingError> {
        let plan = match self.plan_decommission(host_id) {
            Ok(plan) => plan,
            Err(e) => {
                let mode = if self.nodes[host_id].version >= Version::V5_0 {
                    OperationMode::DecommissionFailed
                } else {
                    OperationMode::Leaving
                };
                self.set_mode(host_id, mode);
                return Err(e);
            }
        };
        self.apply_copies(plan);
        let node = self.nodes.get_mut(host_id).expect("exists");
        node.state = RingState::Left;
        let dir = node.data_dir.clone();
        self.set_mode(host_id, OperationMode::Decommissioned);
        if let Some(d) = self.data_dirs.get_mut(&dir) {
            d.bootstrap = BootstrapState::Decommissioned;
        }
        self.hints.remove(host_id);
        Ok(())
    }

    fn plan_decommission(&self, host_id: &str) -> Result<CopyPlan, RingError> {
        let before = self.natural_map();
        let after =
            self.token_map(|n| (n.is_natural() && n.host_id != host_id).then(|| n.tokens.clone()));
        let mut plan = CopyPlan::new();
        for ks in self.keyspaces.values() {
            for (key, token) in &ks.keys {
                let old = before.replicas(&ks.replication, *token);
                if !old.iter().any(|h| h == host_id) {
                    continue;
                }
                for new in after.replicas(&ks.replication, *token) {
                    if old.contains(&new) {
                        continue;
                    }
                    if !self.is_up(&new) {
                        return Err(RingError::StreamTargetDown {
                            address: self.address_of(&new),
                        });
                    }
                    self.check_stream(host_id, &new, Operation::Decommission)?;
                    if self.holds(host_id, &ks.name, key) {
                        plan.push((
                            self.nodes[&new].data_dir.clone(),
                            ks.name.clone(),
                            key.clone(),
                        ));
                    }
                }
            }
        }
        Ok(plan)
    }

    // ---- other operations ----

    /// `removenode <host id>` run on `coordinator`: the dead member leaves
    /// the ring and each new replica of its ranges fetches from a live
    /// remaining replica. Blocks until done (one step here).
    pub fn remove_node(&mut self, coordinator: &str, target: &str) -> Result<(), RingError> {
        self.running(coordinator)?;
        let Some(node) = self.nodes.get(target) else {
            return Err(RingError::HostIdNotFound);
        };
        if target == coordinator {
            return Err(RingError::RemoveSelf);
        }
        if node.is_up() {
            return Err(RingError::RemoveLive {
                address: node.address.clone(),
            });
        }
        if !node.is_natural() {
            return Err(RingError::RemoveNotMember);
        }
        let before = self.natural_map();
        let after =
            self.token_map(|n| (n.is_natural() && n.host_id != target).then(|| n.tokens.clone()));
        let mut plan = CopyPlan::new();
        for ks in self.keyspaces.values() {
            for (key, token) in &ks.keys {
                let old = before.replicas(&ks.replication, *token);
                if !old.iter().any(|h| h == target) {
                    continue;
                }
                let remaining: Vec<HostId> = old.iter().filter(|h| *h != target).cloned().collect();
                for new in after.replicas(&ks.replication, *token) {
                    if old.contains(&new) || !self.is_up(&new) {
                        continue;
                    }
                    if let Some(s) = self.pick_source(&new, &remaining)
                        && self.holds(s, &ks.name, key)
                    {
                        plan.push((
                            self.nodes[&new].data_dir.clone(),
                            ks.name.clone(),
                            key.clone(),
                        ));
                    }
                }
            }
        }
        self.apply_copies(plan);
        self.nodes.remove(target);
        self.hints.remove(target);
        Ok(())
    }

    /// The process dies (kill -9, OOM, Pod deleted): the member stays in the
    /// ring, down; its data directory is kept. An operation in progress is
    /// abandoned where it was.
    pub fn kill(&mut self, host_id: &str) -> Result<(), RingError> {
        let now = self.now_ms;
        let ended = self.ended_process(host_id);
        let node = self
            .nodes
            .get_mut(host_id)
            .ok_or_else(|| RingError::UnknownNode {
                host_id: host_id.to_string(),
            })?;
        if node.process.take().is_some() {
            node.last_process = ended;
            if node.down_since_ms.is_none() {
                node.down_since_ms = Some(now);
            }
        }
        let left = node.state == RingState::Left;
        // Its cleanups, upgrades and repairs die with the process.
        self.abandon_ops(host_id);
        if left {
            // Gossip forgets a departed member once its process is gone.
            self.nodes.remove(host_id);
        }
        Ok(())
    }

    /// The process stops cleanly (SIGTERM: Cassandra's shutdown hook drains
    /// and `Gossiper.stop` announces the shutdown, so the others record
    /// `shutdown,true`), then exits like [`Ring::kill`].
    pub fn stop(&mut self, host_id: &str) -> Result<(), RingError> {
        if self.running(host_id).is_ok() {
            self.drain(host_id)?;
        }
        self.kill(host_id)
    }

    /// `nodetool removenode force` (StorageService.java,
    /// `forceRemoveCompletion`): every member still LEAVING (a decommission
    /// or removal that never completed) is excised from the ring at once,
    /// its tokens and hints dropped without streaming: the ranges it held
    /// lose that copy. With none, Cassandra warns "No nodes to force removal
    /// on, call 'removenode' first" and returns normally (the empty list).
    pub fn force_remove_completion(&mut self, coordinator: &str) -> Result<Vec<HostId>, RingError> {
        self.running(coordinator)?;
        let leaving: Vec<HostId> = self
            .nodes
            .values()
            .filter(|n| n.state == RingState::Leaving)
            .map(|n| n.host_id.clone())
            .collect();
        for h in &leaving {
            self.nodes.remove(h);
            self.hints.remove(h);
        }
        Ok(leaving)
    }

    /// The disk is lost (local SSD gone, PVC deleted): the process on it
    /// dies and every copy, the host ID and the bootstrap state go with it.
    pub fn wipe_data_dir(&mut self, data_dir: &str) {
        let running: Vec<HostId> = self
            .nodes
            .values()
            .filter(|n| n.data_dir == data_dir && n.process.is_some())
            .map(|n| n.host_id.clone())
            .collect();
        for h in running {
            let _ = self.kill(&h);
        }
        self.data_dirs.remove(data_dir);
    }

    /// `nodetool drain`: DRAINED; gossip stops, so the others see it down.
    pub fn drain(&mut self, host_id: &str) -> Result<(), RingError> {
        self.running(host_id)?;
        let now = self.now_ms;
        let node = self.nodes.get_mut(host_id).expect("exists");
        node.down_since_ms.get_or_insert(now);
        let p = node.process.as_mut().expect("running");
        if p.mode != OperationMode::Drained {
            p.status_since_ms = now;
        }
        p.mode = OperationMode::Drained;
        p.busy = None;
        Ok(())
    }

    /// `nodetool repair` of `host_id`'s ranges: for every key it
    /// replicates, each live replica gets the copy if any live replica has
    /// it.
    pub fn repair(&mut self, host_id: &str) -> Result<(), RingError> {
        self.running(host_id)?;
        let map = self.natural_map();
        let mut plan = CopyPlan::new();
        for ks in self.keyspaces.values() {
            for (key, token) in &ks.keys {
                let replicas = map.replicas(&ks.replication, *token);
                if !replicas.iter().any(|h| h == host_id) {
                    continue;
                }
                let live: Vec<&HostId> = replicas.iter().filter(|h| self.is_up(h)).collect();
                if !live.iter().any(|h| self.holds(h, &ks.name, key)) {
                    continue;
                }
                for h in live {
                    plan.push((self.nodes[h].data_dir.clone(), ks.name.clone(), key.clone()));
                }
            }
        }
        self.apply_copies(plan);
        Ok(())
    }

    /// `nodetool repair KEYSPACE` as `StorageService.repairAsync` runs it
    /// (`RepairRunnable.runMayThrow`, 3.11/4.x/5.0): a full repair of
    /// every range `host_id` replicates in the keyspace. Nothing to do
    /// (false: `repairAsync` returns command 0, "Replication factor is 1")
    /// when the keyspace has fewer than 2 replicas; refused when a neighbour
    /// (another replica of those ranges) is down. Then every live replica
    /// of each of its keys gets the copy any of them has.
    pub fn repair_keyspace(&mut self, host_id: &str, keyspace: &str) -> Result<bool, RingError> {
        self.running(host_id)?;
        let ks = self.keyspace_or_err(keyspace)?;
        let map = self.natural_map();
        // The neighbours: the other replicas of every range it replicates
        // (a range ends at a token of the ring), whether keys are there
        // or not.
        let mut replicas_of_ranges = BTreeSet::new();
        for token in self.all_tokens() {
            let replicas = map.replicas(&ks.replication, token);
            if replicas.iter().any(|h| h == host_id) {
                replicas_of_ranges.extend(replicas);
            }
        }
        if ks.replication.total_rf() < 2 {
            return Ok(false);
        }
        if let Some(dead) = replicas_of_ranges.iter().find(|h| !self.is_up(h)) {
            return Err(RingError::RepairNeighborDown {
                address: self.address_of(dead),
            });
        }
        let mut plan = CopyPlan::new();
        for (key, token) in &ks.keys {
            let replicas = map.replicas(&ks.replication, *token);
            if !replicas.iter().any(|h| h == host_id)
                || !replicas.iter().any(|h| self.holds(h, keyspace, key))
            {
                continue;
            }
            for h in replicas {
                plan.push((
                    self.nodes[&h].data_dir.clone(),
                    ks.name.clone(),
                    key.clone(),
                ));
            }
        }
        self.apply_copies(plan);
        Ok(true)
    }

    /// `nodetool cleanup KEYSPACE` as `StorageService.forceKeyspaceCleanup`
    /// runs it (4.1 and 5.0, and 3.11 since 3.11.15: the pending ranges
    /// guard of CASSANDRA-16418), then `CompactionManager.performCleanup`:
    /// refused for a local system keyspace and while `host_id` is gaining
    /// ranges (a node joining, leaving or replacing); status 1 (ABORTED,
    /// "Cleanup cannot run before a node has joined the ring") when it is
    /// not NORMAL; else the copies of keys it no longer replicates go, and
    /// the status is 0 (SUCCESSFUL).
    pub fn cleanup_keyspace(&mut self, host_id: &str, keyspace: &str) -> Result<i32, RingError> {
        let status = self.cleanup_checks(host_id, keyspace)?;
        if status == 0 {
            self.drop_unowned(host_id, Some(keyspace));
        }
        Ok(status)
    }

    /// The checks of [`Ring::cleanup_keyspace`]: the refusals, else the
    /// status it would answer (1: not NORMAL, nothing done; 0: it runs).
    pub(super) fn cleanup_checks(&self, host_id: &str, keyspace: &str) -> Result<i32, RingError> {
        if matches!(
            keyspace,
            "system" | "system_schema" | "system_views" | "system_virtual_schema"
        ) {
            return Err(RingError::CleanupSystemKeyspace);
        }
        let mode = self.running(host_id)?.mode;
        let ks = self.keyspace_or_err(keyspace)?;
        let (now, future) = (self.natural_map(), self.future_map());
        let gains = self.all_tokens().into_iter().any(|token| {
            future
                .replicas(&ks.replication, token)
                .iter()
                .any(|h| h == host_id)
                && !now
                    .replicas(&ks.replication, token)
                    .iter()
                    .any(|h| h == host_id)
        });
        if gains {
            return Err(RingError::CleanupPendingRanges);
        }
        Ok(if mode == OperationMode::Normal { 0 } else { 1 })
    }

    /// `nodetool cleanup`: drops the copies of keys `host_id` no longer
    /// replicates.
    pub fn cleanup(&mut self, host_id: &str) -> Result<(), RingError> {
        self.running(host_id)?;
        self.drop_unowned(host_id, None);
        Ok(())
    }

    /// Every token of every member (joining ones included): the ends of
    /// the ranges, now or once movements are done.
    fn all_tokens(&self) -> BTreeSet<Token> {
        self.nodes
            .values()
            .flat_map(|n| n.tokens.iter().copied())
            .collect()
    }

    /// Drops the copies (of one keyspace, or all) that `host_id` holds but
    /// no longer replicates.
    pub(super) fn drop_unowned(&mut self, host_id: &str, only: Option<&str>) {
        let map = self.natural_map();
        let dir = self.nodes[host_id].data_dir.clone();
        let mut drop: Vec<(String, String)> = Vec::new();
        if let Some(d) = self.data_dirs.get(&dir) {
            for (ks, keys) in &d.copies {
                if only.is_some_and(|o| o != ks) {
                    continue;
                }
                let Some(keyspace) = self.keyspaces.get(ks) else {
                    continue;
                };
                for key in keys {
                    let token = token_of(key.as_bytes());
                    if !map
                        .replicas(&keyspace.replication, token)
                        .iter()
                        .any(|h| h == host_id)
                    {
                        drop.push((ks.clone(), key.clone()));
                    }
                }
            }
        }
        if let Some(d) = self.data_dirs.get_mut(&dir) {
            for (ks, key) in drop {
                if let Some(keys) = d.copies.get_mut(&ks) {
                    keys.remove(&key);
                }
            }
        }
    }
}

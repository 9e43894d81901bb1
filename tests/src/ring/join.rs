//! Joining the ring: starting a node (Cassandra's startup rules),
//! bootstrap and replacement, and the completions of the operations that
//! stream ([`Ring::advance`], [`Ring::finish`]). Pure, like the rest of the
//! model.

use super::*;

impl Ring {
    // ---- startup ----

    /// Starts a Cassandra process with `config`, applying Cassandra's
    /// startup rules (`StorageService.prepareToJoin`, `joinTokenRing`,
    /// `prepareForReplacement`, `Gossiper.isSafeForStartup`). On success
    /// the process runs, NORMAL or JOINING; a JOINING node completes with
    /// [`Ring::finish`] (or [`Ring::advance`]). On error nothing changed
    /// (the process exits).
    pub fn start(&mut self, config: &NodeConfig) -> Result<Started, RingError> {
        if let Some(n) = self.node_on(&config.data_dir) {
            return Err(RingError::DataDirInUse {
                data_dir: config.data_dir.clone(),
                host_id: n.host_id.clone(),
            });
        }
        if let Some(n) = self
            .nodes
            .values()
            .find(|n| n.address == config.address && n.process.is_some())
        {
            return Err(RingError::AddressInUse {
                address: config.address.clone(),
                host_id: n.host_id.clone(),
            });
        }
        let mut disk = self
            .data_dirs
            .get(&config.data_dir)
            .cloned()
            .unwrap_or_else(|| DataDir::empty(&config.data_dir));
        let mut log = Vec::new();

        // SystemKeyspace.checkHealth.
        if let Some(saved) = &disk.cluster_name
            && saved != &config.cluster_name
        {
            return Err(RingError::SavedClusterName {
                saved: saved.clone(),
                configured: config.cluster_name.clone(),
            });
        }
        // Gossip drops messages of another cluster: no peer answers.
        let live_members = self.nodes.values().any(Node::is_up);
        if let Some(ring) = &self.cluster_name
            && ring != &config.cluster_name
            && live_members
        {
            return Err(RingError::ClusterNameMismatch {
                ring: ring.clone(),
                configured: config.cluster_name.clone(),
            });
        }
        // StartupChecks.checkSSTablesFormat (Descriptor.isCompatible): a
        // node reads sstables of its own major and of the one before; data
        // of a newer major (a downgrade) or of an older one (3.11 data under
        // 5.0) stops the start.
        if let Some(written) = disk.written_by
            && (written.major > config.version.major || config.version.major > written.major + 1)
        {
            return Err(RingError::UnreadableSstables {
                data_dir: config.data_dir.clone(),
                written,
                running: config.version,
            });
        }
        if disk.bootstrap == BootstrapState::Decommissioned {
            if !config.override_decommission {
                return Err(RingError::Decommissioned);
            }
            log.push("This node was decommissioned, but overriding by operator request.".into());
            disk.bootstrap = BootstrapState::Completed;
        }
        let bootstrapped = disk.bootstrap == BootstrapState::Completed;

        // The shadow round: a node outside its own seed list needs a live
        // seed (a bootstrapped one also knows its saved peers).
        let is_seed = config.is_seed();
        let seed_up = self
            .nodes
            .values()
            .any(|n| n.is_up() && config.seeds.contains(&n.address));
        if !(is_seed || seed_up || (bootstrapped && live_members)) {
            return Err(RingError::NoSeedReachable);
        }
        if is_seed && !live_members {
            log.push(
                "Unable to gossip with any peers but continuing anyway since node is in its own seed list"
                    .into(),
            );
        }

        // StorageService.isReplacing.
        let replace_target = if config.replace_address.is_some() {
            config.replace_address.clone()
        } else if let Some(first_boot) = &config.replace_address_first_boot {
            if bootstrapped {
                log.push(
                    "Replace address on first boot requested; this node is already bootstrapped"
                        .into(),
                );
                None
            } else {
                Some(first_boot.clone())
            }
        } else {
            None
        };
        let should_bootstrap = config.auto_bootstrap && !bootstrapped && !is_seed;
        if config.auto_bootstrap && !bootstrapped && is_seed {
            log.push(
                "This node will not auto bootstrap because it is configured to be a seed node."
                    .into(),
            );
        }

        let previous_generation = disk.generation;
        let result = match replace_target {
            Some(target) => self.start_replacing(
                config,
                &mut disk,
                &target,
                bootstrapped,
                should_bootstrap,
                &mut log,
            ),
            None => self.start_joining(config, &mut disk, should_bootstrap, &mut log),
        }?;
        disk.cluster_name = Some(config.cluster_name.clone());
        disk.written_by = Some(config.version);
        disk.generation = Some(self.next_generation(&result.host_id, previous_generation));
        self.data_dirs.insert(disk.id.clone(), disk);
        if self.cluster_name.is_none() || !live_members {
            self.cluster_name = Some(config.cluster_name.clone());
        }
        self.begin_gossip(&result.host_id);
        if self.is_up(&result.host_id) {
            self.deliver_hints(&result.host_id);
        }
        Ok(result)
    }

    fn process(config: &NodeConfig, mode: OperationMode, busy: Option<Busy>) -> Option<Process> {
        Some(Process {
            mode,
            busy,
            seeds: config.seeds.clone(),
            // Set by `begin_gossip` once the start succeeded.
            generation: 0,
            started_ms: 0,
            up_since_ms: 0,
            status_since_ms: 0,
        })
    }

    fn new_member(
        config: &NodeConfig,
        host_id: &str,
        tokens: Vec<Token>,
        state: RingState,
        process: Option<Process>,
    ) -> Node {
        Node {
            host_id: host_id.to_string(),
            address: config.address.clone(),
            dc: config.dc.clone(),
            rack: config.rack.clone(),
            tokens,
            state,
            version: config.version,
            release: config.release(),
            messaging_version: config.messaging_version(),
            data_dir: config.data_dir.clone(),
            process,
            down_since_ms: None,
            last_process: None,
        }
    }

    fn start_replacing(
        &mut self,
        config: &NodeConfig,
        disk: &mut DataDir,
        target: &str,
        bootstrapped: bool,
        should_bootstrap: bool,
        log: &mut Vec<String>,
    ) -> Result<Started, RingError> {
        if bootstrapped {
            return Err(RingError::ReplaceBootstrapped);
        }
        if !should_bootstrap && !config.allow_unsafe_replace {
            return Err(RingError::UnsafeReplace);
        }
        let replaced = self
            .nodes
            .values()
            .filter(|n| {
                n.address == target
                    && matches!(
                        n.state,
                        RingState::Normal | RingState::Leaving | RingState::Hibernating
                    )
            })
            .map(|n| n.host_id.clone())
            .next()
            .ok_or_else(|| RingError::ReplaceUnknown {
                address: target.to_string(),
            })?;
        if self.is_up(&replaced) {
            return Err(RingError::ReplaceLive {
                address: target.to_string(),
            });
        }
        let same_address = target == config.address;
        // An earlier replacement attempt that died is superseded.
        let stale: Vec<HostId> = self
            .nodes
            .values()
            .filter(|n| {
                n.process.is_none()
                    && n.state
                        == RingState::Replacing {
                            replaced: replaced.clone(),
                        }
            })
            .map(|n| n.host_id.clone())
            .collect();
        for h in stale {
            self.nodes.remove(&h);
        }
        let tokens = self.nodes[&replaced].tokens.clone();
        let host_id = if same_address {
            log.push(format!(
                "Writes will not be forwarded to this node during replacement because it has the same address as the node to be replaced ({target}). If the previous node has been down for longer than max_hint_window, repair must be run after the replacement process in order to make this node consistent."
            ));
            replaced.clone()
        } else {
            disk.host_id.clone().unwrap_or_else(|| self.rng.uuid())
        };
        disk.host_id = Some(host_id.clone());
        disk.tokens = tokens.clone();

        if !should_bootstrap {
            // allow_unsafe_replace: take the tokens over, stream nothing.
            disk.bootstrap = BootstrapState::Completed;
            let process = Self::process(config, OperationMode::Normal, None);
            if same_address {
                let node = self.nodes.get_mut(&replaced).expect("found");
                node.state = RingState::Normal;
                node.data_dir = config.data_dir.clone();
                node.version = config.version;
                node.messaging_version = config.messaging_version();
                node.release = config.release();
                node.process = process;
                node.down_since_ms = None;
            } else {
                self.nodes.remove(&replaced);
                let node = Self::new_member(config, &host_id, tokens, RingState::Normal, process);
                self.nodes.insert(host_id.clone(), node);
            }
            return Ok(Started {
                host_id,
                startup: Startup::ReplacedWithoutStreaming { replaced },
                mode: OperationMode::Normal,
                log: std::mem::take(log),
            });
        }

        disk.bootstrap = BootstrapState::InProgress;
        let busy = Some(Busy {
            operation: Operation::Replace,
            until_ms: self.now_ms + self.options.timing.replace_ms,
        });
        let process = Self::process(config, OperationMode::Joining, busy);
        if same_address {
            let node = self.nodes.get_mut(&replaced).expect("found");
            node.state = RingState::Hibernating;
            node.data_dir = config.data_dir.clone();
            node.dc = config.dc.clone();
            node.rack = config.rack.clone();
            node.version = config.version;
            node.messaging_version = config.messaging_version();
            node.release = config.release();
            node.process = process;
        } else {
            let node = Self::new_member(
                config,
                &host_id,
                tokens,
                RingState::Replacing {
                    replaced: replaced.clone(),
                },
                process,
            );
            self.nodes.insert(host_id.clone(), node);
        }
        Ok(Started {
            host_id,
            startup: Startup::Replacing {
                replaced,
                same_address,
            },
            mode: OperationMode::Joining,
            log: std::mem::take(log),
        })
    }

    fn start_joining(
        &mut self,
        config: &NodeConfig,
        disk: &mut DataDir,
        should_bootstrap: bool,
        log: &mut Vec<String>,
    ) -> Result<Started, RingError> {
        let host_id = disk.host_id.clone();
        // Another member at this address (Gossiper.isSafeForStartup).
        let other = self
            .nodes
            .values()
            .find(|n| {
                n.address == config.address
                    && n.state != RingState::Left
                    && Some(&n.host_id) != host_id.as_ref()
            })
            .map(|n| (n.host_id.clone(), n.state.clone()));
        // Cassandra checks for a collision on every start that is not a
        // replacement, in 3.11 as in 4.x and 5.0 (StorageService.java,
        // prepareToJoin: `else { checkForEndpointCollision(localHostId); }`;
        // Gossiper.java, isSafeForStartup): a bootstrapping node may only
        // take over an address whose owner failed its own bootstrap (status
        // BOOT, or none); a node that does not bootstrap (a seed, or
        // auto_bootstrap false) must find its own host ID at that address,
        // and a wiped disk has a new one. Either way: "A node with address
        // ... already exists, cancelling join".
        let mut stale = None;
        // A seed whose shadow round hears nobody goes on with what it knows
        // (Gossiper.doShadowRound: "Unable to gossip with any peers but
        // continuing anyway since node is in its own seed list"): an empty
        // map of endpoint states, so isSafeForStartup has nothing to
        // compare and lets it start, on 3.11 as on 4.x. With a wiped disk
        // that is a new node with new tokens where the old member was: a
        // silent fork, which only the operator can prevent.
        let heard_nobody = config.is_seed() && !self.nodes.values().any(Node::is_up);
        if let Some((other_id, _)) = &other
            && heard_nobody
        {
            stale = Some(other_id.clone());
        } else if let Some((other_id, other_state)) = other {
            let safe = should_bootstrap
                && matches!(
                    other_state,
                    RingState::Joining | RingState::Replacing { .. }
                );
            if !safe {
                return Err(RingError::EndpointCollision {
                    address: config.address.clone(),
                });
            }
            stale = Some(other_id);
        }
        if should_bootstrap {
            // Only one range movement at a time; the entry at our own
            // address does not count.
            let moving = self.nodes.values().any(|n| {
                n.address != config.address
                    && matches!(n.state, RingState::Joining | RingState::Leaving)
            });
            if moving {
                return Err(RingError::RangeMovement);
            }
        }

        if disk.bootstrap == BootstrapState::Completed {
            let host_id = host_id.expect("a bootstrapped data directory has a host id");
            if disk.tokens.len() != config.num_tokens {
                return Err(RingError::TokenCountChanged {
                    from: disk.tokens.len(),
                    to: config.num_tokens,
                });
            }
            if let Some(stale) = &stale {
                self.nodes.remove(stale);
            }
            let process = Self::process(config, OperationMode::Normal, None);
            match self.nodes.get_mut(&host_id) {
                Some(node) => {
                    // A decommission or a replacement does not survive a
                    // restart.
                    node.state = RingState::Normal;
                    node.address = config.address.clone();
                    node.dc = config.dc.clone();
                    node.rack = config.rack.clone();
                    node.version = config.version;
                    node.messaging_version = config.messaging_version();
                    node.release = config.release();
                    node.tokens = disk.tokens.clone();
                    node.data_dir = config.data_dir.clone();
                    node.process = process;
                    node.down_since_ms = None;
                }
                None => {
                    let node = Self::new_member(
                        config,
                        &host_id,
                        disk.tokens.clone(),
                        RingState::Normal,
                        process,
                    );
                    self.nodes.insert(host_id.clone(), node);
                }
            }
            return Ok(Started {
                host_id,
                startup: Startup::Restarted,
                mode: OperationMode::Normal,
                log: std::mem::take(log),
            });
        }

        let host_id = match host_id {
            Some(h) => h,
            None => self.rng.uuid(),
        };
        disk.host_id = Some(host_id.clone());
        if should_bootstrap {
            // StorageService.prepareForBootstrap asks the allocator again
            // on a retry too (BootStrapper.getBootstrapTokens).
            self.check_token_allocation(config)?;
            if disk.bootstrap == BootstrapState::InProgress
                && disk.tokens.len() == config.num_tokens
            {
                log.push("Detected previous bootstrap failure; retrying".into());
            } else {
                disk.tokens = self.new_tokens(config.num_tokens);
            }
            disk.bootstrap = BootstrapState::InProgress;
            let busy = Some(Busy {
                operation: Operation::Bootstrap,
                until_ms: self.now_ms + self.options.timing.bootstrap_ms,
            });
            let process = Self::process(config, OperationMode::Joining, busy);
            if let Some(stale) = &stale {
                self.nodes.remove(stale);
            }
            self.nodes.remove(&host_id);
            let node = Self::new_member(
                config,
                &host_id,
                disk.tokens.clone(),
                RingState::Joining,
                process,
            );
            self.nodes.insert(host_id.clone(), node);
            return Ok(Started {
                host_id,
                startup: Startup::Bootstrapping,
                mode: OperationMode::Joining,
                log: std::mem::take(log),
            });
        }

        // No bootstrap: NORMAL at once, owning ranges without their data.
        if disk.tokens.len() != config.num_tokens {
            // No saved tokens: joinTokenRing asks the allocator as a
            // bootstrap does (BootStrapper.getBootstrapTokens).
            self.check_token_allocation(config)?;
            disk.tokens = self.new_tokens(config.num_tokens);
        }
        disk.bootstrap = BootstrapState::Completed;
        let process = Self::process(config, OperationMode::Normal, None);
        if let Some(stale) = &stale {
            self.nodes.remove(stale);
        }
        self.nodes.remove(&host_id);
        let node = Self::new_member(
            config,
            &host_id,
            disk.tokens.clone(),
            RingState::Normal,
            process,
        );
        self.nodes.insert(host_id.clone(), node);
        Ok(Started {
            host_id,
            startup: Startup::JoinedWithoutBootstrap,
            mode: OperationMode::Normal,
            log: std::mem::take(log),
        })
    }

    /// The token allocator's refusal, where a node picks new tokens with
    /// `allocate_tokens_for_local_replication_factor` set
    /// (`BootStrapper.getBootstrapTokens` ->
    /// `TokenAllocation.createStrategy(TokenMetadata,
    /// NetworkTopologyStrategy, dc, rack)`, the same bytecode in 4.1.8 and
    /// 5.0.3). The racks are those of the node's datacenter in the token
    /// map's topology (`cloneOnlyTokenMap`: the members that own tokens,
    /// up or down, leaving ones included; bootstrapping ones and the node
    /// itself not), and count only if the node's own rack is among them:
    /// the first node of a new rack is "a separate unit", one rack. The
    /// allocator then balances for the factor when it is 1 or less (racks
    /// ignored), equal to the racks (rack-aware), below them (racks
    /// ignored) or with one rack; more racks than one but fewer than the
    /// factor it refuses, and the node does not start. Only the rule: the
    /// model's tokens stay random.
    fn check_token_allocation(&self, config: &NodeConfig) -> Result<(), RingError> {
        let Some(rf) = config.allocate_tokens_for_local_replication_factor else {
            return Ok(());
        };
        let topology: BTreeSet<&str> = self
            .nodes
            .values()
            .filter(|n| n.is_natural() && n.dc == config.dc)
            .map(|n| n.rack.as_str())
            .collect();
        let racks = if topology.contains(config.rack.as_str()) {
            topology.len()
        } else {
            1
        };
        let replicas = rf as usize;
        if replicas <= 1 || racks >= replicas || racks == 1 {
            return Ok(());
        }
        Err(RingError::TokenAllocation {
            racks,
            dc: config.dc.clone(),
            rf,
        })
    }

    // ---- completions ----

    /// Moves the model clock forward by `ms` and completes every operation
    /// due by then, in order of due time.
    pub fn advance(&mut self, ms: u64) -> Vec<Completion> {
        self.now_ms += ms;
        self.complete_ops();
        let mut due: Vec<(u64, HostId, Operation)> = self
            .nodes
            .values()
            .filter_map(|n| {
                let busy = n.process.as_ref()?.busy?;
                (busy.until_ms <= self.now_ms)
                    .then(|| (busy.until_ms, n.host_id.clone(), busy.operation))
            })
            .collect();
        due.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        due.into_iter()
            .map(|(_, host_id, operation)| {
                let result = self.finish(&host_id);
                Completion {
                    host_id,
                    operation,
                    result,
                }
            })
            .collect()
    }

    /// Completes the operation `host_id`'s process is in the middle of
    /// (bootstrap, replacement or decommission), whatever the clock says.
    pub fn finish(&mut self, host_id: &str) -> Result<(), RingError> {
        let busy = self.running(host_id)?.busy;
        match busy.map(|b| b.operation) {
            Some(Operation::Bootstrap) => self.finish_bootstrap(host_id),
            Some(Operation::Replace) => self.finish_replace(host_id),
            Some(Operation::Decommission) => self.finish_decommission(host_id),
            None => Err(RingError::NotInProgress {
                host_id: host_id.to_string(),
                operation: "streaming operation",
            }),
        }
    }

    pub(super) fn set_mode(&mut self, host_id: &str, mode: OperationMode) {
        let now = self.now_ms;
        if let Some(p) = self.nodes.get_mut(host_id).and_then(|n| n.process.as_mut()) {
            if p.mode != mode {
                p.status_since_ms = now;
            }
            p.mode = mode;
            p.busy = None;
        }
    }

    /// A failed bootstrap or replacement: JOINING_FAILED on 5.0, still
    /// JOINING before (`nodetool bootstrap resume` territory).
    fn fail_join(&mut self, host_id: &str, error: RingError) -> Result<(), RingError> {
        let mode = if self.nodes[host_id].version >= Version::V5_0 {
            OperationMode::JoiningFailed
        } else {
            OperationMode::Joining
        };
        self.set_mode(host_id, mode);
        Err(error)
    }

    /// The one source `RangeStreamer` fetches a range from: the live old
    /// replica closest to `to` (same datacenter first, then replica order).
    pub(super) fn pick_source<'a>(&self, to: &str, candidates: &'a [HostId]) -> Option<&'a HostId> {
        let dc = &self.nodes[to].dc;
        let live: Vec<&HostId> = candidates.iter().filter(|h| self.is_up(h)).collect();
        live.iter()
            .find(|h| &self.nodes[h.as_str()].dc == dc)
            .or(live.first())
            .copied()
    }

    /// The stream session between `from` (which initiates it) and `peer`
    /// sets up only when both speak the same messaging version
    /// ([`RingError::StreamVersionMismatch`]).
    pub(super) fn check_stream(
        &self,
        from: &str,
        peer: &str,
        operation: Operation,
    ) -> Result<(), RingError> {
        let own_version = self.nodes[from].messaging_version;
        let peer_node = &self.nodes[peer];
        if peer_node.messaging_version == own_version {
            return Ok(());
        }
        Err(RingError::StreamVersionMismatch {
            operation,
            peer: peer_node.address.clone(),
            peer_version: peer_node.messaging_version,
            own_version,
        })
    }

    fn finish_bootstrap(&mut self, host_id: &str) -> Result<(), RingError> {
        match self.plan_bootstrap(host_id) {
            Ok(plan) => {
                self.apply_copies(plan);
                self.complete_join(host_id);
                Ok(())
            }
            Err(e) => self.fail_join(host_id, e),
        }
    }

    fn plan_bootstrap(&self, host_id: &str) -> Result<CopyPlan, RingError> {
        let before = self.natural_map();
        let after =
            self.token_map(|n| (n.is_natural() || n.host_id == host_id).then(|| n.tokens.clone()));
        let joining = &self.nodes[host_id];
        let mut plan = CopyPlan::new();
        for ks in self.keyspaces.values() {
            for (key, token) in &ks.keys {
                let new = after.replicas(&ks.replication, *token);
                if !new.iter().any(|h| h == host_id) {
                    continue;
                }
                let old = before.replicas(&ks.replication, *token);
                // Strict consistency (`cassandra.consistent.rangemovement`):
                // fetch from the replica that loses the range, which must
                // be up.
                let losing: Vec<&HostId> = old.iter().filter(|h| !new.contains(h)).collect();
                let required = losing
                    .iter()
                    .find(|h| self.nodes[h.as_str()].dc == joining.dc)
                    .or(losing.first());
                let source = match required {
                    Some(required) if !self.is_up(required) => {
                        return Err(RingError::SourceDown {
                            address: self.address_of(required),
                        });
                    }
                    Some(required) => Some(*required),
                    None => self.pick_source(host_id, &old),
                };
                match source {
                    Some(s) => {
                        self.check_stream(host_id, s, Operation::Bootstrap)?;
                        if self.holds(s, &ks.name, key) {
                            plan.push((joining.data_dir.clone(), ks.name.clone(), key.clone()));
                        }
                    }
                    None if old.is_empty() => {}
                    None => {
                        let (start, end) = before.range_of(*token);
                        return Err(RingError::NoSources {
                            keyspace: ks.name.clone(),
                            start,
                            end,
                        });
                    }
                }
            }
        }
        Ok(plan)
    }

    fn complete_join(&mut self, host_id: &str) {
        let now = self.now_ms;
        let node = self.nodes.get_mut(host_id).expect("exists");
        if node.state == RingState::Hibernating
            && let Some(p) = node.process.as_mut()
        {
            // Out of hibernation: the others mark it UP once gossip tells
            // them (its NORMAL status reaches them).
            p.up_since_ms = now;
        }
        node.state = RingState::Normal;
        node.down_since_ms = None;
        let dir = node.data_dir.clone();
        self.set_mode(host_id, OperationMode::Normal);
        if let Some(d) = self.data_dirs.get_mut(&dir) {
            d.bootstrap = BootstrapState::Completed;
        }
        self.deliver_hints(host_id);
    }

    fn finish_replace(&mut self, host_id: &str) -> Result<(), RingError> {
        let replaced = match &self.nodes[host_id].state {
            RingState::Replacing { replaced } => Some(replaced.clone()),
            _ => None,
        };
        match self.plan_replace(host_id, replaced.as_deref().unwrap_or(host_id)) {
            Ok(plan) => {
                self.apply_copies(plan);
                if let Some(old) = &replaced {
                    self.nodes.remove(old);
                    self.hints.remove(old);
                }
                self.complete_join(host_id);
                Ok(())
            }
            Err(e) => self.fail_join(host_id, e),
        }
    }

    /// `host_id` takes over the ranges of `target` (itself when replacing
    /// at the same address): each range from one live other replica.
    fn plan_replace(&self, host_id: &str, target: &str) -> Result<CopyPlan, RingError> {
        let before = self.natural_map();
        let dir = &self.nodes[host_id].data_dir;
        let mut plan = CopyPlan::new();
        for ks in self.keyspaces.values() {
            for (key, token) in &ks.keys {
                let old = before.replicas(&ks.replication, *token);
                if !old.iter().any(|h| h == target) {
                    continue;
                }
                let others: Vec<HostId> = old.iter().filter(|h| *h != target).cloned().collect();
                match self.pick_source(host_id, &others) {
                    Some(s) => {
                        self.check_stream(host_id, s, Operation::Replace)?;
                        if self.holds(s, &ks.name, key) {
                            plan.push((dir.clone(), ks.name.clone(), key.clone()));
                        }
                    }
                    // RangeStreamer lets an RF 1 range go (with a warning).
                    None if ks.replication.total_rf() <= 1 => {}
                    None => {
                        let (start, end) = before.range_of(*token);
                        return Err(RingError::NoSources {
                            keyspace: ks.name.clone(),
                            start,
                            end,
                        });
                    }
                }
            }
        }
        Ok(plan)
    }
}

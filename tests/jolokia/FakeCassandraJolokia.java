// A real Jolokia (jolokia-core 1.7.1, Debian's libjolokia-core-java) in front of
// in-memory MBeans with the exact JMX signatures of Cassandra's
// StorageServiceMBean (the members the sidecar uses), EndpointSnitchInfoMBean and
// FailureDetectorMBean (the gossip view),
// for Cassandra 3.11, 4.1 or 5.0. The contract peer of the sidecar's Jolokia
// client and of the test world's fake Jolokia: see
// tests/tests/jolokia_contract.rs.
//
// Usage: java -cp <classes>:/usr/share/java/jolokia-core.jar:/usr/share/java/json-simple.jar \
//          FakeCassandraJolokia <3.11|4.1|5.0> [--port P] [--rf N] [--peers SPEC]
//          [--decommission-ms MS] [--drain-ms MS]
//   --peers  comma-separated ip:STATE:rack with STATE one of UN, DN, UJ, UL, UM;
//            this node is always 10.0.0.1, UN, rack1, datacenter dc1.
//   --rf     replication factor of the one user keyspace (4.x/5.0 refuse a
//            non-forced decommission when the ring has no more nodes than that).
// Prints "ready <port>" on stdout once Jolokia listens on 127.0.0.1:<port>.
//
// The JMX interfaces are nested types (FakeCassandraJolokia$StorageService311MBean
// and so on): standard MBeans only need the interface to be named after the class
// plus "MBean"; the member names and Java signatures are Cassandra's.

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.math.BigInteger;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.jolokia.backend.BackendManager;
import org.jolokia.config.ConfigKey;
import org.jolokia.config.Configuration;
import org.jolokia.http.HttpRequestHandler;
import org.jolokia.restrictor.Restrictor;
import org.jolokia.restrictor.RestrictorFactory;
import org.jolokia.util.LogHandler;
import org.json.simple.JSONAware;

public class FakeCassandraJolokia {

    // ---- the JMX interfaces (signatures as in Cassandra's StorageServiceMBean) ----

    /** Cassandra 3.11: no WithPort members, decommission() without arguments. */
    public interface StorageService311MBean {
        List<String> getLiveNodes();
        List<String> getUnreachableNodes();
        List<String> getJoiningNodes();
        List<String> getLeavingNodes();
        List<String> getMovingNodes();
        List<String> getTokens();
        List<String> getTokens(String endpoint) throws UnknownHostException;
        String getReleaseVersion();
        String getSchemaVersion();
        String getLocalHostId();
        Map<String, String> getHostIdMap();
        Map<String, String> getEndpointToHostId();
        Map<String, String> getHostIdToEndpoint();
        String getLoadString();
        Map<String, String> getLoadMap();
        Map<InetAddress, Float> getOwnership();
        String getOperationMode();
        boolean isStarting();
        String getDrainProgress();
        void drain() throws IOException, InterruptedException, ExecutionException;
        void decommission() throws InterruptedException;
        boolean isInitialized();
        boolean isJoined();
        boolean isDrained();
        boolean isDraining();
        String getClusterName();
        boolean isGossipRunning();
        String getRemovalStatus();
    }

    /** Cassandra 4.0/4.1: WithPort members added, decommission(boolean). */
    public interface StorageService41MBean {
        @Deprecated List<String> getLiveNodes();
        List<String> getLiveNodesWithPort();
        @Deprecated List<String> getUnreachableNodes();
        List<String> getUnreachableNodesWithPort();
        @Deprecated List<String> getJoiningNodes();
        List<String> getJoiningNodesWithPort();
        @Deprecated List<String> getLeavingNodes();
        List<String> getLeavingNodesWithPort();
        @Deprecated List<String> getMovingNodes();
        List<String> getMovingNodesWithPort();
        List<String> getTokens();
        List<String> getTokens(String endpoint) throws UnknownHostException;
        String getReleaseVersion();
        String getSchemaVersion();
        String getLocalHostId();
        @Deprecated Map<String, String> getHostIdMap();
        @Deprecated Map<String, String> getEndpointToHostId();
        Map<String, String> getEndpointWithPortToHostId();
        @Deprecated Map<String, String> getHostIdToEndpoint();
        Map<String, String> getHostIdToEndpointWithPort();
        String getLoadString();
        @Deprecated Map<String, String> getLoadMap();
        Map<String, String> getLoadMapWithPort();
        @Deprecated Map<InetAddress, Float> getOwnership();
        Map<String, Float> getOwnershipWithPort();
        String getOperationMode();
        boolean isStarting();
        String getDrainProgress();
        void drain() throws IOException, InterruptedException, ExecutionException;
        void decommission(boolean force) throws InterruptedException;
        boolean isInitialized();
        boolean isJoined();
        boolean isDrained();
        boolean isDraining();
        String getClusterName();
        boolean isGossipRunning();
        @Deprecated String getRemovalStatus();
        String getRemovalStatusWithPort();
    }

    /** Cassandra 5.0: HostIdMap removed; decommission state attributes added. */
    public interface StorageService50MBean {
        @Deprecated List<String> getLiveNodes();
        List<String> getLiveNodesWithPort();
        @Deprecated List<String> getUnreachableNodes();
        List<String> getUnreachableNodesWithPort();
        @Deprecated List<String> getJoiningNodes();
        List<String> getJoiningNodesWithPort();
        @Deprecated List<String> getLeavingNodes();
        List<String> getLeavingNodesWithPort();
        @Deprecated List<String> getMovingNodes();
        List<String> getMovingNodesWithPort();
        List<String> getTokens();
        List<String> getTokens(String endpoint) throws UnknownHostException;
        String getReleaseVersion();
        String getSchemaVersion();
        String getLocalHostId();
        @Deprecated Map<String, String> getEndpointToHostId();
        Map<String, String> getEndpointWithPortToHostId();
        @Deprecated Map<String, String> getHostIdToEndpoint();
        Map<String, String> getHostIdToEndpointWithPort();
        String getLoadString();
        String getUncompressedLoadString();
        @Deprecated Map<String, String> getLoadMap();
        Map<String, String> getLoadMapWithPort();
        @Deprecated Map<InetAddress, Float> getOwnership();
        Map<String, Float> getOwnershipWithPort();
        String getOperationMode();
        boolean isStarting();
        String getDrainProgress();
        void drain() throws IOException, InterruptedException, ExecutionException;
        void decommission(boolean force) throws InterruptedException;
        boolean isDecommissionFailed();
        boolean isDecommissioning();
        String getBootstrapState();
        boolean isInitialized();
        boolean isJoined();
        boolean isDrained();
        boolean isDraining();
        String getClusterName();
        boolean isGossipRunning();
        @Deprecated String getRemovalStatus();
        String getRemovalStatusWithPort();
    }

    /** The FailureDetectorMBean members of 3.11 the contract reads. */
    public interface FailureDetector311MBean {
        String getAllEndpointStates();
        Map<String, String> getSimpleStates();
        int getUpEndpointCount();
        int getDownEndpointCount();
        String getEndpointState(String address) throws UnknownHostException;
    }

    /** 4.1 and 5.0 add the WithPort forms (JMX-FACTS §4). */
    public interface FailureDetector41MBean extends FailureDetector311MBean {
        String getAllEndpointStatesWithPort();
        String getAllEndpointStatesWithPortAndResolveIp();
        Map<String, String> getSimpleStatesWithPort();
    }

    /** Identical in 3.11, 4.1 and 5.0. */
    public interface EndpointSnitchInfoMBean {
        String getRack(String host) throws UnknownHostException;
        String getDatacenter(String host) throws UnknownHostException;
        String getRack();
        String getDatacenter();
        String getSnitchName();
    }

    // ---- the in-memory ring ----

    static final int STORAGE_PORT = 7000;
    static final int NUM_TOKENS = 4;
    static final String SELF = "10.0.0.1";

    static final class Peer {
        final String ip;
        final String state; // UN, DN, UJ, UL, UM
        final String rack;
        final UUID hostId;
        final List<String> tokens = new ArrayList<>();
        final String load;
        final int index;

        Peer(String ip, String state, String rack, int index) {
            this.index = index;
            this.ip = ip;
            this.state = state;
            this.rack = rack;
            this.hostId = UUID.nameUUIDFromBytes(("host-" + ip).getBytes(StandardCharsets.UTF_8));
            this.load = (100 + 17 * index) + ".5 KiB";
        }

        String withPort() {
            return ip + ":" + STORAGE_PORT;
        }
    }

    /** Shared state and behaviour; each version exposes a subset through its interface. */
    public static class Node {
        final String version;
        final String releaseVersion;
        final int rf;
        final long decommissionMs;
        final long drainMs;
        final Map<String, Peer> peers = new LinkedHashMap<>();
        volatile String mode = "NORMAL";
        volatile boolean decommissioning = false;
        volatile boolean decommissionFailed = false;
        volatile boolean drained = false;
        volatile boolean draining = false;
        volatile boolean member = true;

        Node(String version, int rf, long decommissionMs, long drainMs, String peerSpec) {
            this.version = version;
            switch (version) {
                case "3.11": releaseVersion = "3.11.19"; break;
                case "4.1": releaseVersion = "4.1.8"; break;
                case "5.0": releaseVersion = "5.0.3"; break;
                default: throw new IllegalArgumentException("unknown version " + version);
            }
            this.rf = rf;
            this.decommissionMs = decommissionMs;
            this.drainMs = drainMs;
            int index = 0;
            peers.put(SELF, new Peer(SELF, "UN", "rack1", index++));
            if (!peerSpec.isEmpty()) {
                for (String p : peerSpec.split(",")) {
                    String[] f = p.split(":");
                    peers.put(f[0], new Peer(f[0], f[1], f[2], index++));
                }
            }
            // Evenly spaced Murmur3 tokens, interleaved between the nodes.
            BigInteger min = BigInteger.valueOf(Long.MIN_VALUE);
            BigInteger span = BigInteger.ONE.shiftLeft(64);
            int total = peers.size() * NUM_TOKENS;
            int i = 0;
            for (int t = 0; t < NUM_TOKENS; t++) {
                for (Peer peer : peers.values()) {
                    BigInteger tok = min.add(span.multiply(BigInteger.valueOf(i)).divide(BigInteger.valueOf(total)));
                    peer.tokens.add(tok.toString());
                    i++;
                }
            }
        }

        Peer self() { return peers.get(SELF); }

        List<String> endpoints(String states, boolean withPort) {
            List<String> out = new ArrayList<>();
            for (Peer p : peers.values()) {
                String st = p.state;
                if (p.ip.equals(SELF)) {
                    if (!member) continue;
                    st = "LEAVING".equals(mode) ? "UL" : "UN";
                }
                if (states.contains(st.substring(0, 1) + "?") || states.contains("?" + st.substring(1)) || states.contains(st)) {
                    out.add(withPort ? p.withPort() : p.ip);
                }
            }
            return out;
        }

        public List<String> getLiveNodes() { return endpoints("U?", false); }
        public List<String> getLiveNodesWithPort() { return endpoints("U?", true); }
        public List<String> getUnreachableNodes() { return endpoints("D?", false); }
        public List<String> getUnreachableNodesWithPort() { return endpoints("D?", true); }
        public List<String> getJoiningNodes() { return endpoints("?J", false); }
        public List<String> getJoiningNodesWithPort() { return endpoints("?J", true); }
        public List<String> getLeavingNodes() { return endpoints("?L", false); }
        public List<String> getLeavingNodesWithPort() { return endpoints("?L", true); }
        public List<String> getMovingNodes() { return endpoints("?M", false); }
        public List<String> getMovingNodesWithPort() { return endpoints("?M", true); }

        public List<String> getTokens() { return new ArrayList<>(self().tokens); }

        public List<String> getTokens(String endpoint) throws UnknownHostException {
            // 3.11 parses an InetAddress (no port); 4.x an InetAddressAndPort (port optional).
            String ip = endpoint;
            if (!version.equals("3.11") && endpoint.matches("[0-9.]+:[0-9]+")) {
                ip = endpoint.substring(0, endpoint.lastIndexOf(':'));
            }
            InetAddress.getByName(ip); // throws UnknownHostException like the real one
            Peer p = peers.get(ip);
            return p == null ? new ArrayList<>() : new ArrayList<>(p.tokens);
        }

        public String getReleaseVersion() { return releaseVersion; }
        public String getSchemaVersion() { return "59adb24e-f3cd-3e02-97f0-5b395827453f"; }
        public String getLocalHostId() { return self().hostId.toString(); }

        Map<String, String> hostIds(boolean withPort) {
            Map<String, String> m = new LinkedHashMap<>();
            for (Peer p : peers.values()) {
                if (p.ip.equals(SELF) && !member) continue;
                m.put(withPort ? p.withPort() : p.ip, p.hostId.toString());
            }
            return m;
        }

        public Map<String, String> getHostIdMap() { return hostIds(false); }
        public Map<String, String> getEndpointToHostId() { return hostIds(false); }
        public Map<String, String> getEndpointWithPortToHostId() { return hostIds(true); }

        Map<String, String> inverse(Map<String, String> m) {
            Map<String, String> out = new LinkedHashMap<>();
            for (Map.Entry<String, String> e : m.entrySet()) out.put(e.getValue(), e.getKey());
            return out;
        }

        public Map<String, String> getHostIdToEndpoint() { return inverse(hostIds(false)); }
        public Map<String, String> getHostIdToEndpointWithPort() { return inverse(hostIds(true)); }
        public String getLoadString() { return self().load; }
        public String getUncompressedLoadString() { return self().load; }

        Map<String, String> loads(boolean withPort) {
            Map<String, String> m = new LinkedHashMap<>();
            for (Peer p : peers.values()) {
                if (p.state.startsWith("D")) continue; // no gossiped load for a down node
                m.put(withPort ? p.withPort() : p.ip, p.load);
            }
            return m;
        }

        public Map<String, String> getLoadMap() { return loads(false); }
        public Map<String, String> getLoadMapWithPort() { return loads(true); }

        /** Share of the token ring each node owns (Murmur3: a token owns (previous, token]). */
        Map<String, Float> ownership() {
            TreeMap<BigInteger, String> ring = new TreeMap<>();
            for (Peer p : peers.values()) {
                for (String t : p.tokens) ring.put(new BigInteger(t), p.ip);
            }
            BigInteger span = BigInteger.ONE.shiftLeft(64);
            Map<String, BigInteger> owned = new LinkedHashMap<>();
            BigInteger prev = ring.lastKey().subtract(span);
            for (Map.Entry<BigInteger, String> e : ring.entrySet()) {
                owned.merge(e.getValue(), e.getKey().subtract(prev), BigInteger::add);
                prev = e.getKey();
            }
            Map<String, Float> out = new LinkedHashMap<>();
            for (Map.Entry<String, BigInteger> e : owned.entrySet()) {
                out.put(e.getKey(), (float) (e.getValue().doubleValue() / span.doubleValue()));
            }
            return out;
        }

        public Map<InetAddress, Float> getOwnership() {
            Map<InetAddress, Float> out = new LinkedHashMap<>();
            try {
                for (Map.Entry<String, Float> e : ownership().entrySet()) {
                    out.put(InetAddress.getByName(e.getKey()), e.getValue());
                }
            } catch (UnknownHostException e) {
                throw new RuntimeException(e);
            }
            return out;
        }

        public Map<String, Float> getOwnershipWithPort() {
            Map<String, Float> out = new LinkedHashMap<>();
            for (Map.Entry<String, Float> e : ownership().entrySet()) {
                out.put(e.getKey() + ":" + STORAGE_PORT, e.getValue());
            }
            return out;
        }

        public String getOperationMode() { return mode; }
        public boolean isStarting() { return "STARTING".equals(mode); }
        public String getDrainProgress() { return drained ? "Drained 12/12 ColumnFamilies" : "Drained 0/12 ColumnFamilies"; }
        public boolean isInitialized() { return true; }
        public boolean isJoined() { return member; }
        public boolean isDrained() { return drained; }
        public boolean isDraining() { return draining; }
        public String getClusterName() { return "Test Cluster"; }
        public boolean isGossipRunning() { return !drained; }
        public String getRemovalStatus() { return "No token removals in process."; }
        public String getRemovalStatusWithPort() { return getRemovalStatus(); }
        public boolean isDecommissionFailed() { return decommissionFailed; }
        public boolean isDecommissioning() { return decommissioning; }
        public String getBootstrapState() { return member ? "COMPLETED" : "DECOMMISSIONED"; }

        public synchronized void drain() throws IOException, InterruptedException, ExecutionException {
            if (drained) return; // "Cannot drain node (did it already happen?)": a warning only
            draining = true;
            mode = "DRAINING";
            Thread.sleep(drainMs);
            mode = "DRAINED";
            draining = false;
            drained = true;
        }

        /** 3.11's decommission(): the checks of StorageService.decommission in their order. */
        public void decommission() throws InterruptedException {
            decommission(false);
        }

        public void decommission(boolean force) throws InterruptedException {
            boolean v50 = version.equals("5.0");
            if (v50 && ("DECOMMISSIONED".equals(mode) || decommissioning)) {
                return; // 5.0 only logs (INFO) and returns
            }
            if (!member) {
                throw new UnsupportedOperationException("local node is not a member of the token ring yet");
            }
            int normal = 0;
            for (Peer p : peers.values()) if (p.state.endsWith("N")) normal++;
            if (normal < 2) {
                throw new UnsupportedOperationException("no other normal nodes in the ring; decommission would be pointless");
            }
            boolean retry = v50 && "DECOMMISSION_FAILED".equals(mode);
            if (!"LEAVING".equals(mode) && !"NORMAL".equals(mode) && !retry) {
                throw new UnsupportedOperationException("Node in " + mode + " state; wait for status to become normal or restart");
            }
            synchronized (this) {
                if (decommissioning) {
                    throw new IllegalStateException("Node is still decommissioning. Check nodetool netstats.");
                }
                decommissioning = true;
            }
            try {
                if (!version.equals("3.11") && !force) {
                    int numNodes = 0;
                    for (Peer p : peers.values()) if (!p.state.endsWith("J")) numNodes++;
                    if (numNodes <= rf) {
                        if (v50) {
                            mode = "DECOMMISSION_FAILED";
                            decommissionFailed = true;
                        }
                        throw new UnsupportedOperationException("Not enough live nodes to maintain replication factor in keyspace ks (RF = "
                                + rf + ", N = " + numNodes + "). Perform a forceful decommission to ignore.");
                    }
                }
                mode = "LEAVING";
                decommissionFailed = false;
                Thread.sleep(decommissionMs);
                member = false;
                mode = "DECOMMISSIONED";
            } finally {
                decommissioning = false;
            }
        }
    }

    public static class StorageService311 extends Node implements StorageService311MBean {
        StorageService311(int rf, long d, long dr, String peers) { super("3.11", rf, d, dr, peers); }
    }

    public static class StorageService41 extends Node implements StorageService41MBean {
        StorageService41(int rf, long d, long dr, String peers) { super("4.1", rf, d, dr, peers); }
    }

    public static class StorageService50 extends Node implements StorageService50MBean {
        StorageService50(int rf, long d, long dr, String peers) { super("5.0", rf, d, dr, peers); }
    }

    public static class EndpointSnitchInfo implements EndpointSnitchInfoMBean {
        final Node node;

        EndpointSnitchInfo(Node node) { this.node = node; }

        Peer lookup(String host) throws UnknownHostException {
            String ip = host;
            if (!node.version.equals("3.11") && host.matches("[0-9.]+:[0-9]+")) {
                ip = host.substring(0, host.lastIndexOf(':'));
            }
            InetAddress.getByName(ip);
            return node.peers.get(ip);
        }

        // An unknown endpoint gets the snitch's default ("UNKNOWN_RACK"/"UNKNOWN_DC" in
        // GossipingPropertyFileSnitch), not an error.
        public String getRack(String host) throws UnknownHostException {
            Peer p = lookup(host);
            return p == null ? "UNKNOWN_RACK" : p.rack;
        }

        public String getDatacenter(String host) throws UnknownHostException {
            Peer p = lookup(host);
            return p == null ? "UNKNOWN_DC" : "dc1";
        }

        public String getRack() { return node.self().rack; }
        public String getDatacenter() { return "dc1"; }
        public String getSnitchName() { return "org.apache.cassandra.locator.GossipingPropertyFileSnitch"; }
    }

    /**
     * The gossip dump of FailureDetector.appendEndpointState (3.11, 4.1, 5.0): per
     * endpoint a key line (InetAddress.toString(): "/10.0.0.2"; with port
     * "/10.0.0.2:7000"; with port and resolved name "10.0.0.2:7000", as no reverse
     * name exists), "  generation:", "  heartbeat:", each application state but
     * TOKENS as "  NAME:version:value" in ApplicationState order, then
     * "  TOKENS:version:<hidden>". Down peers are DOWN in SimpleStates.
     */
    public static class FailureDetector311 implements FailureDetector311MBean {
        static final long GENERATION = 1700000000L;
        final Node node;

        FailureDetector311(Node node) { this.node = node; }

        boolean v4() { return !node.version.equals("3.11"); }

        boolean up(Peer p) { return p.ip.equals(SELF) || p.state.startsWith("U"); }

        String status(Peer p) {
            String st = p.ip.equals(SELF) ? ("LEAVING".equals(node.mode) ? "UL" : "UN") : p.state;
            String token = p.tokens.get(0);
            switch (st.substring(1)) {
                case "J": return "BOOT," + token;
                case "L": return "LEAVING," + token;
                case "M": return "MOVING," + token;
                default: return "NORMAL," + token;
            }
        }

        String append(Peer p) {
            StringBuilder sb = new StringBuilder();
            sb.append("  generation:").append(GENERATION + p.index).append("\n");
            sb.append("  heartbeat:").append(100 + p.index).append("\n");
            sb.append("  STATUS:").append(v4() ? 21 : 20).append(":").append(status(p)).append("\n");
            sb.append("  SCHEMA:14:").append(node.getSchemaVersion()).append("\n");
            sb.append("  DC:9:dc1\n");
            sb.append("  RACK:10:").append(p.rack).append("\n");
            sb.append("  RELEASE_VERSION:5:").append(node.releaseVersion).append("\n");
            sb.append("  INTERNAL_IP:7:").append(p.ip).append("\n");
            sb.append("  RPC_ADDRESS:3:").append(p.ip).append("\n");
            sb.append("  NET_VERSION:1:").append(v4() ? 12 : 11).append("\n");
            sb.append("  HOST_ID:2:").append(p.hostId).append("\n");
            sb.append("  RPC_READY:22:").append(up(p)).append("\n");
            if (v4()) {
                sb.append("  INTERNAL_ADDRESS_AND_PORT:8:").append(p.withPort()).append("\n");
                sb.append("  NATIVE_ADDRESS_AND_PORT:4:").append(p.ip).append(":9042\n");
                sb.append("  STATUS_WITH_PORT:20:").append(status(p)).append("\n");
                sb.append("  SSTABLE_VERSIONS:6:big-").append(node.version.equals("5.0") ? "nc" : "nb").append("\n");
            }
            sb.append("  TOKENS:19:<hidden>\n");
            return sb.toString();
        }

        String dump(boolean withPort, boolean resolveIp) {
            StringBuilder sb = new StringBuilder();
            for (Peer p : node.peers.values()) {
                String key = withPort ? p.withPort() : p.ip;
                sb.append(resolveIp ? key : "/" + key).append("\n");
                sb.append(append(p));
            }
            return sb.toString();
        }

        Map<String, String> simple(boolean withPort) {
            Map<String, String> m = new HashMap<>();
            for (Peer p : node.peers.values()) {
                m.put("/" + (withPort ? p.withPort() : p.ip), up(p) ? "UP" : "DOWN");
            }
            return m;
        }

        public String getAllEndpointStates() { return dump(false, false); }
        public String getAllEndpointStatesWithPort() { return dump(true, false); }
        public String getAllEndpointStatesWithPortAndResolveIp() { return dump(true, true); }
        public Map<String, String> getSimpleStates() { return simple(false); }
        public Map<String, String> getSimpleStatesWithPort() { return simple(true); }

        public int getUpEndpointCount() {
            int n = 0;
            for (Peer p : node.peers.values()) if (up(p)) n++;
            return n;
        }

        public int getDownEndpointCount() { return node.peers.size() - getUpEndpointCount(); }

        // Gossiper.getEndpointStateForEndpoint answers null for an endpoint gossip
        // does not know, and appendEndpointState dereferences it.
        public String getEndpointState(String address) throws UnknownHostException {
            String ip = address;
            if (v4() && address.matches("[0-9.]+:[0-9]+")) {
                ip = address.substring(0, address.lastIndexOf(':'));
            }
            InetAddress.getByName(ip);
            Peer p = node.peers.get(ip);
            if (p == null) throw new NullPointerException();
            return append(p);
        }
    }

    public static class FailureDetector41 extends FailureDetector311 implements FailureDetector41MBean {
        FailureDetector41(Node node) { super(node); }
    }

    // ---- Jolokia over the JDK's HTTP server, as the Jolokia JVM agent does ----

    static Map<String, String[]> parseQuery(String query) {
        Map<String, List<String>> acc = new HashMap<>();
        if (query != null) {
            for (String kv : query.split("&")) {
                if (kv.isEmpty()) continue;
                int eq = kv.indexOf('=');
                String k = URLDecoder.decode(eq < 0 ? kv : kv.substring(0, eq), StandardCharsets.UTF_8);
                String v = eq < 0 ? "" : URLDecoder.decode(kv.substring(eq + 1), StandardCharsets.UTF_8);
                acc.computeIfAbsent(k, x -> new ArrayList<>()).add(v);
            }
        }
        Map<String, String[]> out = new HashMap<>();
        for (Map.Entry<String, List<String>> e : acc.entrySet()) out.put(e.getKey(), e.getValue().toArray(new String[0]));
        return out;
    }

    static void handle(HttpRequestHandler handler, String context, HttpExchange ex) throws IOException {
        JSONAware json;
        try {
            String path = ex.getRequestURI().getRawPath();
            String query = ex.getRequestURI().getRawQuery();
            Map<String, String[]> params = parseQuery(query);
            String method = ex.getRequestMethod();
            if ("POST".equalsIgnoreCase(method)) {
                json = handler.handlePostRequest(ex.getRequestURI().toString(), ex.getRequestBody(), "utf-8", params);
            } else if ("GET".equalsIgnoreCase(method)) {
                String pathInfo = path.length() > context.length() ? path.substring(context.length()) : "";
                json = handler.handleGetRequest(ex.getRequestURI().toString(), URLDecoder.decode(pathInfo, StandardCharsets.UTF_8), params);
            } else {
                throw new IllegalArgumentException("HTTP method " + method + " is not supported");
            }
        } catch (Throwable t) {
            json = handler.handleThrowable(t);
        }
        byte[] body = json.toJSONString().getBytes(StandardCharsets.UTF_8);
        // The 1.x JVM agent answers every Jolokia request with HTTP 200 and the
        // default mime type text/plain; the real status is inside the body.
        ex.getResponseHeaders().set("Content-Type", "text/plain; charset=utf-8");
        ex.sendResponseHeaders(200, body.length);
        try (OutputStream os = ex.getResponseBody()) {
            os.write(body);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: FakeCassandraJolokia <3.11|4.1|5.0> [--port P] [--rf N] [--peers SPEC] [--decommission-ms MS] [--drain-ms MS] [--policy-location URL]");
            System.exit(2);
        }
        String version = args[0];
        int port = 0;
        int rf = 1;
        long decommissionMs = 1500;
        long drainMs = 300;
        String peers = "10.0.0.2:UN:rack2,10.0.0.3:UN:rack3";
        // The agent option policyLocation (e.g. file:///path/jolokia-access.xml);
        // without it, Jolokia's default classpath location (none here: allow all).
        String policyLocation = null;
        for (int i = 1; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--port": port = Integer.parseInt(args[i + 1]); break;
                case "--rf": rf = Integer.parseInt(args[i + 1]); break;
                case "--peers": peers = args[i + 1]; break;
                case "--decommission-ms": decommissionMs = Long.parseLong(args[i + 1]); break;
                case "--drain-ms": drainMs = Long.parseLong(args[i + 1]); break;
                case "--policy-location": policyLocation = args[i + 1]; break;
                default:
                    System.err.println("unknown option " + args[i]);
                    System.exit(2);
            }
        }
        Node node;
        switch (version) {
            case "3.11": node = new StorageService311(rf, decommissionMs, drainMs, peers); break;
            case "4.1": node = new StorageService41(rf, decommissionMs, drainMs, peers); break;
            case "5.0": node = new StorageService50(rf, decommissionMs, drainMs, peers); break;
            default:
                System.err.println("unknown Cassandra version " + version + " (3.11, 4.1 or 5.0)");
                System.exit(2);
                return;
        }
        MBeanServer mbs = ManagementFactory.getPlatformMBeanServer();
        mbs.registerMBean(node, new ObjectName("org.apache.cassandra.db:type=StorageService"));
        mbs.registerMBean(new EndpointSnitchInfo(node), new ObjectName("org.apache.cassandra.db:type=EndpointSnitchInfo"));
        mbs.registerMBean(
                version.equals("3.11") ? new FailureDetector311(node) : new FailureDetector41(node),
                new ObjectName("org.apache.cassandra.net:type=FailureDetector"));

        LogHandler quiet = new LogHandler() {
            public void debug(String m) {}
            public void info(String m) {}
            public void error(String m, Throwable t) { System.err.println("jolokia: " + m); }
        };
        String context = "/jolokia";
        Configuration config = policyLocation == null
                ? new Configuration(
                        ConfigKey.AGENT_CONTEXT, context,
                        ConfigKey.AGENT_ID, "fake-cassandra-" + version,
                        ConfigKey.DISCOVERY_ENABLED, "false")
                : new Configuration(
                        ConfigKey.AGENT_CONTEXT, context,
                        ConfigKey.AGENT_ID, "fake-cassandra-" + version,
                        ConfigKey.DISCOVERY_ENABLED, "false",
                        ConfigKey.POLICY_LOCATION, policyLocation);
        // As the JVM agent does: the policy at policyLocation, allow-all
        // when there is none, deny-all when it cannot be read.
        Restrictor restrictor = RestrictorFactory.createRestrictor(config, quiet);
        BackendManager backend = new BackendManager(config, quiet, restrictor);
        HttpRequestHandler handler = new HttpRequestHandler(config, backend, quiet);

        HttpServer server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 16);
        server.createContext(context, ex -> {
            try {
                handle(handler, context, ex);
            } catch (IOException e) {
                // The client went away (e.g. its timeout expired during a
                // blocking decommission): nothing to answer.
            } catch (RuntimeException e) {
                System.err.println("http: " + e);
            } finally {
                ex.close();
            }
        });
        // Several threads: a blocking decommission must not stop reads of OperationMode.
        server.setExecutor(Executors.newFixedThreadPool(8));
        server.start();
        System.out.println("ready " + server.getAddress().getPort());
        System.out.flush();
    }
}

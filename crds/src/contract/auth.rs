//! Password authentication (`spec.security.authentication`): what the
//! controller, which creates and keeps the cluster's superuser, and the
//! sidecar, which renders the settings, agree on. Pure.
//!
//! The flow:
//!
//! 1. The sidecar renders `authenticator: PasswordAuthenticator`,
//!    `authorizer: CassandraAuthorizer` and `role_manager:
//!    CassandraRoleManager` (ScyllaDB: the same names). The first node of
//!    a new ring creates the default superuser [`DEFAULT_ROLE`] with the
//!    password [`DEFAULT_PASSWORD`], as Cassandra and ScyllaDB always do.
//! 2. Before any member runs, the controller creates the superuser Secret
//!    ([`superuser_secret_name`], type [`SECRET_TYPE`]) with a random
//!    password, unless it exists: a Secret the user made is used as it is.
//! 3. Once a member is ready, the controller logs in over CQL with the
//!    Secret's credentials; while that is refused, it logs in as the
//!    default superuser and creates the Secret's role (superuser, login).
//!    Then, as its own superuser, it takes superuser and login away from
//!    the default role. Every step is judged from what the database says,
//!    so a controller that died between two of them does the rest.
//! 4. The controller keeps `system_auth` (and the other keyspaces of
//!    [`REPLICATED_SYSTEM_KEYSPACES`]) replicated with
//!    NetworkTopologyStrategy at [`system_auth_replicas`] in the cluster's
//!    datacenter (other datacenters keep theirs): raised once the ring is
//!    settled after a scale-up, then every row of `system_auth` read at
//!    consistency ALL, which writes each row to the replicas that lack it
//!    (a blocking read repair); lowered before a decommission that would
//!    leave them with as many replicas as members (Cassandra refuses that
//!    decommission). The annotation
//!    [`SYSTEM_AUTH_REPLICATION`] on the Cluster records the replication
//!    whose rows were last read that way, so a raise whose reads a crash
//!    interrupted is read again.

/// The Secret's type: Kubernetes' own for a user name and a password.
pub const SECRET_TYPE: &str = "kubernetes.io/basic-auth";

/// The Secret's key of the superuser's role name.
pub const USERNAME_KEY: &str = "username";

/// The Secret's key of the superuser's password.
pub const PASSWORD_KEY: &str = "password";

/// The superuser Secret of a cluster when the spec names none:
/// `<cluster>-superuser`.
pub fn superuser_secret_name(cluster: &str, named: Option<&str>) -> String {
    named.map_or_else(|| format!("{cluster}-superuser"), str::to_string)
}

/// The role name the operator gives its superuser in a Secret it creates:
/// `<cluster>-superuser` too, so that the role says what made it.
pub fn superuser_role(cluster: &str) -> String {
    format!("{cluster}-superuser")
}

/// The default superuser Cassandra and ScyllaDB create on a new ring.
pub const DEFAULT_ROLE: &str = "cassandra";

/// The default superuser's password.
pub const DEFAULT_PASSWORD: &str = "cassandra";

/// The length of a password the operator makes (alphanumeric: about 190
/// bits).
pub const PASSWORD_LENGTH: usize = 32;

/// Annotation on the Cluster, written by the controller: the replication of
/// `system_auth` in the cluster's datacenter (a decimal integer) whose rows
/// were all read at consistency ALL after it was set.
pub const SYSTEM_AUTH_REPLICATION: &str = "cassandra.rook.io/system-auth-replication";

/// The keyspace of roles and permissions.
pub const SYSTEM_AUTH: &str = "system_auth";

/// The system keyspaces the controller keeps at [`system_auth_replicas`]
/// in the datacenter (with NetworkTopologyStrategy): `system_auth`, and
/// the two Cassandra creates with SimpleStrategy at 3 and 2 replicas.
/// Cassandra 4.0 and later refuse a decommission while any keyspace has
/// at least as many replicas as the ring (or, per datacenter, the
/// datacenter) has nodes: without this a ring of three or fewer could
/// never shrink.
pub const REPLICATED_SYSTEM_KEYSPACES: [&str; 3] =
    [SYSTEM_AUTH, "system_distributed", "system_traces"];

/// How many replicas `system_auth` has in a datacenter of `members`
/// members: min(3, members), at least 1.
pub fn system_auth_replicas(members: i32) -> i32 {
    members.clamp(1, 3)
}

/// The settings the sidecar renders when authentication is on: the same
/// names in cassandra.yaml (3.11 to 5.0) and scylla.yaml.
pub const SETTINGS: [(&str, &str); 3] = [
    ("authenticator", "PasswordAuthenticator"),
    ("authorizer", "CassandraAuthorizer"),
    ("role_manager", "CassandraRoleManager"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_replicas() {
        assert_eq!(superuser_secret_name("orders", None), "orders-superuser");
        assert_eq!(superuser_secret_name("orders", Some("mine")), "mine");
        assert_eq!(
            (0..6).map(system_auth_replicas).collect::<Vec<_>>(),
            [1, 1, 2, 3, 3, 3]
        );
    }
}

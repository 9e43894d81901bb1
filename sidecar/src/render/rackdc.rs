//! cassandra-rackdc.properties: the datacenter and rack of the member, read
//! by GossipingPropertyFileSnitch (Cassandra and Scylla alike). Pure.

/// The content of cassandra-rackdc.properties. `prefer_local=false`: members
/// talk to each other through their member Service ClusterIPs, never
/// through a second, local address.
pub fn render_rackdc(datacenter: &str, rack: &str) -> String {
    format!(
        "# Rendered by cassandra-operator: the member's datacenter and rack.\n\
         dc={}\nrack={}\nprefer_local=false\n",
        escape(datacenter),
        escape(rack)
    )
}

/// Escapes a value as java.util.Properties reads it back: backslashes,
/// line breaks and leading blanks would otherwise change the name.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' ' if i == 0 => out.push_str("\\ "),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_dc_rack_and_prefer_local() {
        let text = render_rackdc("europe-west1", "europe-west1-b");
        let settings: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            settings,
            [
                "dc=europe-west1",
                "rack=europe-west1-b",
                "prefer_local=false"
            ]
        );
    }

    #[test]
    fn odd_characters_are_escaped() {
        let text = render_rackdc(" dc\\1", "r\n1");
        assert!(text.contains("dc=\\ dc\\\\1\n"), "{text}");
        assert!(text.contains("rack=r\\n1\n"), "{text}");
    }
}

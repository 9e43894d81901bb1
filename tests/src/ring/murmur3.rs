//! Cassandra's `Murmur3Partitioner`: the token of a partition key, and the
//! deterministic random source the model draws tokens and host IDs from.
//! Pure.
//!
//! The hash is `org.apache.cassandra.utils.MurmurHash.hash3_x64_128` with
//! seed 0, including its one deviation from the reference MurmurHash3: the
//! tail bytes are sign-extended (Java's `(long) byte`), so keys with bytes
//! of 0x80 and above hash as in Cassandra, not as in other Murmur3
//! libraries. The token
//! is the first 64-bit half, with `Long.MIN_VALUE` (the partitioner's minimum
//! token, which no key may have) normalized to `Long.MAX_VALUE`
//! (`Murmur3Partitioner.getToken`).

/// A Murmur3 token: a signed 64-bit position on the ring.
pub type Token = i64;

const C1: u64 = 0x87c3_7b91_1142_53d5;
const C2: u64 = 0x4cf5_ad43_2745_937f;

fn fmix(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

fn mix_k1(k1: u64) -> u64 {
    k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2)
}

fn mix_k2(k2: u64) -> u64 {
    k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1)
}

/// `MurmurHash.hash3_x64_128(key, 0, key.length, seed)`, as Cassandra
/// computes it: the two 64-bit halves.
pub fn hash3_x64_128(key: &[u8], seed: u64) -> (u64, u64) {
    let len = key.len();
    let mut h1 = seed;
    let mut h2 = seed;

    let blocks = len / 16;
    for i in 0..blocks {
        let block = &key[i * 16..i * 16 + 16];
        let k1 = u64::from_le_bytes(block[..8].try_into().expect("8 bytes"));
        let k2 = u64::from_le_bytes(block[8..].try_into().expect("8 bytes"));

        h1 ^= mix_k1(k1);
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);

        h2 ^= mix_k2(k2);
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }

    // Java's `(long) byte` sign-extends: Cassandra keeps that quirk.
    let tail = &key[blocks * 16..];
    let byte = |i: usize| tail[i] as i8 as i64 as u64;
    let mut k1 = 0u64;
    let mut k2 = 0u64;
    for i in (8..tail.len()).rev() {
        k2 ^= byte(i) << ((i - 8) * 8);
    }
    if tail.len() > 8 {
        h2 ^= mix_k2(k2);
    }
    for i in (0..tail.len().min(8)).rev() {
        k1 ^= byte(i) << (i * 8);
    }
    if !tail.is_empty() {
        h1 ^= mix_k1(k1);
    }

    h1 ^= len as u64;
    h2 ^= len as u64;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix(h1);
    h2 = fmix(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    (h1, h2)
}

/// The token Cassandra gives a partition key whose serialized form is
/// `key` (for a `text` key: its UTF-8 bytes), as `SELECT token(k)` shows it.
pub fn token_of(key: &[u8]) -> Token {
    normalize(hash3_x64_128(key, 0).0 as i64)
}

/// `Murmur3Partitioner.normalize`: no key or node token is the minimum.
pub fn normalize(token: i64) -> Token {
    if token == i64::MIN { i64::MAX } else { token }
}

/// A deterministic random source (splitmix64), so that a scenario replays
/// the same tokens and host IDs every time.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `Murmur3Partitioner.getRandomToken`: uniform over the ring.
    pub fn token(&mut self) -> Token {
        normalize(self.next_u64() as i64)
    }

    /// A version-4 UUID in its canonical text form, as a host ID.
    pub fn uuid(&mut self) -> String {
        let a = (self.next_u64() & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000;
        let b = (self.next_u64() & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published MurmurHash3_x64_128 vector (seed 0): for ASCII input
    /// Cassandra's variant and the reference agree.
    #[test]
    fn matches_the_reference_vector_for_ascii() {
        let (h1, h2) = hash3_x64_128(b"The quick brown fox jumps over the lazy dog", 0);
        assert_eq!(h1, 0xe34b_bc7b_bc07_1b6c);
        assert_eq!(h2, 0x7a43_3ca9_c49a_9347);
        assert_eq!(hash3_x64_128(b"", 0), (0, 0));
    }

    /// Every tail length takes its own path through the switch.
    #[test]
    fn every_tail_length_hashes_differently() {
        let data = b"0123456789abcdefghijklmnopqrstuv";
        let mut seen = std::collections::BTreeSet::new();
        for len in 0..=data.len() {
            assert!(seen.insert(hash3_x64_128(&data[..len], 0)), "length {len}");
        }
    }

    /// Bytes >= 0x80 in the tail are sign-extended, as in Cassandra: the
    /// result differs from the zero-extending reference algorithm.
    #[test]
    fn sign_extends_high_tail_bytes() {
        let key = [0xffu8, 0x01];
        // With zero extension the tail word would be 0x01ff.
        let zero_extended_k1 = 0x01ffu64;
        let mut h1 = mix_k1(zero_extended_k1) ^ 2;
        let mut h2 = 2u64;
        h1 = h1.wrapping_add(h2);
        h2 = h2.wrapping_add(h1);
        h1 = fmix(h1);
        h2 = fmix(h2);
        h1 = h1.wrapping_add(h2);
        assert_ne!(hash3_x64_128(&key, 0).0, h1);
        // Sign extension: (long) 0xff = -1, so k1 = -1 ^ (1 << 8).
        let k1 = u64::MAX ^ (1 << 8);
        let mut h1 = mix_k1(k1) ^ 2;
        let mut h2 = 2u64;
        h1 = h1.wrapping_add(h2);
        h2 = h2.wrapping_add(h1);
        h1 = fmix(h1);
        h2 = fmix(h2);
        h1 = h1.wrapping_add(h2);
        assert_eq!(hash3_x64_128(&key, 0).0, h1);
    }

    #[test]
    fn the_minimum_token_is_normalized() {
        assert_eq!(normalize(i64::MIN), i64::MAX);
        assert_eq!(normalize(-5), -5);
        assert_eq!(token_of(b"key-1"), hash3_x64_128(b"key-1", 0).0 as i64);
    }

    #[test]
    fn the_rng_is_deterministic_and_makes_v4_uuids() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.token(), b.token());
        let id = a.uuid();
        assert_eq!(id, b.uuid());
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(Rng::new(8).uuid(), Rng::new(7).uuid());
    }
}

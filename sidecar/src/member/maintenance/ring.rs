//! The subranges of a scheduled repair (issue 33): the node's primary
//! ranges (what `nodetool repair -pr` repairs), cut into pieces small
//! enough that a repair stopped (its request withdrawn, the member
//! restarted) loses little, each repaired on its own with
//! `repairAsync(keyspace, {ranges: "start:end"})` as `nodetool repair -st
//! start -et end` sends it. Pure.
//!
//! The primary range of one of the node's tokens `t` is `(p, t]`, `p` the
//! token before `t` in the whole ring (every datacenter's): the range
//! whose first replica is the node, for a keyspace replicated in every
//! datacenter (Cassandra's `getPrimaryRangesForEndpoint`; the tokens come
//! from `TokenToEndpointMap`'s keys, the node's own from `Tokens`). A
//! Cluster is one datacenter, so every keyspace with replicas here is
//! such a keyspace; one with none here has no range here, which the
//! repair skips (`ignoreUnreplicatedKeyspaces`). In a ring of several
//! datacenters, a keyspace left out of some would need the keyspace's own
//! primary ranges (`getRangeToEndpointMap(keyspace)`, first replica). The
//! range of the ring's first token wraps around the ring's end: it is cut
//! there, into `(p, 2^63 - 1]` and `(-2^63, t]`. Murmur3 gives no key
//! the token `-2^63` (`Murmur3Partitioner.normalize` maps it to the
//! maximum), so the two cover every key the wrapping range does, and
//! neither wraps: each lies within one of the node's ranges, as
//! `ActiveRepairService.getNeighbors` requires of a range asked for.
//!
//! The pieces: the node's primary ranges together are cut into about
//! [`DEFAULT_SUBRANGES`] pieces per keyspace (each at most 1/64 of what
//! the node owns as primary, so a stop loses at most that share of a
//! keyspace's repair; a range is never merged with another, so there are
//! at most 64 plus one per token). Reaper's default is the same count
//! per node (`segmentCountPerNode: 64`). A count per node rather than a
//! fixed width keeps the cost of a cycle (one repair session per piece
//! and keyspace, a second or so each even when there is nothing to
//! stream) the same whatever the size of the cluster, and the share a
//! stop loses the same whatever the node holds. Settable
//! (`MAINTENANCE_REPAIR_SUBRANGES`) for tests.

use std::fmt;

/// How many pieces the node's primary ranges are cut into, per keyspace.
pub const DEFAULT_SUBRANGES: u32 = 64;

/// The partitioner the subranges are computed for.
pub const MURMUR3: &str = "org.apache.cassandra.dht.Murmur3Partitioner";

/// A range of Murmur3 tokens `(start, end]`, `start < end` (never
/// wrapping), as `-st start -et end` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Subrange {
    pub start: i64,
    pub end: i64,
}

impl Subrange {
    /// How many tokens it holds.
    pub fn width(&self) -> u128 {
        (i128::from(self.end) - i128::from(self.start)) as u128
    }

    /// Read back from its [`fmt::Display`] form `start:end`; `None` when
    /// it is not a non-wrapping range.
    pub fn parse(text: &str) -> Option<Subrange> {
        let (start, end) = text.trim().split_once(':')?;
        let range = Subrange {
            start: start.trim().parse().ok()?,
            end: end.trim().parse().ok()?,
        };
        (range.start < range.end).then_some(range)
    }
}

/// `start:end`: the `ranges` option of `repairAsync` (`RepairOption`
/// splits on `,`, then each on `:`, and reads the tokens with the
/// partitioner's token factory: decimal for Murmur3).
impl fmt::Display for Subrange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.start, self.end)
    }
}

/// The node's primary ranges `(previous token, own token]`, one per own
/// token, in the order of the ring; the one of the ring's first token
/// wraps (`start >= end`), and a node alone in the ring with one token
/// has `(t, t]`, the whole ring. Own tokens the ring does not list are
/// counted in it.
pub fn primary_ranges(own: &[i64], ring: &[i64]) -> Vec<(i64, i64)> {
    let mut all: Vec<i64> = ring.iter().chain(own).copied().collect();
    all.sort_unstable();
    all.dedup();
    let mut own: Vec<i64> = own.to_vec();
    own.sort_unstable();
    own.dedup();
    own.iter()
        .map(|&token| {
            let at = all.binary_search(&token).unwrap_or_default();
            let previous = if at == 0 {
                all[all.len() - 1]
            } else {
                all[at - 1]
            };
            (previous, token)
        })
        .collect()
}

/// A primary range as ranges that do not wrap (see the module doc): as it
/// is, or cut at the ring's end. Empty pieces are left out.
pub fn unwrap((start, end): (i64, i64)) -> Vec<Subrange> {
    if start < end {
        return vec![Subrange { start, end }];
    }
    let mut pieces = Vec::new();
    if start < i64::MAX {
        pieces.push(Subrange {
            start,
            end: i64::MAX,
        });
    }
    if end > i64::MIN {
        pieces.push(Subrange {
            start: i64::MIN,
            end,
        });
    }
    pieces
}

/// The subranges to repair: the node's primary ranges, unwrapped, each cut
/// into equal pieces no wider than what the node owns as primary divided
/// by `target` (at most `target` pieces, plus one per range), in token
/// order. They cover exactly the primary ranges, without overlap.
pub fn subranges(own: &[i64], ring: &[i64], target: u32) -> Vec<Subrange> {
    let ranges: Vec<Subrange> = primary_ranges(own, ring)
        .into_iter()
        .flat_map(unwrap)
        .collect();
    let owned: u128 = ranges.iter().map(Subrange::width).sum();
    let widest = owned.div_ceil(u128::from(target.max(1))).max(1);
    let mut pieces = Vec::new();
    for range in ranges {
        let width = range.width();
        let count = width.div_ceil(widest).max(1);
        let at = |i: u128| -> i64 {
            // start + width * i / count, within the range: no overflow in
            // i128 (width < 2^64, count <= width).
            (i128::from(range.start) + (width * i / count) as i128) as i64
        };
        for i in 0..count {
            pieces.push(Subrange {
                start: at(i),
                end: at(i + 1),
            });
        }
    }
    pieces.sort_unstable();
    pieces
}

/// The tokens of a Murmur3 ring, as the node lists them (decimal
/// strings); the partitioner's name is checked first: other partitioners'
/// tokens are not numbers of this ring.
pub fn murmur3_tokens(partitioner: &str, tokens: &[String]) -> Result<Vec<i64>, String> {
    if partitioner != MURMUR3 {
        return Err(format!(
            "the scheduled repair cuts Murmur3Partitioner rings only; this cluster uses {partitioner}"
        ));
    }
    tokens
        .iter()
        .map(|t| {
            t.trim()
                .parse()
                .map_err(|_| format!("{t:?} is not a Murmur3 token"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every token in `(MIN, MAX]` is in exactly one of `pieces` when they
    /// tile `ranges`: checked on the boundaries, the only places a gap or
    /// an overlap can hide.
    fn covered_once(pieces: &[Subrange], ranges: &[Subrange]) {
        let total: u128 = pieces.iter().map(Subrange::width).sum();
        let expected: u128 = ranges.iter().map(Subrange::width).sum();
        assert_eq!(total, expected, "the pieces cover as much as the ranges");
        let inside =
            |t: i64, set: &[Subrange]| set.iter().filter(|r| r.start < t && t <= r.end).count();
        for piece in pieces {
            assert!(piece.start < piece.end, "{piece}");
            for t in [piece.start.saturating_add(1), piece.end] {
                assert_eq!(inside(t, pieces), 1, "{t} in one piece");
                assert_eq!(inside(t, ranges), 1, "{t} in one range");
            }
        }
    }

    /// Three nodes, two tokens each: the node's ranges end at its tokens
    /// and start at the ring's previous token, whoever owns it; the one of
    /// the ring's first token wraps from the last.
    #[test]
    fn primary_ranges_end_at_the_own_tokens() {
        let ring = [-6000, -4000, -2000, 0, 2000, 4000];
        // This node has -6000 (the ring's first) and 2000.
        assert_eq!(
            primary_ranges(&[2000, -6000], &ring),
            vec![(4000, -6000), (0, 2000)]
        );
        // Own tokens missing from the ring's list still count.
        assert_eq!(primary_ranges(&[1000], &[0]), vec![(0, 1000)]);
        assert_eq!(primary_ranges(&[1000], &[0]).len(), 1);
        // Alone in the ring: the whole ring.
        assert_eq!(primary_ranges(&[7], &[7]), vec![(7, 7)]);
    }

    /// A wrapping range is cut at the ring's end into two that do not
    /// wrap, and a whole ring into two as well; a range ending at the
    /// ring's end or starting at its minimum is not given an empty piece.
    #[test]
    fn wrapping_ranges_are_cut_at_the_end_of_the_murmur3_ring() {
        assert_eq!(
            unwrap((4000, -6000)),
            vec![
                Subrange {
                    start: 4000,
                    end: i64::MAX
                },
                Subrange {
                    start: i64::MIN,
                    end: -6000
                }
            ]
        );
        assert_eq!(unwrap((-5, 5)), vec![Subrange { start: -5, end: 5 }]);
        assert_eq!(
            unwrap((7, 7)),
            vec![
                Subrange {
                    start: 7,
                    end: i64::MAX
                },
                Subrange {
                    start: i64::MIN,
                    end: 7
                }
            ]
        );
        assert_eq!(
            unwrap((i64::MAX, i64::MIN)),
            Vec::<Subrange>::new(),
            "(MAX, MIN] holds no key"
        );
        assert_eq!(
            unwrap((i64::MAX, 10)),
            vec![Subrange {
                start: i64::MIN,
                end: 10
            }]
        );
        assert_eq!(
            unwrap((i64::MIN, i64::MIN)),
            vec![Subrange {
                start: i64::MIN,
                end: i64::MAX
            }]
        );
    }

    /// The pieces tile the primary ranges exactly (no gap, no overlap),
    /// wrap-around included, none wider than the node's share over the
    /// target, and there are at most target + one per range.
    #[test]
    fn subranges_tile_the_primary_ranges_in_small_pieces() {
        let ring = [
            i64::MIN / 2,
            -4_000_000_000_000_000_000,
            -17,
            0,
            3_000_000_000_000_000_000,
            i64::MAX - 5,
        ];
        for own in [
            vec![i64::MIN / 2, 0],
            vec![-17, i64::MAX - 5],
            vec![3_000_000_000_000_000_000],
        ] {
            for target in [1, 4, 64] {
                let pieces = subranges(&own, &ring, target);
                let ranges: Vec<Subrange> = primary_ranges(&own, &ring)
                    .into_iter()
                    .flat_map(unwrap)
                    .collect();
                covered_once(&pieces, &ranges);
                let owned: u128 = ranges.iter().map(Subrange::width).sum();
                let widest = owned.div_ceil(u128::from(target));
                assert!(
                    pieces.iter().all(|p| p.width() <= widest),
                    "{own:?} {target}"
                );
                assert!(
                    pieces.len() <= target as usize + ranges.len(),
                    "{own:?} {target}: {}",
                    pieces.len()
                );
                assert!(pieces.windows(2).all(|w| w[0] < w[1]), "sorted");
            }
        }
        // A node alone with one token repairs the whole ring, but for the
        // minimum token no key has.
        let alone = subranges(&[42], &[42], 8);
        let whole: u128 = alone.iter().map(Subrange::width).sum();
        assert_eq!(whole, u128::from(u64::MAX));
        assert!(alone.len() <= 8 + 2);
        // Tiny ranges are never cut below one token.
        assert_eq!(
            subranges(&[2], &[0, 2], 64),
            vec![Subrange { start: 0, end: 1 }, Subrange { start: 1, end: 2 }]
        );
    }

    #[test]
    fn subranges_read_back_as_nodetool_writes_them() {
        let range = Subrange {
            start: i64::MIN,
            end: -6000,
        };
        assert_eq!(range.to_string(), "-9223372036854775808:-6000");
        assert_eq!(Subrange::parse(&range.to_string()), Some(range));
        for junk in ["", "5", "5:5", "6:5", "a:b", "1:2:3"] {
            assert_eq!(Subrange::parse(junk), None, "{junk}");
        }
    }

    #[test]
    fn only_murmur3_rings_are_cut() {
        let tokens = vec!["-3".to_string(), " 9223372036854775807".to_string()];
        assert_eq!(murmur3_tokens(MURMUR3, &tokens), Ok(vec![-3, i64::MAX]));
        assert!(
            murmur3_tokens("org.apache.cassandra.dht.RandomPartitioner", &tokens)
                .unwrap_err()
                .contains("RandomPartitioner")
        );
        assert!(murmur3_tokens(MURMUR3, &["x".to_string()]).is_err());
    }
}

// Package ringcoordinator hands out non-overlapping ranges of the Cassandra
// Murmur3 token ring to retry nodes, minute by minute, so that many nodes can
// re-drive stalled sagas without locks (seed 001, "Transaction Retry
// Architecture With Retry Coordinator": one of the design documents this
// project implements, whose tables the splits reproduce; docs/design.md says
// what each seed covers).
//
// # Tokens and splits
//
// [Token] computes, in Go, exactly the token Cassandra's Murmur3Partitioner
// assigns to a partition key, so a retry node can tell which partitions fall
// inside its range without asking the database. [Split] cuts a range of the
// signed 64-bit ring into equal contiguous parts with inclusive bounds: part
// i of n starts at Min + ceil(i*size/n), which reproduces the seed's tables
// digit for digit (4 nodes; 3 slaves; 2 orchestrators under slave 1). Part
// sizes differ by at most one token; where the size is not a multiple of n
// the extra tokens go to the parts the ceiling gives them (the first of 3
// slaves in the seed's table), and the last part always ends at Max.
//
// # Security
//
// Over RSocket every connection's setup carries the ring's shared token
// ([WithToken]); a peer without it is refused at setup. A role refuses to
// start without a token unless [WithInsecure]. Addresses default to
// loopback. The master refuses a slave id live on another connection, a
// second slave on one connection and slaves beyond [WithMaxSlaves]; a
// message over [MaxMessageSize] is refused undecoded.
//
// # Roles
//
// Three roles cooperate over RSocket (any [Transport]; [RSocketTransport] is
// the product's, [NewMemoryTransport] connects the roles of one process
// without sockets):
//
//   - [Master]: one per region and virtual cluster. Slaves register with it
//     by request-stream and stay registered while the stream lives. At second
//     30 of every minute (the midpoint of a shorter demo cycle) it splits the
//     whole ring among the registered slaves that have orchestrators (each
//     slave tells it how many stream from it; among all of them if none
//     has any) and pushes each its slice for the next minute, stamped
//     validForMinute. An orchestrator asks it, by
//     request-response, which slave to use; slaves are handed out round
//     robin. It accepts only slaves and orchestrators of its own region and
//     cluster.
//   - [Slave]: registers with its master (re-registering with backoff when
//     the stream is lost), splits each slice it receives among the
//     orchestrators streaming from it, and pushes each its sub-range.
//   - [Connector]: the orchestrator side, which makes a retry node. It asks
//     the master for a slave, streams its sub-ranges from that slave, and
//     answers the recovery engine's question "which range may I scan now?"
//     ([Connector.Ranges] plugs into recovery.WithRanges).
//
// # Why ranges never overlap
//
// A minute's split is computed once, by the one master, at its publish
// instant, and never changed afterwards. A master that starts (or
// restarts) publishes none of the minutes that begin within two cycles of
// its start: its predecessor, whose clock may be up to a cycle ahead, may
// have published them. A slave never splits a minute that one of its
// orchestrators holds a range of already (an orchestrator names its
// minutes when it subscribes, e.g. after its slave restarted).
//
// A slave that leaves leaves its slice unassigned (frozen) for the
// minutes already published, and the next publish
// splits the ring among the slaves registered then ("lazy rebalance"; with
// [WithLazyRebalance] a departed slave's slot is kept for a few cycles so
// that a quickly restarted slave takes it back without moving the others'
// boundaries). A slave likewise splits its slice for a minute once, among the
// orchestrators connected when it arrives (or, if none is, for the first one
// that connects before the minute ends): orchestrators that connect later get
// a range from the next cycle, and the range of one that leaves stays
// unassigned until the minute ends. A connector holds at most one range per
// minute, uses it only from the start of its minute until a guard interval
// before its end (so clock skew between nodes cannot make two nodes scan the
// same token at once), drops the ranges of minutes that have not started when
// it loses its slave, and with no valid range the engine does not scan.
//
// # Failures
//
// A slave that dies: its orchestrators keep the range of the current minute
// until it ends, then stop; they ask the master for another slave with
// backoff, and the next publish redistributes the ring. A master that dies:
// slaves keep the slices they hold (the current minute, and the next one if
// it was already published), orchestrators keep scanning until those
// minutes end, then stop; slaves re-register with backoff, and all resumes
// at the first publish of the restarted master, about three cycles after
// its start.
//
// Messages are JSON in a versioned envelope ([ProtocolVersion]); a peer
// speaking another version is refused with [ErrUnsupportedVersion].
package ringcoordinator

// Package upgradetest holds the mixed-version tests (issue 40, item 4):
// the previous release's worker, orchestrator and sagactl, built from its
// git tag (PreviousRelease), run against this version's on the same Kafka
// topics and Cassandra keyspace. It has no code of its own but this
// constant; the process both versions run is testdata/sagaproc.
package upgradetest

// PreviousRelease is the tag of the release this version must interoperate
// with during a rolling upgrade (one minor version, both directions).
const PreviousRelease = "v0.1.0"

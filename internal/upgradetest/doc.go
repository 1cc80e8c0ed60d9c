// Package upgradetest holds the mixed-version tests (issue 40, item 4):
// the previous release's worker, orchestrator and sagactl, built from its
// git tag (PreviousRelease) or, in a clone without tags, from its commit
// (PreviousReleaseCommit), run against this version's on the same Kafka
// topics and Cassandra keyspace. It has no code of its own but this
// constant; the process both versions run is testdata/sagaproc.
package upgradetest

// PreviousRelease is the tag of the release this version must interoperate
// with during a rolling upgrade (one minor version, both directions).
const PreviousRelease = "v0.1.0"

// PreviousReleaseCommit is the commit PreviousRelease tags. A clone made
// without tags (CI's, or git clone --no-tags) still has it in main's
// history, so the test builds the release from it; a test checks that the
// tag, where present, names this commit.
const PreviousReleaseCommit = "3a6f33b90600cc9f55a3a6cd347a05535a5dd1d2"

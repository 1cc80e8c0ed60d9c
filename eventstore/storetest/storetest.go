// Package storetest is the conformance suite every eventstore.Store
// implementation runs, in the style of Watermill's shared pub/sub tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) eventstore.Store { return mystore.New() })
//	}
//
// Each subtest calls newStore once and works in its own Scope, so stores
// returned for different subtests may share a database (a keyspace).
package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// Features declares what an implementation offers the suite beyond the
// Store interface.
type Features struct {
	// Advance moves the clock of the stores newStore returns forward by d.
	// With it the TTL tests advance virtual time; without it (nil) they
	// wait in real time, polling with a deadline, which is what a database
	// with its own clock (Cassandra) needs.
	Advance func(d time.Duration)
	// Now reads the clock Advance moves; required with Advance (the
	// expiry tests place inserts at chosen fractions of a second). Without
	// Advance it is ignored: the stores' clock is the wall clock
	// (time.Now), or a database's own clock close to it.
	Now func() time.Time
	// BlindCreate declares that CreateTransaction does not detect a taken
	// transaction id (the Cassandra store writes without a lightweight
	// transaction); the ErrExists check is then skipped.
	BlindCreate bool
	// Concurrency is the number of goroutines that race one conditional
	// insert. Default 50.
	Concurrency int
	// Timeout bounds each real-time wait (TTL expiry). Default 20s.
	Timeout time.Duration
}

// Option configures Run.
type Option func(*config)

type config struct {
	features Features
}

// WithFeatures declares the implementation's features.
func WithFeatures(f Features) Option { return func(c *config) { c.features = f } }

// env is what each conformance test gets.
type env struct {
	store eventstore.Store
	scope eventstore.Scope
	f     Features
}

// advance lets d pass on a virtual clock; it reports false without one.
func (e *env) advance(d time.Duration) bool {
	if e.f.Advance != nil {
		e.f.Advance(d)
		return true
	}
	return false
}

// eventually polls cond until it holds, advancing virtual time by step per
// poll when the store has a virtual clock, or sleeping briefly in real time
// until the timeout.
func (e *env) eventually(t *testing.T, what string, step time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(e.f.Timeout)
	for !cond() {
		if e.advance(step) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not true after advancing the clock", what)
			}
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v", what, e.f.Timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type test struct {
	name string
	fn   func(t *testing.T, e *env)
}

var tests = []test{
	{"TransactionRoundTrip", testTransactionRoundTrip},
	{"CreateExisting", testCreateExisting},
	{"LoadMissing", testLoadMissing},
	{"TransactionState", testTransactionState},
	{"LifecycleStates", testLifecycleStates},
	{"DefinitionVersion", testDefinitionVersion},
	{"CreateWatched", testCreateWatched},
	{"TransitionOverwrites", testTransitionOverwrites},
	{"PutMarkerTTL", testPutMarkerTTL},
	{"TransitionFenced", testTransitionFenced},
	{"TransitionFenceRaised", testTransitionFenceRaised},
	{"TransitionSameVersionMerges", testTransitionSameVersionMerges},
	{"TransitionBeforeCreate", testTransitionBeforeCreate},
	{"TryoutsOrdered", testTryoutsOrdered},
	{"ScopeIsolation", testScopeIsolation},
	{"CopiesValues", testCopiesValues},
	{"Normalization", testNormalization},
	{"Validation", testValidation},
	{"Frozen", testFrozen},
	{"FreezeFenced", testFreezeFenced},
	{"MarkerLease", testMarkerLease},
	{"MarkerPermanentInsert", testMarkerPermanentInsert},
	{"MarkerDelete", testMarkerDelete},
	{"CommitMarker", testCommitMarker},
	{"DeleteMarkerIf", testDeleteMarkerIf},
	{"MarkersPartitionDelete", testMarkersPartitionDelete},
	{"ConcurrentConditionalInsert", testConcurrentInsert},
	{"MarkerTTLExpiry", testMarkerTTLExpiry},
	{"MarkerTTLFromWholeSecond", testMarkerTTLFromWholeSecond},
	{"MarkerTTLReported", testMarkerTTLReported},
	{"MarkerExpiryLimit", testMarkerExpiryLimit},
	{"DirectoryClusteringOrder", testDirectoryOrder},
	{"DirectoryPaging", testDirectoryPaging},
	{"DirectoryDeletes", testDirectoryDeletes},
	{"DirectorySplitWrites", testDirectorySplitWrites},
	{"RestoreWatchdog", testRestoreWatchdog},
	{"AuditTrail", testAuditTrail},
	{"AuditDefaults", testAuditDefaults},
	{"AuditValidation", testAuditValidation},
	{"AuditClosed", testAuditClosed},
	{"BusinessKeyClaim", testBusinessKeyClaim},
	{"BusinessKeyReplace", testBusinessKeyReplace},
	{"BusinessKeyDelete", testBusinessKeyDelete},
	{"BusinessKeyTTL", testBusinessKeyTTL},
	{"BusinessKeyRace", testBusinessKeyRace},
	{"BusinessKeyValidation", testBusinessKeyValidation},
	{"BusinessKeyRead", testBusinessKeyRead},
	{"CanceledContext", testCanceledContext},
	{"Close", testClose},
}

// Run runs the conformance suite against the stores newStore returns. Each
// subtest gets a new store from newStore (the subtest's t) and closes it at
// the end of the subtest.
func Run(t *testing.T, newStore func(t *testing.T) eventstore.Store, opts ...Option) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.features.Concurrency <= 0 {
		c.features.Concurrency = 50
	}
	if c.features.Timeout <= 0 {
		c.features.Timeout = 20 * time.Second
	}
	if c.features.Advance == nil {
		c.features.Now = time.Now
	} else if c.features.Now == nil {
		t.Fatal("storetest: Features.Advance needs Features.Now")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, &env{store: s, scope: UniqueScope(t), f: c.features})
		})
	}
}

// UniqueScope returns a scope no other test uses: region and cluster are
// fixed, the service is derived from the test name plus random bytes.
func UniqueScope(t testing.TB) eventstore.Scope {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return eventstore.Scope{Region: "storetest", Cluster: "default", Service: name + "-" + hex.EncodeToString(b[:])}
}

// must fails the test on err.
func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// mustIs fails the test unless errors.Is(err, target).
func mustIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want %v", what, err, target)
	}
}

package cassandra

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

func TestPermanentClassification(t *testing.T) {
	cases := []struct {
		err  error
		want error
	}{
		{&gocql.RequestErrInvalid{}, eventstore.ErrPermanent},
		{&gocql.RequestErrSyntax{}, eventstore.ErrPermanent},
		{&gocql.RequestErrUnauthorized{}, eventstore.ErrPermanent},
		{&gocql.RequestErrConfig{}, eventstore.ErrPermanent},
		{fmt.Errorf("batch: %w", &gocql.RequestErrInvalid{}), eventstore.ErrPermanent},
		{gocql.MarshalError("can not marshal chan int into varchar"), eventstore.ErrInvalid},
		{&gocql.RequestErrWriteTimeout{}, nil},
		{&gocql.RequestErrReadTimeout{}, nil},
		{&gocql.RequestErrUnavailable{}, nil},
		{&gocql.RequestErrOverloaded{}, nil},
		{&gocql.RequestErrCASWriteUnknown{}, nil},
		{gocql.ErrTimeoutNoResponse, nil},
		{gocql.ErrNoConnections, nil},
		{context.DeadlineExceeded, nil},
		{errors.New("connection reset"), nil},
	}
	s := &Store{}
	for _, c := range cases {
		got := s.fail("op", c.err)
		if c.want == nil {
			if errors.Is(got, eventstore.ErrPermanent) {
				t.Errorf("%T reported permanent: %v", c.err, got)
			}
		} else if !errors.Is(got, c.want) || !errors.Is(got, eventstore.ErrPermanent) {
			t.Errorf("%T: %v does not match %v and ErrPermanent", c.err, got, c.want)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%T: the driver error is not wrapped: %v", c.err, got)
		}
	}
}

func TestInvalidIsPermanent(t *testing.T) {
	if !errors.Is(eventstore.ErrInvalid, eventstore.ErrPermanent) {
		t.Fatal("ErrInvalid does not match ErrPermanent")
	}
	if errors.Is(eventstore.ErrPermanent, eventstore.ErrInvalid) {
		t.Fatal("ErrPermanent matches ErrInvalid")
	}
	if got := eventstore.ErrInvalid.Error(); got != "eventstore: invalid argument" {
		t.Errorf("ErrInvalid message %q", got)
	}
	if err := eventstore.ValidateKey(eventstore.Scope{}, "tx"); !errors.Is(err, eventstore.ErrPermanent) {
		t.Errorf("validation error %v does not match ErrPermanent", err)
	}
}

// GetMarker's not-found error matches eventstore.ErrNotFound and names the
// marker, though it formats its message only when read.
func TestMarkerNotFoundError(t *testing.T) {
	key := eventstore.MarkerKey{Scope: eventstore.Scope{Region: "r", Cluster: "c", Service: "s"}, TxID: "tx-1", Span: 2, Kind: "process", Site: "pay/charge"}
	err := eventstore.MarkerNotFound("cassandra", key)
	if !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("%v does not match ErrNotFound", err)
	}
	if got, want := err.Error(), "cassandra: marker tx-1/2/process/pay/charge: eventstore: not found"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}

// fail says only what is true of a driver error, also once Close has
// begun: a request that can never succeed stays permanent (and is not
// reported closed), a timeout or an interrupted request stays transient
// (it may have been applied), and ErrClosed is for what the driver
// refused to send because the session is closed.
func TestFailClassificationDuringClose(t *testing.T) {
	type class int
	const (
		transient class = iota
		perm
		invalid
		closed
	)
	cases := []struct {
		err          error
		open, during class // before Close and once it has begun
	}{
		{&gocql.RequestErrInvalid{}, perm, perm},
		{&gocql.RequestErrSyntax{}, perm, perm},
		{&gocql.RequestErrUnauthorized{}, perm, perm},
		{&gocql.RequestErrConfig{}, perm, perm},
		{fmt.Errorf("batch: %w", &gocql.RequestErrInvalid{}), perm, perm},
		{gocql.MarshalError("can not marshal chan int into varchar"), invalid, invalid},
		{gocql.ErrSessionClosed, closed, closed},
		{fmt.Errorf("page 2: %w", gocql.ErrSessionClosed), closed, closed},
		{gocql.ErrNoConnections, transient, closed},
		{&gocql.RequestErrWriteTimeout{}, transient, transient},
		{&gocql.RequestErrReadTimeout{}, transient, transient},
		{&gocql.RequestErrUnavailable{}, transient, transient},
		{&gocql.RequestErrOverloaded{}, transient, transient},
		{&gocql.RequestErrCASWriteUnknown{}, transient, transient},
		{gocql.ErrTimeoutNoResponse, transient, transient},
		{gocql.ErrConnectionClosed, transient, transient},
		{io.EOF, transient, transient},
		{net.ErrClosed, transient, transient},
		{context.DeadlineExceeded, transient, transient},
		{context.Canceled, transient, transient},
		{errors.New("connection reset"), transient, transient},
	}
	check := func(s *Store, state string, err error, want class) {
		t.Helper()
		got := s.fail("op", err)
		is := func(target error) bool { return errors.Is(got, target) }
		var ok bool
		switch want {
		case transient:
			ok = !is(eventstore.ErrPermanent) && !is(eventstore.ErrClosed)
		case perm:
			ok = is(eventstore.ErrPermanent) && !is(eventstore.ErrInvalid) && !is(eventstore.ErrClosed)
		case invalid:
			ok = is(eventstore.ErrInvalid) && is(eventstore.ErrPermanent) && !is(eventstore.ErrClosed)
		case closed:
			ok = is(eventstore.ErrClosed) && !is(eventstore.ErrPermanent)
		}
		if !ok {
			t.Errorf("%s: %T %v gave %v, want class %d (0 transient, 1 permanent, 2 invalid, 3 closed)", state, err, err, got, want)
		}
		if !is(err) {
			t.Errorf("%s: %T: the driver error is not wrapped: %v", state, err, got)
		}
		if !strings.HasPrefix(got.Error(), "cassandra: op: ") {
			t.Errorf("%s: message %q lacks the prefix", state, got)
		}
	}
	open, closing := &Store{}, &Store{}
	closing.closed.Store(true)
	for _, c := range cases {
		check(open, "open", c.err, c.open)
		check(closing, "closing", c.err, c.during)
	}
	if got, want := closing.fail("load transaction", gocql.ErrSessionClosed).Error(),
		"cassandra: load transaction: eventstore: closed (session has been closed)"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if got, want := closing.fail("transition", &gocql.RequestErrInvalid{}).Error(),
		"cassandra: transition: eventstore: permanent failure: "; !strings.HasPrefix(got, want) {
		t.Errorf("message %q, want it to start %q", got, want)
	}
}

// A marker LWT whose first try timed out (it may have been applied) and
// whose retry Close then refuses to send has an unknown outcome: it is not
// reported as ErrClosed, which says that nothing was written. Nor is a
// retry after an unavailable coordinator: an LWT's Unavailable may come
// from the commit phase, after a quorum accepted the proposal. A first try
// refused is.
func TestRetryCASClosedAfterUnknownOutcome(t *testing.T) {
	key := eventstore.MarkerKey{Scope: eventstore.Scope{Region: "r", Cluster: "c", Service: "s"}, TxID: "tx", Span: 1, Kind: "process", Site: "x"}
	none := func(map[string]any) eventstore.Marker { return eventstore.Marker{} }
	never := func(eventstore.Marker) bool { return false }
	cases := []struct {
		name       string
		tries      []error // what each try returns; the last one repeats
		wantClosed bool
	}{
		{"timeout then closed", []error{&gocql.RequestErrWriteTimeout{}, gocql.ErrSessionClosed}, false},
		{"CAS unknown then no connections during Close", []error{&gocql.RequestErrCASWriteUnknown{}, gocql.ErrNoConnections}, false},
		{"no response, unavailable, then closed", []error{gocql.ErrTimeoutNoResponse, &gocql.RequestErrUnavailable{}, gocql.ErrSessionClosed}, false},
		{"unavailable then closed", []error{&gocql.RequestErrUnavailable{}, gocql.ErrSessionClosed}, false},
		{"closed at once", []error{gocql.ErrSessionClosed}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Store{log: slog.New(slog.DiscardHandler), lwtTries: 5}
			s.closed.Store(true)
			n := 0
			try := func(map[string]any) (bool, error) {
				err := c.tries[min(n, len(c.tries)-1)]
				n++
				return false, err
			}
			applied, _, err := s.retryCAS(context.Background(), "commit marker", key, try, none, never)
			if applied || err == nil {
				t.Fatalf("applied %v, err %v; want a failure", applied, err)
			}
			if n != len(c.tries) {
				t.Errorf("%d tries, want %d", n, len(c.tries))
			}
			if got := errors.Is(err, eventstore.ErrClosed); got != c.wantClosed {
				t.Errorf("errors.Is(%v, ErrClosed) = %v, want %v", err, got, c.wantClosed)
			}
			if errors.Is(err, eventstore.ErrPermanent) {
				t.Errorf("%v is permanent", err)
			}
			if !c.wantClosed && !strings.Contains(err.Error(), "outcome unknown") {
				t.Errorf("%v does not say the outcome is unknown", err)
			}
		})
	}
}

// Every outcome the driver can report for a lightweight transaction has its
// handling in retryLWT (the live cluster's counterparts are in
// cluster_test.go): applied; not applied, with the row found; an unknown
// outcome retried until a try tells (a refusal that finds the earlier
// try's own effect reports applied) or, when every try fails so,
// eventstore.ErrOutcomeUnknown wrapping the driver's error; a permanent
// refusal at once.
func TestLWTOutcomes(t *testing.T) {
	key := eventstore.MarkerKey{Scope: eventstore.Scope{Region: "r", Cluster: "c", Service: "s"}, TxID: "tx", Span: 1, Kind: "process", Site: "x"}
	type try struct {
		applied bool
		found   string // the owner a refusal finds
		err     error
	}
	casTimeout := &gocql.RequestErrWriteTimeout{WriteType: "CAS", Consistency: gocql.LocalSerial, Received: 1, BlockFor: 2}
	unavailable := &gocql.RequestErrUnavailable{Consistency: gocql.LocalSerial, Required: 2, Alive: 1}
	cases := []struct {
		name        string
		tries       []try // the last one repeats
		wantTries   int
		wantApplied bool
		wantFound   string
		wantErr     []error // what the error wraps; nil: no error
		notErr      []error
	}{
		{name: "applied", tries: []try{{applied: true}}, wantTries: 1, wantApplied: true},
		{name: "not applied", tries: []try{{found: "other"}}, wantTries: 1, wantFound: "other"},
		{name: "CAS write timeout, then the retry finds its own write", tries: []try{{err: casTimeout}, {found: "me"}}, wantTries: 2, wantApplied: true},
		{name: "CAS write timeout, then the retry applies", tries: []try{{err: casTimeout}, {applied: true}}, wantTries: 2, wantApplied: true},
		{name: "CAS write timeout, then the retry finds another's", tries: []try{{err: casTimeout}, {found: "other"}}, wantTries: 2, wantFound: "other"},
		{name: "unavailable, then applied", tries: []try{{err: unavailable}, {applied: true}}, wantTries: 2, wantApplied: true},
		{name: "CAS write timeout every try", tries: []try{{err: casTimeout}}, wantTries: 3,
			wantErr: []error{eventstore.ErrOutcomeUnknown, casTimeout}, notErr: []error{eventstore.ErrPermanent, eventstore.ErrClosed}},
		{name: "unavailable every try", tries: []try{{err: unavailable}}, wantTries: 3,
			wantErr: []error{eventstore.ErrOutcomeUnknown, unavailable}},
		{name: "CAS write unknown every try", tries: []try{{err: &gocql.RequestErrCASWriteUnknown{}}}, wantTries: 3,
			wantErr: []error{eventstore.ErrOutcomeUnknown}},
		{name: "no response, then unavailable", tries: []try{{err: gocql.ErrTimeoutNoResponse}, {err: unavailable}}, wantTries: 3,
			wantErr: []error{eventstore.ErrOutcomeUnknown, unavailable}},
		{name: "refused as invalid", tries: []try{{err: &gocql.RequestErrInvalid{}}}, wantTries: 1,
			wantErr: []error{eventstore.ErrPermanent}, notErr: []error{eventstore.ErrOutcomeUnknown}},
		{name: "overloaded: not sent", tries: []try{{err: &gocql.RequestErrOverloaded{}}}, wantTries: 1,
			notErr: []error{eventstore.ErrOutcomeUnknown, eventstore.ErrPermanent}, wantErr: []error{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Store{log: slog.New(slog.DiscardHandler), lwtTries: 3}
			n := 0
			send := func(prev map[string]any) (bool, error) {
				tr := c.tries[min(n, len(c.tries)-1)]
				n++
				if tr.found != "" {
					prev["state"], prev["owner"] = string(eventstore.MarkerLeased), tr.found
				}
				return tr.applied, tr.err
			}
			mine := func(m eventstore.Marker) bool { return m.Owner == "me" }
			applied, found, err := s.retryCAS(context.Background(), "insert marker", key, send, condReader(key), mine)
			if n != c.wantTries {
				t.Errorf("%d tries, want %d", n, c.wantTries)
			}
			if applied != c.wantApplied || found.Owner != c.wantFound {
				t.Errorf("applied %v, found %q; want %v, %q", applied, found.Owner, c.wantApplied, c.wantFound)
			}
			if (err != nil) != (c.wantErr != nil) {
				t.Fatalf("err = %v, want an error: %v", err, c.wantErr != nil)
			}
			for _, target := range c.wantErr {
				if !errors.Is(err, target) {
					t.Errorf("%v does not wrap %v", err, target)
				}
			}
			for _, target := range c.notErr {
				if errors.Is(err, target) {
					t.Errorf("%v wraps %v", err, target)
				}
			}
		})
	}
}

package cassandra

import (
	"context"
	"errors"
	"fmt"
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

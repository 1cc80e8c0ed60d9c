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

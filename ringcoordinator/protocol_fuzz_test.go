package ringcoordinator

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzDecodeFrame feeds the coordinator's frame decoder arbitrary bytes as
// every message type a peer can send: it never panics, refuses what it cannot
// read with ErrBadMessage or ErrUnsupportedVersion, and what it accepts
// encodes back to a frame that decodes to the same message.
func FuzzDecodeFrame(f *testing.F) {
	scope := scopeMsg{Region: "default", Cluster: "default"}
	for _, b := range [][]byte{
		encode(msgRegister, registerMsg{scopeMsg: scope, SlaveID: "slave-1", Addr: "127.0.0.1:7200"}),
		encode(msgSlice, rangeMsg{scopeMsg: scope, From: "master-1", ValidForMinute: 1_900_000_020_000, ValidUntil: 1_900_000_080_000, Min: -9223372036854775808, Max: 9223372036854775807}),
		encode(msgAssign, assignMsg{scopeMsg: scope, NodeID: "node-1"}),
		encode(msgSlaveAddr, slaveAddrMsg{SlaveID: "slave-1", Addr: "127.0.0.1:7200"}),
		encode(msgSubscribe, subscribeMsg{scopeMsg: scope, NodeID: "node-1"}),
		encode(msgRegistered, acceptedMsg{ID: "master-1"}),
		encode(msgStatus, nil),
		[]byte(`{"v":1,"type":"slice","body":{"min":"1e400","max":"-"}}`),
		[]byte(`{"v":99,"type":"register"}`),
		[]byte(`{"v":1,"type":"register","body":[`),
	} {
		f.Add(b)
	}
	bodies := map[string]func() any{
		msgRegister:   func() any { return new(registerMsg) },
		msgSlice:      func() any { return new(rangeMsg) },
		msgRange:      func() any { return new(rangeMsg) },
		msgAssign:     func() any { return new(assignMsg) },
		msgSlaveAddr:  func() any { return new(slaveAddrMsg) },
		msgSubscribe:  func() any { return new(subscribeMsg) },
		msgRegistered: func() any { return new(acceptedMsg) },
		msgSubscribed: func() any { return new(acceptedMsg) },
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := decode(data, "", nil); err != nil && !errors.Is(err, ErrBadMessage) && !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("decode(any): %v, want ErrBadMessage or ErrUnsupportedVersion", err)
		}
		for typ, mk := range bodies {
			body := mk()
			got, err := decode(data, typ, body)
			if err != nil {
				if !errors.Is(err, ErrBadMessage) && !errors.Is(err, ErrUnsupportedVersion) {
					t.Fatalf("decode(%s): %v, want ErrBadMessage or ErrUnsupportedVersion", typ, err)
				}
				continue
			}
			if got != typ {
				t.Fatalf("decode(%s) returned type %q", typ, got)
			}
			again := mk()
			if _, err := decode(encode(typ, body), typ, again); err != nil {
				t.Fatalf("%s: re-encoded frame refused: %v", typ, err)
			}
			if !reflect.DeepEqual(body, again) {
				t.Fatalf("%s: round trip changed the message: %+v -> %+v", typ, body, again)
			}
		}
	})
}

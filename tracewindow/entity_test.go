package tracewindow_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/stacksaga-go/stacksaga/tracewindow"
)

func TestEntityJSON(t *testing.T) {
	type inner struct {
		Z int    `msgpack:"z"`
		A string `msgpack:"a"`
	}
	type entity struct {
		Name  string            `msgpack:"name"`
		Blob  []byte            `msgpack:"blob"`
		When  time.Time         `msgpack:"when"`
		Ratio float64           `msgpack:"ratio"`
		Bad   float64           `msgpack:"bad"`
		List  []inner           `msgpack:"list"`
		ByInt map[int]string    `msgpack:"by_int"`
		Nil   *inner            `msgpack:"nil"`
		Tags  map[string]string `msgpack:"tags"`
	}
	when := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := msgpack.Marshal(&entity{Name: "ö", Blob: []byte{1, 2, 3}, When: when, Ratio: 0.5, Bad: math.Inf(1),
		List: []inner{{Z: 1, A: "x"}}, ByInt: map[int]string{7: "seven"}})
	if err != nil {
		t.Fatal(err)
	}
	got := string(tracewindow.EntityJSON(b))
	want := `{"name":"ö","blob":"AQID","when":"2031-01-02T03:04:05Z","ratio":0.5,"bad":"+Inf","list":[{"z":1,"a":"x"}],"by_int":{"7":"seven"},"nil":null,"tags":null}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if !json.Valid([]byte(got)) {
		t.Fatal("not JSON")
	}
	if s := string(tracewindow.EntityJSON(nil)); s != "null" {
		t.Fatalf("empty: %s", s)
	}
	bad := string(tracewindow.EntityJSON([]byte{0xc1}))
	if !json.Valid([]byte(bad)) || !strings.Contains(bad, `"$error"`) || !strings.Contains(bad, `"$msgpack_base64":"wQ=="`) {
		t.Fatalf("undecodable: %s", bad)
	}
	// Deep nesting is cut, not a stack overflow.
	deep := make([]byte, 0, 200)
	for range 100 {
		deep = append(deep, 0x91) // fixarray of 1
	}
	deep = append(deep, 0x01)
	if s := string(tracewindow.EntityJSON(deep)); !strings.Contains(s, "$error") {
		t.Fatalf("deep: %.80s", s)
	}
}

func TestFormatDuration(t *testing.T) {
	for ms, want := range map[int64]string{0: "0 ms", 999: "999 ms", 1250: "1.25 s", 185000: "3m 05s", 7380000: "2h 03m"} {
		if got := tracewindow.FormatDuration(ms); got != want {
			t.Errorf("%d: %q want %q", ms, got, want)
		}
	}
}

package secretflag

import (
	"errors"
	"strings"
	"testing"
)

// FuzzCarries: any value is judged without a panic, a refusal never repeats
// the value, and a value that carries a secret still does with a libpq
// keyword or a query parameter appended.
func FuzzCarries(f *testing.F) {
	for _, s := range []string{"host=db password=x", "postgres://u:p@127.0.0.1/db", "postgres://u@h/db?password=x",
		"127.0.0.1:9092", "password='a b'", `Password="x"`, "a://b:c@", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		err := Check("dsn", v)
		if err != nil && !errors.Is(err, ErrSecret) {
			t.Fatalf("Check(%q) = %v, not ErrSecret", v, err)
		}
		if err != nil && len(v) > 8 && strings.Contains(err.Error(), v) {
			t.Fatalf("Check(%q): the error repeats the value", v)
		}
		if !Carries(v + " password=s3cret") {
			t.Fatalf("Carries(%q + password=s3cret) = false", v)
		}
	})
}

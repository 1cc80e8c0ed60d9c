// Package keytest holds the checks every YAML loader's test runs against the
// document's key list (yamlconfig.Keys): every key the loader reads is listed,
// and a misspelt key fails the load naming it.
package keytest

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// Listed fails t unless every key of keys (full keys, "*" for any name) is in
// yamlconfig.Keys.
func Listed(t testing.TB, keys []string) {
	t.Helper()
	if u := yamlconfig.Unlisted(keys); len(u) > 0 {
		t.Fatalf("keys read but not in yamlconfig.Keys: %q", u)
	}
}

// ListedType is Listed for the keys the YAML document type doc reads.
func ListedType(t testing.TB, doc any) {
	t.Helper()
	Listed(t, yamlconfig.KeysOf(reflect.TypeOf(doc)))
}

// Refused fails t unless load refuses each document of cases with an error
// wrapping sentinel and yamlconfig.ErrUnknownKey that names the case's key.
func Refused(t testing.TB, load func([]byte) error, sentinel error, cases map[string]string) {
	t.Helper()
	for doc, key := range cases {
		err := load([]byte(doc))
		if !errors.Is(err, sentinel) || !errors.Is(err, yamlconfig.ErrUnknownKey) || !strings.Contains(err.Error(), key) {
			t.Errorf("load(%q) = %v, want %v naming %s", doc, err, sentinel, key)
		}
	}
}

// Package yamlconfig holds what the packages that read their section of
// the stacksaga YAML document (eventstore/cassandra, writeprotect) share:
// decoding the document, loading it from a file, reading environment
// overrides, and reporting every problem at once, each naming its full key.
package yamlconfig

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Decode unmarshals the YAML document data into doc. A blank document
// leaves doc as it is. Every key under stacksaga: must be one of Keys
// (whichever part of the document doc reads): an unknown or misspelt key
// fails with an error wrapping ErrUnknownKey that names its full key and
// line.
func Decode(data []byte, doc any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := CheckKnown(data); err != nil {
		return err
	}
	return yaml.Unmarshal(data, doc)
}

// LoadFile returns load applied to the contents of the file at path. A
// read error is reported as "<pkg>: read configuration: <err>", an error
// of load as "<path>: <err>"; both wrap the original.
func LoadFile[T any](pkg, path string, load func([]byte) (T, error)) (T, error) {
	var zero T
	data, err := os.ReadFile(path)
	if err != nil {
		return zero, fmt.Errorf("%s: read configuration: %w", pkg, err)
	}
	v, err := load(data)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// Env wraps an environment lookup (os.LookupEnv or a test's) so that it
// reports only variables that are set to a non-blank value, and returns
// that value trimmed.
func Env(lookup func(string) (string, bool)) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
}

// EnvError returns the error of the environment variable name that
// overrides the configuration key (a full key): "<name> (<key>): <err>",
// wrapping err.
func EnvError(name, key string, err error) error {
	return fmt.Errorf("%s (%s): %w", name, key, err)
}

// Problems collects the problems of one configuration section. The zero
// value with Prefix set (the section's key prefix, ending in '.') is ready
// to use.
type Problems struct {
	// Prefix is prepended to every key given to Add.
	Prefix string
	errs   []error
}

// Add records a problem of the key Prefix+key: "<Prefix><key>: <message>",
// the message formatted as by fmt.Errorf (so %w wraps).
func (p *Problems) Add(key, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s%s: "+format, append([]any{p.Prefix, key}, args...)...))
}

// Append records errors that already name their key; nil ones are skipped.
func (p *Problems) Append(errs ...error) {
	for _, err := range errs {
		if err != nil {
			p.errs = append(p.errs, err)
		}
	}
}

// Err returns nil if no problem was recorded. Otherwise it returns
// sentinel (the package's ErrInvalidConfig) joined with every problem, one
// a line, sorted by message, so by key: a stable report.
func (p *Problems) Err(sentinel error) error {
	if len(p.errs) == 0 {
		return nil
	}
	errs := slices.Clone(p.errs)
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(append([]error{sentinel}, errs...)...)
}

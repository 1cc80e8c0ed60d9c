package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// errPasswordFlag refuses --password: a secret given as a flag is visible to
// every user of the machine in the process list (ps, /proc/<pid>/cmdline) and
// often lands in shell history.
var errPasswordFlag = errors.New("--password is not accepted: a flag puts the secret in the process list; " +
	"set STACKSAGA_CASSANDRA_PASSWORD or give --password-file FILE")

// readSecretFile returns the secret in the file at path: its contents less
// one trailing newline. An empty secret is refused.
func readSecretFile(flagName, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flagName, err)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("--%s: %s is empty", flagName, path)
	}
	return s, nil
}

// applyPassword sets *dst from --password-file when it is set, and refuses
// --password outright.
func applyPassword(set map[string]bool, passwordFile string, dst *string) error {
	if set["password"] {
		return errPasswordFlag
	}
	if !set["password-file"] {
		return nil
	}
	s, err := readSecretFile("password-file", passwordFile)
	if err != nil {
		return err
	}
	*dst = s
	return nil
}

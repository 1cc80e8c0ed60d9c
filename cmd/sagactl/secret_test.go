package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A password given as a flag is refused by every command that connects
// (the secret would show in the process list), and the refusal does not echo
// it; --password-file reads it instead.
func TestPasswordFlagRefused(t *testing.T) {
	clearAdminEnv(t)
	const secret = "s3cret-planted-0123"
	for _, args := range [][]string{
		{"list", "frozen", "--service", "s", "--password", secret},
		{"show", aTxID, "--service", "s", "--password", secret},
		{"schema", "apply", "--password", secret},
		{"trace-window", "--service", "s", "--anonymous-reads", "--password", secret},
	} {
		code, out, errOut := sagactl(t, args...)
		if code == 0 {
			t.Errorf("%q: exit 0", args)
		}
		if !strings.Contains(errOut, "process list") || !strings.Contains(errOut, "--password-file") {
			t.Errorf("%q: stderr %q does not say why and what to use", args, errOut)
		}
		if strings.Contains(out+errOut, secret) {
			t.Errorf("%q: the output repeats the secret: %q", args, out+errOut)
		}
	}
}

func TestPasswordFile(t *testing.T) {
	clearAdminEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newAdminFlags("list")
	if _, err := f.parse([]string{"frozen", "--service", "s", "--username", "u", "--password-file", file}); err != nil {
		t.Fatal(err)
	}
	cfg, err := cassandraConfig(f, f.set())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Password != "from-file" || cfg.Username != "u" {
		t.Fatalf("password %q user %q, want from-file and u", cfg.Password, cfg.Username)
	}

	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, says := range map[string]string{empty: "is empty", filepath.Join(dir, "absent"): "no such file"} {
		f := newAdminFlags("list")
		if _, err := f.parse([]string{"frozen", "--service", "s", "--password-file", path}); err != nil {
			t.Fatal(err)
		}
		if _, err := cassandraConfig(f, f.set()); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("--password-file %s: %v, want an error saying %q", path, err, says)
		}
	}
}

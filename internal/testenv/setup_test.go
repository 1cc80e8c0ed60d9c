package testenv_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runSetupCheck runs `scripts/setup --check` with PATH holding only dir (plus
// bash itself, found before PATH changes) and returns its output and exit code.
func runSetupCheck(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "setup"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, append([]string{script, "--check"}, args...)...)
	cmd.Env = []string{"PATH=" + dir, "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("scripts/setup: %v", err)
	}
	return string(out), code
}

// fakeTool puts an executable named name in dir.
func fakeTool(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestSetupNamesWhatIsMissing checks the README's promise that `make test`
// sets up a fresh machine: scripts/setup (which make test and .ci/run call)
// finds a machine without Chromium, git or make, and names the one command
// that installs them; once they are there it has nothing to do.
func TestSetupNamesWhatIsMissing(t *testing.T) {
	empty := t.TempDir()
	out, code := runSetupCheck(t, empty, "--no-services")
	if code != 1 {
		t.Fatalf("scripts/setup --check on a bare PATH: exit %d, want 1; output:\n%s", code, out)
	}
	if want := "apt-get install -y --no-install-recommends git make chromium"; !strings.Contains(out, want) {
		t.Fatalf("scripts/setup --check does not name the install command %q; output:\n%s", want, out)
	}

	full := t.TempDir()
	for _, name := range []string{"git", "make", "chromium"} {
		fakeTool(t, full, name)
	}
	if out, code := runSetupCheck(t, full, "--no-services"); code != 0 {
		t.Fatalf("scripts/setup --check with git, make and chromium present: exit %d, want 0; output:\n%s", code, out)
	}

	// Without --no-services it also wants Maven (and a JDK 17 under /usr/lib/jvm,
	// which this machine may or may not have: only Maven is asserted).
	out, code = runSetupCheck(t, full)
	if code != 1 || !strings.Contains(out, "maven") {
		t.Fatalf("scripts/setup --check without mvn: exit %d, want 1 naming maven; output:\n%s", code, out)
	}
}

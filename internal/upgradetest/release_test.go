package upgradetest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPreviousReleaseCommitIsItsTag: the commit the mixed-version test
// falls back to in a clone without tags is the one PreviousRelease tags,
// and it is in this branch's history.
func TestPreviousReleaseCommitIsItsTag(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git: %v", err)
	}
	if err := exec.Command("git", "-C", root, "merge-base", "--is-ancestor", PreviousReleaseCommit, "HEAD").Run(); err != nil {
		if out, _ := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output(); strings.TrimSpace(string(out)) == "true" {
			t.Logf("shallow clone: %s is not in its history (the mixed-version test fetches it)", PreviousReleaseCommit)
			return
		}
		t.Fatalf("%s (%s) is not an ancestor of HEAD: %v", PreviousReleaseCommit, PreviousRelease, err)
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", PreviousRelease+"^{commit}").Output()
	if err != nil {
		t.Logf("tag %s is not in this clone (the mixed-version test builds %s)", PreviousRelease, PreviousReleaseCommit)
		return
	}
	if got := strings.TrimSpace(string(out)); got != PreviousReleaseCommit {
		t.Fatalf("tag %s names %s, PreviousReleaseCommit says %s", PreviousRelease, got, PreviousReleaseCommit)
	}
}

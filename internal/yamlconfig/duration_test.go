package yamlconfig

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"5s": 5 * time.Second, " 1m30s ": 90 * time.Second, "500ms": 500 * time.Millisecond,
		"PT5S": 5 * time.Second, "pt1.5s": 1500 * time.Millisecond, "P1DT2H": 26 * time.Hour, "PT24H": 24 * time.Hour,
	} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "5", "1.5", "P", "PT", "P1DT", "soon", "5 s"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
}

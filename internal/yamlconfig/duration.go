package yamlconfig

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$`)

// ParseDuration parses a Go duration ("5s", "1m30s", "500ms") or an
// ISO-8601 duration of days, hours, minutes and seconds ("PT5S", "P1DT2H"),
// as every configuration loader of the module accepts them. A bare number
// is refused: its unit would be ambiguous.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("duration %q needs a unit, e.g. %ss", s, s)
	}
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	up := strings.ToUpper(s)
	m := isoDuration.FindStringSubmatch(up)
	if m == nil || up == "P" || up == "PT" || strings.HasSuffix(up, "T") {
		return 0, fmt.Errorf("invalid duration %q (want e.g. 30s, 500ms or PT30S)", s)
	}
	var d time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute} {
		if m[i+1] != "" {
			n, err := strconv.ParseInt(m[i+1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("duration %q: %w", s, err)
			}
			d += time.Duration(n) * unit
		}
	}
	if m[4] != "" {
		f, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			return 0, fmt.Errorf("duration %q: %w", s, err)
		}
		d += time.Duration(f * float64(time.Second))
	}
	return d, nil
}

package recovery

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$`)

// ParseDuration parses a Go duration ("24h", "1m30s", "2s") or an ISO-8601
// duration of days, hours, minutes and seconds ("PT24H", "P1D"). A bare
// number is refused: its unit would be ambiguous.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("recovery: duration %q needs a unit, e.g. %ss", s, s)
	}
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	up := strings.ToUpper(s)
	m := isoDuration.FindStringSubmatch(up)
	if m == nil || up == "P" || up == "PT" || strings.HasSuffix(up, "T") {
		return 0, fmt.Errorf("recovery: invalid duration %q (want e.g. 24h, 2s or PT24H)", s)
	}
	var d time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute} {
		if m[i+1] != "" {
			n, err := strconv.ParseInt(m[i+1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("recovery: duration %q: %w", s, err)
			}
			d += time.Duration(n) * unit
		}
	}
	if m[4] != "" {
		f, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			return 0, fmt.Errorf("recovery: duration %q: %w", s, err)
		}
		d += time.Duration(f * float64(time.Second))
	}
	return d, nil
}

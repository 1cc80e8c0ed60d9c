package recovery

import (
	"fmt"
	"time"

	"github.com/stacksaga-go/stacksaga/internal/yamlconfig"
)

// ParseDuration parses a Go duration ("24h", "1m30s", "2s") or an ISO-8601
// duration of days, hours, minutes and seconds ("PT24H", "P1D"). A bare
// number is refused: its unit would be ambiguous.
func ParseDuration(s string) (time.Duration, error) {
	d, err := yamlconfig.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("recovery: %w", err)
	}
	return d, nil
}

package orchestrator

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// DefaultRegion is the region of an instance that names none. Its code is 1.
const DefaultRegion = "default"

// ErrUnknownRegion means a region name has no code: a custom region needs a
// RegionResolver that knows it.
var ErrUnknownRegion = errors.New("orchestrator: unknown region")

// RegionResolver maps a region name to its unique 12-bit code (1-4095), which
// every transaction id carries.
type RegionResolver interface {
	RegionCode(region string) (uint16, error)
}

// RegionMap is a RegionResolver backed by a map. DefaultRegion maps to 1
// unless the map says otherwise.
type RegionMap map[string]uint16

// RegionCode implements RegionResolver.
func (m RegionMap) RegionCode(region string) (uint16, error) {
	c, ok := m[region]
	if !ok {
		if region == DefaultRegion {
			return 1, nil
		}
		return 0, fmt.Errorf("%w: %q (register it with WithRegionResolver)", ErrUnknownRegion, region)
	}
	if c < 1 || c > 4095 {
		return 0, fmt.Errorf("orchestrator: region %q has code %d, want 1-4095", region, c)
	}
	return c, nil
}

// NewTxID returns a transaction id: an RFC 9562 version-8 UUID laid out like
// a version 7 (48-bit unix milliseconds first, so ids sort by time) whose
// 12 "rand_a" bits carry the region code, followed by 62 random bits.
func NewTxID(now time.Time, regionCode uint16) (string, error) {
	if regionCode < 1 || regionCode > 4095 {
		return "", fmt.Errorf("orchestrator: region code %d out of range 1-4095", regionCode)
	}
	var u uuid.UUID
	ms := uint64(now.UnixMilli())
	u[0] = byte(ms >> 40)
	u[1] = byte(ms >> 32)
	u[2] = byte(ms >> 24)
	u[3] = byte(ms >> 16)
	u[4] = byte(ms >> 8)
	u[5] = byte(ms)
	binary.BigEndian.PutUint16(u[6:8], 0x8000|regionCode)
	if _, err := rand.Read(u[8:]); err != nil {
		return "", fmt.Errorf("orchestrator: transaction id: %w", err)
	}
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u.String(), nil
}

// RegionCodeOf extracts the region code from a transaction id made by
// NewTxID.
func RegionCodeOf(txID string) (uint16, error) {
	u, err := uuid.Parse(txID)
	if err != nil {
		return 0, fmt.Errorf("orchestrator: transaction id %q: %w", txID, err)
	}
	if u.Version() != 8 {
		return 0, fmt.Errorf("orchestrator: transaction id %q is not a StackSaga id (version %d)", txID, u.Version())
	}
	return binary.BigEndian.Uint16(u[6:8]) & 0x0fff, nil
}

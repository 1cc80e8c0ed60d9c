package ringcoordinator

import (
	"errors"
	"fmt"
	"math/big"
	"math/bits"

	"github.com/stacksaga-go/stacksaga/eventstore"
)

// ErrInvalidSplit is wrapped by the errors of Split.
var ErrInvalidSplit = errors.New("ringcoordinator: invalid split")

// FullRing is the whole Murmur3 token ring, MinToken..MaxToken.
var FullRing = eventstore.FullRing

// Split cuts r into n contiguous parts in ring order, with inclusive bounds,
// that together cover r exactly once. Part i (0-based) starts at
//
//	r.Min + ceil(i * size / n)    where size = r.Max - r.Min + 1 tokens,
//
// and ends one token before part i+1 starts; the last part ends at r.Max.
// Every part is non-empty and part sizes differ by at most one token. This
// reproduces the seed's tables digit for digit: the ring among 4 nodes
// (4,611,686,018,427,387,904 tokens each), among 3 slaves (the first gets
// the one extra token: it ends at -3,074,457,345,618,258,603), and slave 1's
// slice among 2 orchestrators.
//
// It fails (wrapping ErrInvalidSplit) when n < 1, when r.Min > r.Max, or
// when r has fewer than n tokens.
func Split(r eventstore.TokenRange, n int) ([]eventstore.TokenRange, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: %d parts", ErrInvalidSplit, n)
	}
	if r.Min > r.Max {
		return nil, fmt.Errorf("%w: range [%d, %d] is empty", ErrInvalidSplit, r.Min, r.Max)
	}
	span := Span(r) // size - 1, fits in uint64 even for the whole ring
	if uint64(n-1) > span {
		return nil, fmt.Errorf("%w: range [%d, %d] has %d tokens, fewer than %d parts", ErrInvalidSplit, r.Min, r.Max, span+1, n)
	}
	parts := make([]eventstore.TokenRange, n)
	start := r.Min
	for i := range n {
		end := r.Max
		if i < n-1 {
			end = addOffset(r.Min, ceilFraction(span, uint64(i+1), uint64(n))) - 1
		}
		parts[i] = eventstore.TokenRange{Min: start, Max: end}
		start = end + 1
	}
	return parts, nil
}

// partOf returns part i of n of r as Split cuts it, without cutting the
// others; r must hold at least n tokens and 0 <= i < n.
func partOf(r eventstore.TokenRange, i, n int) eventstore.TokenRange {
	span := Span(r)
	p := eventstore.TokenRange{Min: r.Min, Max: r.Max}
	if i > 0 {
		p.Min = addOffset(r.Min, ceilFraction(span, uint64(i), uint64(n)))
	}
	if i < n-1 {
		p.Max = addOffset(r.Min, ceilFraction(span, uint64(i+1), uint64(n))) - 1
	}
	return p
}

// SplitRing is Split of the whole ring.
func SplitRing(n int) ([]eventstore.TokenRange, error) { return Split(FullRing, n) }

// Span returns r.Max - r.Min: the number of tokens in r minus one, which
// fits in a uint64 even for the whole ring (2^64 tokens). r must not be
// empty.
func Span(r eventstore.TokenRange) uint64 { return uint64(r.Max) - uint64(r.Min) }

// Size returns the number of tokens in r (0 if r is empty), as a big.Int
// because the whole ring has 2^64 of them.
func Size(r eventstore.TokenRange) *big.Int {
	if r.Min > r.Max {
		return new(big.Int)
	}
	s := new(big.Int).SetUint64(Span(r))
	return s.Add(s, big.NewInt(1))
}

// ceilFraction returns ceil(i * (span+1) / n) for 0 < i < n, n >= 2, with
// 128-bit intermediate arithmetic. The result is below span+1 <= 2^64, so
// it fits.
func ceilFraction(span, i, n uint64) uint64 {
	hi, lo := bits.Mul64(i, span) // i * span
	var c uint64
	lo, c = bits.Add64(lo, i, 0) // + i: i * (span+1)
	hi += c
	lo, c = bits.Add64(lo, n-1, 0) // + n-1: ceiling
	hi += c
	q, _ := bits.Div64(hi, lo, n) // hi < n since the quotient < 2^64
	return q
}

// addOffset returns min + off on the ring (two's complement, no overflow
// for offsets that stay within the range).
func addOffset(min int64, off uint64) int64 { return int64(uint64(min) + off) }

// Overlaps reports whether a and b share a token.
func Overlaps(a, b eventstore.TokenRange) bool { return a.Min <= b.Max && b.Min <= a.Max }

package ringcoordinator

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// MinToken and MaxToken bound the Murmur3 token ring. MinToken is the token of
// the empty key only: no non-empty key ever maps to it, because Cassandra
// replaces a hash of MinInt64 with MaxInt64.
const (
	MinToken int64 = math.MinInt64
	MaxToken int64 = math.MaxInt64
)

const (
	murmurC1 = 0x87c37b91114253d5
	murmurC2 = 0x4cf5ad432745937f
)

// Token returns the token Cassandra's Murmur3Partitioner assigns to a
// partition key whose serialized form is key; it equals CQL token(k) for a
// single-column partition key (the bytes of a text key are its UTF-8 encoding,
// of a blob key the blob itself).
//
// It is the first 64 bits of MurmurHash3 x64_128 with seed 0, computed the way
// Cassandra's MurmurHash.hash3_x64_128 does it, which differs from the
// reference algorithm (and from github.com/spaolacci/murmur3's Sum128) in one
// place: the last len(key)%16 bytes are sign-extended before they are mixed
// in, so keys whose tail bytes are >= 0x80 hash differently. As in
// Murmur3Partitioner.getToken, the empty key has token [MinToken] and a hash
// equal to MinInt64 is reported as [MaxToken].
func Token(key []byte) int64 {
	if len(key) == 0 {
		return MinToken
	}
	return normalize(cassandraMurmur3H1(key))
}

// normalize mirrors Murmur3Partitioner.normalize: MinInt64 is reserved for
// the minimum token, so a hash equal to it becomes MaxInt64.
func normalize(h int64) int64 {
	if h == math.MinInt64 {
		return MaxToken
	}
	return h
}

// cassandraMurmur3H1 is the first half of Cassandra's hash3_x64_128(key, seed 0).
func cassandraMurmur3H1(key []byte) int64 {
	var h1, h2 uint64
	n := len(key)
	nblocks := n / 16
	for i := range nblocks {
		k1 := binary.LittleEndian.Uint64(key[i*16:])
		k2 := binary.LittleEndian.Uint64(key[i*16+8:])

		k1 *= murmurC1
		k1 = bits.RotateLeft64(k1, 31)
		k1 *= murmurC2
		h1 ^= k1
		h1 = bits.RotateLeft64(h1, 27)
		h1 += h2
		h1 = h1*5 + 0x52dce729

		k2 *= murmurC2
		k2 = bits.RotateLeft64(k2, 33)
		k2 *= murmurC1
		h2 ^= k2
		h2 = bits.RotateLeft64(h2, 31)
		h2 += h1
		h2 = h2*5 + 0x38495ab5
	}

	// Tail: Java reads each byte as a signed byte and widens it to long, so
	// a byte >= 0x80 contributes 0xffff...ff<b> shifted into place.
	tail := key[nblocks*16:]
	var k1, k2 uint64
	for i := len(tail) - 1; i >= 8; i-- {
		k2 ^= signExtend(tail[i]) << (8 * uint(i-8))
	}
	if len(tail) > 8 {
		k2 *= murmurC2
		k2 = bits.RotateLeft64(k2, 33)
		k2 *= murmurC1
		h2 ^= k2
	}
	for i := min(len(tail), 8) - 1; i >= 0; i-- {
		k1 ^= signExtend(tail[i]) << (8 * uint(i))
	}
	if len(tail) > 0 {
		k1 *= murmurC1
		k1 = bits.RotateLeft64(k1, 31)
		k1 *= murmurC2
		h1 ^= k1
	}

	h1 ^= uint64(n)
	h2 ^= uint64(n)
	h1 += h2
	h2 += h1
	h1 = fmix64(h1)
	h2 = fmix64(h2)
	h1 += h2
	return int64(h1)
}

func signExtend(b byte) uint64 { return uint64(int64(int8(b))) }

func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

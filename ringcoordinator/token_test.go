package ringcoordinator

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/spaolacci/murmur3"

	"github.com/stacksaga-go/stacksaga/internal/testenv"
)

// tokenVectors were read from Cassandra 5.0.8 with
// SELECT token(0x<hex of key>) FROM <table with a blob partition key>.
var tokenVectors = []struct {
	key  string
	want int64
}{
	{"", math.MinInt64},
	{"a", -8839064797231613815},
	{"abc", -5434086359492102041},
	{"hello", -3758069500696749310},
	{"saga-tx-0001", -2675804022346941720},
	{"0123456789abcdef", 5467490433528156583},   // one full block, no tail
	{"0123456789abcdefg", -8200385122730116642}, // one block + 1 tail byte
	{"\x7f", 5072634478945617755},
	{"\x80", -5284281814142962636},
	{"\xff", -4442228696663692417},
	{"ü", 2039338041252279364},
	{"日本語", 2587241856907040145},
	{"tx-ü", -7895526482192419824},
	{"0123456789abcdeé", 7957485618791450925},
	{"0123456789abcdef\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4\xf3\xf2\xf1", -6771374590492693047}, // 15 high tail bytes
	{"\x00", 5048724184180415669},
	{"\x00\x00\x00\x00\x00\x00\x00\x00\x00", 8297479994805284640},
	{"😀 emoji", -3031933416890505177},
}

func TestTokenVectors(t *testing.T) {
	for _, v := range tokenVectors {
		if got := Token([]byte(v.key)); got != v.want {
			t.Errorf("Token(%q) = %d, want %d", v.key, got, v.want)
		}
	}
}

func TestTokenNilAndEmptyAreMinToken(t *testing.T) {
	if Token(nil) != MinToken || Token([]byte{}) != MinToken {
		t.Fatalf("Token(nil)=%d Token([]byte{})=%d, want MinToken", Token(nil), Token([]byte{}))
	}
}

func TestNormalizeMapsMinToMax(t *testing.T) {
	if got := normalize(math.MinInt64); got != math.MaxInt64 {
		t.Fatalf("normalize(MinInt64) = %d, want MaxInt64", got)
	}
	for _, h := range []int64{math.MinInt64 + 1, -1, 0, 1, math.MaxInt64} {
		if got := normalize(h); got != h {
			t.Fatalf("normalize(%d) = %d, want it unchanged", h, got)
		}
	}
}

// TestTokenAgreesWithReferenceMurmur3 checks the block and finalisation code
// against github.com/spaolacci/murmur3 (the reference x64_128), which matches
// Cassandra whenever every tail byte is below 0x80, and shows the two differ
// once a tail byte has its high bit set.
func TestTokenAgreesWithReferenceMurmur3(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 100; n++ {
		for range 20 {
			key := make([]byte, n)
			for i := range key {
				key[i] = byte(rng.IntN(0x100))
			}
			for i := n - n%16; i < n; i++ {
				key[i] &= 0x7f // ASCII tail: the reference algorithm applies
			}
			h1, _ := murmur3.Sum128(key)
			if got, want := Token(key), normalize(int64(h1)); got != want {
				t.Fatalf("len %d key %x: Token = %d, reference murmur3 = %d", n, key, got, want)
			}
		}
	}
	key := []byte("tx-ü") // tail byte 0xbc
	if h1, _ := murmur3.Sum128(key); int64(h1) == Token(key) {
		t.Fatalf("reference murmur3 equals Token for %q: the sign-extension case is not exercised", key)
	}
}

func BenchmarkToken(b *testing.B) {
	key := []byte("order-service/tx-0c6f3d1e-8a4b-4b8e-9f5d-2a7c1e9b3f00")
	for b.Loop() {
		Token(key)
	}
}

// TestTokenMatchesCassandra compares Token with CQL token() on a real
// Cassandra for 1,600+ keys: random blobs of every length 0..40 (about half of
// all tail bytes >= 0x80), longer random blobs, and random UTF-8 text (1- to 4-byte runes).
func TestTokenMatchesCassandra(t *testing.T) {
	hosts, keyspace := testenv.CassandraKeyspace(t)
	cluster := gocql.NewCluster(hosts...)
	cluster.Keyspace = keyspace
	cluster.Timeout = 30 * time.Second
	cluster.Logger = gocql.NewLogger(gocql.LogLevelNone)
	s, err := cluster.CreateSession()
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, stmt := range []string{
		"CREATE TABLE blob_keys (k blob PRIMARY KEY)",
		"CREATE TABLE text_keys (k text PRIMARY KEY)",
	} {
		if err := s.Query(stmt).ExecContext(ctx); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("random keys from seed %d", seed)
	var blobs [][]byte
	highTails := 0
	for n := 1; n <= 40; n++ {
		for range 25 {
			blobs = append(blobs, randomBytes(rng, n))
		}
		// and one key whose whole tail has the high bit set
		k := randomBytes(rng, n)
		for i := n - n%16; i < n; i++ {
			k[i] |= 0x80
		}
		blobs = append(blobs, k)
	}
	for range 200 {
		blobs = append(blobs, randomBytes(rng, 41+rng.IntN(200)))
	}
	blobs = dedupe(blobs) // short random keys repeat; each row is one key
	for _, b := range blobs {
		if len(b)%16 != 0 && b[len(b)-1] >= 0x80 {
			highTails++
		}
	}
	var texts []string
	for range 400 {
		texts = append(texts, randomText(rng, 1+rng.IntN(24)))
	}
	texts = dedupe(texts)

	insertAll(ctx, t, s, "INSERT INTO blob_keys (k) VALUES (?)", len(blobs), func(i int) any { return blobs[i] })
	insertAll(ctx, t, s, "INSERT INTO text_keys (k) VALUES (?)", len(texts), func(i int) any { return texts[i] })

	checked := 0
	lengths := map[int]bool{}
	compare := func(table string) {
		iter := s.Query("SELECT k, token(k) FROM " + table).PageSize(500).IterContext(ctx)
		var (
			k   []byte
			tok int64
		)
		for iter.Scan(&k, &tok) {
			if got := Token(k); got != tok {
				t.Errorf("%s: key %x (%q): Token = %d, Cassandra token() = %d", table, k, k, got, tok)
			}
			lengths[len(k)] = true
			checked++
		}
		if err := iter.Close(); err != nil {
			t.Fatalf("select from %s: %v", table, err)
		}
	}
	compare("blob_keys")
	compare("text_keys")

	// The empty key cannot be stored, but token() of a literal works.
	var empty int64
	if err := s.Query("SELECT token(0x) FROM blob_keys LIMIT 1").ScanContext(ctx, &empty); err != nil {
		t.Fatalf("token(0x): %v", err)
	}
	if got := Token(nil); got != empty {
		t.Errorf("Token(empty) = %d, Cassandra token(0x) = %d", got, empty)
	}
	lengths[0] = true
	checked++

	if want := len(blobs) + len(texts) + 1; checked != want {
		t.Fatalf("compared %d keys, want %d", checked, want)
	}
	for n := 0; n <= 40; n++ {
		if !lengths[n] {
			t.Errorf("no key of length %d was compared", n)
		}
	}
	if checked < 1000 || highTails < 100 {
		t.Fatalf("only %d keys (%d with a high tail byte) compared", checked, highTails)
	}
	t.Logf("Token equals CQL token() for %d keys (%d blobs with a tail byte >= 0x80, %d random UTF-8 texts)",
		checked, highTails, len(texts))
}

func dedupe[T string | []byte](keys []T) []T {
	seen := map[string]bool{}
	out := keys[:0]
	for _, k := range keys {
		if !seen[string(k)] {
			seen[string(k)] = true
			out = append(out, k)
		}
	}
	return out
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.IntN(0x100))
	}
	return b
}

// randomText mixes 1- to 4-byte UTF-8 runes, so text keys have non-ASCII tails.
func randomText(rng *rand.Rand, runes int) string {
	ranges := [][2]rune{{'a', 'z'}, {0xa0, 0x7ff}, {0x4e00, 0x9fff}, {0x1f600, 0x1f64f}}
	var b strings.Builder
	for range runes {
		r := ranges[rng.IntN(len(ranges))]
		b.WriteRune(r[0] + rune(rng.IntN(int(r[1]-r[0]+1))))
	}
	s := b.String()
	if !utf8.ValidString(s) {
		panic(fmt.Sprintf("invalid UTF-8 %q", s))
	}
	return s
}

// insertAll runs stmt for n values with a few concurrent writers.
func insertAll(ctx context.Context, t *testing.T, s *gocql.Session, stmt string, n int, value func(int) any) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := s.Query(stmt, value(i)).ExecContext(ctx); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s [%x]: %w", stmt, value(i), err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

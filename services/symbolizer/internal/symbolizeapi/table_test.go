package symbolizeapi

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/symbolizecodec"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/symbolizer/internal/resultcache"
)

// testIndex builds the index of a compiled program with inlined calls and returns addresses
// across its executable segment, some of them repeated and some resolving to nothing.
func testIndex(t *testing.T) (*index.Index, []resultcache.Key) {
	path := testsupport.CompileC(t, src, "-g", "-O2")
	ix, _, err := debuginfo.OpenIndex(path, debuginfo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lo, hi uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			lo, hi = p.Vaddr, p.Vaddr+p.Filesz
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	var keys []resultcache.Key
	// Enough keys for several of internPending's windows.
	for i := 0; i < 2000; i++ {
		keys = append(keys, resultcache.Key{BuildID: "b", Tag: "t", Addr: lo + r.Uint64N(hi-lo)})
	}
	keys = append(keys, resultcache.Key{BuildID: "b", Tag: "t", Addr: 1}) // before every segment
	return ix, keys
}

// TestCachedValuesAnswerLikeTheIndex checks that what a replica writes to the result cache
// gives another replica, reading it back, exactly the frames the index gives.
func TestCachedValuesAnswerLikeTheIndex(t *testing.T) {
	ix, keys := testIndex(t)
	st := ix.Strings()
	direct := newTable(st, len(keys))
	vals := direct.lookup(ix, keys, nil, true)

	cached := newTable(st, len(keys))
	for j, v := range vals {
		if err := cached.addValue(j, v); err != nil {
			t.Fatalf("value %d: %v", j, err)
		}
	}
	// A replica with half the answers cached looks up the other half.
	mixed := newTable(st, len(keys))
	var odd []int
	for j, v := range vals {
		if j%2 == 0 {
			if err := mixed.addValue(j, v); err != nil {
				t.Fatalf("value %d: %v", j, err)
			}
		} else {
			odd = append(odd, j)
		}
	}
	mixed.lookup(ix, keys, odd, false)
	// Addresses in request order, with duplicates and one outside every segment.
	ok := make([]bool, 0, 2*len(keys))
	slot := make([]int, 0, 2*len(keys))
	for j := range keys {
		ok, slot = append(ok, true, j%7 != 0), append(slot, j, len(keys)-1-j)
	}
	a, b, c := &symbolizerv1.ModuleResult{}, &symbolizerv1.ModuleResult{}, &symbolizerv1.ModuleResult{}
	direct.emit(a, ok, slot)
	cached.emit(b, ok, slot)
	mixed.emit(c, ok, slot)
	da, err := symbolizecodec.Decode(a, len(ok))
	if err != nil {
		t.Fatal(err)
	}
	db, err := symbolizecodec.Decode(b, len(ok))
	if err != nil {
		t.Fatal(err)
	}
	dc, err := symbolizecodec.Decode(c, len(ok))
	if err != nil {
		t.Fatal(err)
	}
	resolved, inlined := 0, 0
	for i := range ok {
		want := ix.AppendLookup(nil, keys[slot[i]].Addr)
		if !ok[i] {
			want = nil
		}
		if len(da[i]) != len(want) || len(db[i]) != len(want) || len(dc[i]) != len(want) {
			t.Fatalf("address %d: %d, %d and %d frames, index has %d", i, len(da[i]), len(db[i]), len(dc[i]), len(want))
		}
		for k, w := range want {
			link := w.LinkageName
			if link == w.Function {
				link = ""
			}
			exp := symbolizecodec.Frame{Function: w.Function, LinkageName: link, File: w.File, Line: w.Line, Column: w.Column, StartLine: w.StartLine}
			if da[i][k] != exp || db[i][k] != exp || dc[i][k] != exp {
				t.Fatalf("address %d frame %d: %+v / %+v / %+v, want %+v", i, k, da[i][k], db[i][k], dc[i][k], exp)
			}
		}
		if len(want) > 0 {
			resolved++
		}
		if len(want) > 1 {
			inlined++
		}
	}
	if resolved == 0 || inlined == 0 || resolved == len(ok) {
		t.Fatalf("test data too thin: %d of %d resolved, %d with inlines", resolved, len(ok), inlined)
	}
	// Each distinct string travels once, however it was found.
	for _, r := range []*symbolizerv1.ModuleResult{a, b, c} {
		seen := map[string]bool{}
		for _, s := range r.Strings {
			if seen[s] {
				t.Fatalf("string %q twice in the table", s)
			}
			seen[s] = true
		}
	}
}

// frameIDs is a cached value of frames given as six numbers each.
func frameIDs(frames ...[6]uint64) string {
	var b []byte
	for _, f := range frames {
		for _, x := range f {
			b = binary.AppendUvarint(b, x)
		}
	}
	return string(b)
}

// smallTable is a string table of n strings: "", s1, s2, ...
func smallTable(t testing.TB, n int) *index.StringTable {
	b := index.NewBuilder()
	for i := 1; i < n; i++ {
		b.String(fmt.Sprintf("s%d", i))
	}
	ix, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return ix.Strings()
}

func TestAddValueRejectsWhatThisServerDoesNotWrite(t *testing.T) {
	st := smallTable(t, 10)
	good := frameIDs([6]uint64{1, 0, 2, 7, 0, 3})
	for _, tc := range []struct {
		name, v, want string
	}{
		{"truncated frame", good[:len(good)-2], "frame 0 field 4: bad or truncated number"},
		{"string outside the table", frameIDs([6]uint64{10, 0, 2, 7, 0, 3}), "frame 0 names a string outside the table of 10"},
		{"file outside the table", frameIDs([6]uint64{1, 0, 1 << 20, 7, 0, 3}), "outside the table"},
		{"line over 32 bits", frameIDs([6]uint64{1, 0, 2, 1 << 33, 0, 3}), "frame 0 field 3: bad or truncated number"},
		{"overlong varint", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", "bad or truncated number"},
		{"second frame bad", good + frameIDs([6]uint64{1, 0, 2, 7, 1 << 40, 3}), "frame 1 field 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(st, 2)
			defer tb.release()
			if err := tb.addValue(0, good); err != nil {
				t.Fatal(err)
			}
			err := tb.addValue(1, tc.v)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			// Nothing of the rejected value is kept.
			if tb.rows() != 1 {
				t.Fatalf("%d rows after the rejected value", tb.rows())
			}
			res := &symbolizerv1.ModuleResult{}
			tb.emit(res, []bool{true, true}, []int{0, 1})
			if !slices.Equal(res.FrameCounts, []uint32{1, 0}) {
				t.Fatalf("frame counts %v after the rejected value, want [1 0]", res.FrameCounts)
			}
		})
	}
}

// TestPooledTablesStartClean: a table taken from the pool, after serving another string
// table, interns from scratch.
func TestPooledTablesStartClean(t *testing.T) {
	big, small := smallTable(t, 50), smallTable(t, 5)
	for round := range 3 {
		for _, st := range []*index.StringTable{big, small} {
			tb := newTable(st, 1)
			if err := tb.addValue(0, frameIDs([6]uint64{4, 3, 2, 1, 0, 0}, [6]uint64{4, 0, 3, 2, 0, 0})); err != nil {
				t.Fatal(err)
			}
			tb.internPending()
			want := []string{"", st.String(4), st.String(3), st.String(2)}
			if !slices.Equal(tb.b.Strings(), want) {
				t.Fatalf("round %d: strings %q, want %q", round, tb.b.Strings(), want)
			}
			tb.release()
		}
	}
}

func FuzzAddValue(f *testing.F) {
	f.Add(frameIDs([6]uint64{1, 2, 3, 7, 2, 1}))
	f.Add(frameIDs([6]uint64{1, 0, 0, 0, 0, 0}, [6]uint64{2, 0, 3, 3, 0, 0}))
	f.Add("")
	st := smallTable(f, 8)
	f.Fuzz(func(t *testing.T, v string) {
		tb := newTable(st, 1)
		defer tb.release()
		if err := tb.addValue(0, v); err != nil {
			if tb.rows() != 0 {
				t.Fatal("rows kept from a rejected value")
			}
			return
		}
		res := &symbolizerv1.ModuleResult{}
		tb.emit(res, []bool{true}, []int{0})
		// Whatever was accepted must make a response that marshals and decodes.
		b, err := proto.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		var back symbolizerv1.ModuleResult
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if _, err := symbolizecodec.Decode(&back, 1); err != nil {
			t.Fatal(err)
		}
	})
}

// cachedAnswer is a 10,000-address answer's result cache values and string table, from
// PROFSYM_BENCH_BINARY (a large binary shows what memory costs) or a small test program.
func cachedAnswer(b *testing.B) (st *index.StringTable, vals []string, ok []bool, slot []int) {
	path := os.Getenv("PROFSYM_BENCH_BINARY")
	if path == "" {
		path = testsupport.CompileC(b, src, "-g", "-O2")
	}
	ix, _, err := debuginfo.OpenIndex(path, debuginfo.Options{})
	if err != nil {
		b.Fatal(err)
	}
	// The table as a replica reads it: unmarshaled on its own, not the index's.
	st, err = index.UnmarshalStrings(ix.MarshalStrings())
	if err != nil {
		b.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	var lo, hi uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Filesz > hi-lo {
			lo, hi = p.Vaddr, p.Vaddr+p.Filesz
		}
	}
	f.Close()
	const n = 10000
	r := rand.New(rand.NewPCG(1, 2))
	addrs := make([]uint64, n)
	ok, slot = make([]bool, n), make([]int, n)
	for i := range addrs {
		addrs[i], ok[i] = lo+r.Uint64N(hi-lo), true
	}
	uniq := distinct(addrs, ok, slot)
	keys := make([]resultcache.Key, len(uniq))
	for j, a := range uniq {
		keys[j] = resultcache.Key{Addr: a}
	}
	return st, newTable(ix.Strings(), len(keys)).lookup(ix, keys, nil, true), ok, slot
}

// BenchmarkAnswerFromCache measures what a replica without the index does with 10,000 cached
// values once Redis has answered: parse them against the stored string table, lay out the
// answer and encode it. PROFSYM_BENCH_BINARY points it at a large binary (the string table's
// size is what makes the difference) instead of the tiny test program.
func BenchmarkAnswerFromCache(b *testing.B) {
	st, vals, ok, slot := cachedAnswer(b)
	buf := make([]byte, 0, 4<<20)
	b.ReportAllocs()
	for b.Loop() {
		t := newTable(st, len(vals))
		for j, v := range vals {
			if err := t.addValue(j, v); err != nil {
				b.Fatal(err)
			}
		}
		res := &symbolizerv1.ModuleResult{Status: symbolizerv1.ModuleStatus_MODULE_STATUS_OK}
		t.emit(res, ok, slot)
		out, err := symbolizecodec.Codec{}.MarshalAppend(buf[:0], &symbolizerv1.SymbolizeResponse{Modules: []*symbolizerv1.ModuleResult{res}})
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(out)))
		t.release()
	}
}

// BenchmarkInternColdCache: interning an answer's strings when the string table is out of
// the CPU's caches, as it is in a server whose Redis shares them, value by value against a
// cache read's worth at a time (what the server does).
func BenchmarkInternColdCache(b *testing.B) {
	st, vals, _, _ := cachedAnswer(b)
	evict := make([]byte, 256<<20)
	for _, tc := range []struct {
		name  string
		every int
	}{{"by value", 1}, {"by read", fetchChunk}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				for i := 0; i < len(evict); i += 64 {
					evict[i]++
				}
				b.StartTimer()
				t := newTable(st, len(vals))
				for j, v := range vals {
					if err := t.addValue(j, v); err != nil {
						b.Fatal(err)
					}
					if (j+1)%tc.every == 0 {
						t.internPending()
					}
				}
				t.internPending()
				t.release()
			}
		})
	}
}

// Numbers of every varint length read back as written, in every field.
func TestAddValueNumbers(t *testing.T) {
	st := smallTable(t, 3)
	for _, x := range []uint64{0, 1, 127, 128, 1<<14 - 1, 1 << 14, 1<<21 - 1, 1 << 21, 1<<28 - 1, 1 << 28, 1<<32 - 1} {
		tb := newTable(st, 1)
		v := frameIDs([6]uint64{1, 2, 1, x, x, x}, [6]uint64{2, 0, 0, x, 0, x})
		if err := tb.addValue(0, v); err != nil {
			t.Fatalf("%d: %v", x, err)
		}
		u := uint32(x)
		res := &symbolizerv1.ModuleResult{}
		tb.emit(res, []bool{true}, []int{0})
		ft := res.GetFrames()
		if !slices.Equal(ft.GetLines(), []uint32{u, u}) || !slices.Equal(ft.GetColumns(), []uint32{u, 0}) || !slices.Equal(ft.GetStartLines(), []uint32{u, u}) {
			t.Fatalf("%d: lines %v, columns %v, start lines %v", x, ft.GetLines(), ft.GetColumns(), ft.GetStartLines())
		}
		tb.release()
	}
}

// The answer's strings are copies of the index's, across as many of the arena's buffers as
// they need, and one longer than a buffer gets one of its own.
func TestArenaCopies(t *testing.T) {
	b := index.NewBuilder()
	var want []string
	for i := range 3000 {
		want = append(want, fmt.Sprintf("%04d%s", i, strings.Repeat("x", 200)))
	}
	want = append(want, strings.Repeat("y", 600<<10)) // over the arena's 256 KiB buffers
	ids := make([]uint64, len(want))
	for i, s := range want {
		ids[i] = uint64(b.String(s))
	}
	ix, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	st := ix.Strings()
	tb := newTable(st, len(want))
	defer tb.release()
	for j, id := range ids {
		if err := tb.addValue(j, frameIDs([6]uint64{id, 0, 0, 1, 0, 0})); err != nil {
			t.Fatal(err)
		}
	}
	tb.internPending()
	if !slices.Equal(tb.b.Strings()[1:], want) {
		t.Fatal("the answer's strings differ from the table's")
	}
	for i, s := range tb.b.Strings()[1:] {
		if unsafe.StringData(s) == unsafe.StringData(st.String(uint32(ids[i]))) {
			t.Fatalf("string %d is the table's, not a copy", i)
		}
	}
}

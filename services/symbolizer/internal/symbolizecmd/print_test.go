package symbolizecmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestParseAddressBytes: the reader's parser agrees with ParseAddress on what its fast paths
// take and on what they leave to it.
func TestParseAddressBytes(t *testing.T) {
	for _, in := range []string{
		"0x1160", "0X1160", "0xABCdef", "0xffffffffffffffff", "0x0000000000000001", "0x00000000000000001",
		"0x1ffffffffffffffff", "0x", "0xg", "0x-1", "4448", "0", "00", "0123", "18446744073709551615",
		"18446744073709551616", "9999999999999999999", "99999999999999999999", "-1", "+1", "1_000",
		"0x1_0", "main", "1 2", "0x1\x00",
	} {
		got, ok := parseAddressBytes([]byte(in))
		want, err := ParseAddress(in)
		if ok != (err == nil) || ok && got != want {
			t.Errorf("parseAddressBytes(%q) = %#x, %v; ParseAddress: %#x, %v", in, got, ok, want, err)
		}
	}
}

func FuzzParseAddressBytes(f *testing.F) {
	for _, s := range []string{"0x1160", "4448", "0x", "18446744073709551616", "0xffffffffffffffff", "0123"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parseAddressBytes(b)
		want, err := ParseAddress(string(b))
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("parseAddressBytes(%q) = %#x, %v; ParseAddress: %#x, %v", b, got, ok, want, err)
		}
	})
}

// quoteJSON is encoding/json's quoting without HTML escaping, which llvm-symbolizer's matches.
func quoteJSON(t testing.TB, s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "main", "a\"b", "std::vector<int>", "\x1f\x7f\x80", "ü", "0123456789abcdef\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(appendJSONString(nil, s)), quoteJSON(t, s); got != want {
			t.Fatalf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	})
}

// TestAppendStringRemembers: what appendString remembers of a string ID (plain or not) gives
// the same quoting the second time, and IDs beyond what it has seen grow its memory.
func TestAppendStringRemembers(t *testing.T) {
	var p printer
	strs := map[uint32]string{0: "", 1: "main", 7: `say "hi"`, 3: "a\tb", 100: "std::map<int, int>::find"}
	for round := range 2 {
		for id, s := range strs {
			if got, want := string(p.appendString(nil, s, id)), quoteJSON(t, s); got != want {
				t.Errorf("round %d, string %d: %s, want %s", round, id, got, want)
			}
		}
	}
	if got, want := string(p.appendString(nil, "x\ny", unknownID)), quoteJSON(t, "x\ny"); got != want {
		t.Errorf("a string with no ID: %s, want %s", got, want)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestWriteErrorReported: a failed write ends the run with its error, for addresses read
// from stdin and given as arguments.
func TestWriteErrorReported(t *testing.T) {
	bin, addrs := build(t)
	for _, args := range [][]string{nil, addrs} {
		c := &Cmd{Obj: bin, OutputStyle: "JSON", Inlines: true, NoCache: true, Addresses: args}
		err := c.run(strings.NewReader(strings.Repeat(strings.Join(addrs, "\n")+"\n", 500)), failingWriter{})
		if err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("arguments %v: err = %v, want the write's error", args != nil, err)
		}
	}
}

// TestAppendNumbers: appendHex and appendDec write what strconv writes, at every digit count
// and at the edges of their types.
func TestAppendNumbers(t *testing.T) {
	hex := []uint64{0, 1, 9, 10, 15, 16, 255, 256, 0x401000, 0xdeadbeef, 1<<63 - 1, 1 << 63, ^uint64(0)}
	dec := []uint32{0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 65535, 1e6, 1e9 - 1, 1e9, ^uint32(0)}
	for v := uint64(1); v != 0; v <<= 1 {
		hex = append(hex, v, v-1, v+1)
	}
	for v := uint32(1); v < 1e9; v *= 10 {
		dec = append(dec, v-1, v, v+1, 3*v)
	}
	for _, v := range hex {
		if got, want := string(appendHex([]byte("x"), v)), "x"+strconv.FormatUint(v, 16); got != want {
			t.Errorf("appendHex(%d) = %q, want %q", v, got, want)
		}
	}
	for _, v := range dec {
		if got, want := string(appendDec([]byte("x"), v)), "x"+strconv.FormatUint(uint64(v), 10); got != want {
			t.Errorf("appendDec(%d) = %q, want %q", v, got, want)
		}
	}
}

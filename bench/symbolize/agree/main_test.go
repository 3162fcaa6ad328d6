package main

import (
	"strings"
	"testing"
)

const llvmJSON = `{"Address":"0x1154","ModuleName":"t","Symbol":[{"Column":72,"FileName":"/src/t.c","FunctionName":"sq","Line":2},{"Column":48,"FileName":"/src/t.c","FunctionName":"f","Line":3}]}
{"Address":"0x1150","ModuleName":"t","Symbol":[{"Column":39,"FileName":"/src/./t.c","FunctionName":"f","Line":3}]}
{"Address":"0x9999","ModuleName":"t","Symbol":[{"FileName":"","FunctionName":"??","Line":0}]}
`

func TestCompare(t *testing.T) {
	tests := []struct {
		name, format, cand        string
		innermost, fn, loc, chain int
		wantErr                   string
	}{
		{name: "same JSON", format: "llvm-json", cand: llvmJSON, innermost: 3, fn: 3, loc: 3, chain: 3},
		{name: "eu agrees", format: "eu", cand: "0x1154\nsq inlined at /src/t.c:3:48 in f\n/src/t.c:2:72\nf\n/src/t.c:3:48\n0x1150\nf\n/src/t.c:3:39\n0x9999\n??\n??:0\n", innermost: 3, fn: 3, loc: 3, chain: 3},
		{name: "eu misses the inline frame", format: "eu", cand: "0x1154\nf\n/src/t.c:3\n0x1150\nf\n/src/t.c:3\n0x9999\n??\n??:0\n", innermost: 2, fn: 2, loc: 2, chain: 2},
		{name: "go addr2line outer function, inner line", format: "goa2l", cand: "f\n/src/t.c:2\nf\n/src/t.c:3\n?\n?:0\n", innermost: 2, fn: 2, loc: 3, chain: -1},
		{name: "wrong line", format: "goa2l", cand: "sq\n/src/t.c:2\nf\n/src/t.c:4\n?\n?:0\n", innermost: 2, fn: 3, loc: 2, chain: -1},
		{name: "fewer answers", format: "goa2l", cand: "sq\n/src/t.c:2\n", wantErr: "not the same addresses"},
		{name: "eu without file line", format: "eu", cand: "0x1154\nsq\n", wantErr: "no file:line"},
		{name: "bad line number", format: "goa2l", cand: "sq\n/src/t.c:x\n", wantErr: "line"},
		{name: "unknown format", format: "csv", cand: "", wantErr: "unknown format"},
	}
	ref, err := parse(strings.NewReader(llvmJSON), "llvm-json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cand, err := parse(strings.NewReader(tt.cand), tt.format)
			var r Result
			if err == nil {
				r, err = compare(ref, cand, tt.format != "goa2l")
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Addresses != 3 || r.Innermost != tt.innermost || r.Function != tt.fn || r.Location != tt.loc || r.Chain != tt.chain {
				t.Errorf("got %+v, want 3 addresses, innermost %d, function %d, location %d, chain %d", r, tt.innermost, tt.fn, tt.loc, tt.chain)
			}
		})
	}
}

// FuzzParse: no input makes a parser panic.
func FuzzParse(f *testing.F) {
	f.Add(llvmJSON, "llvm-json")
	f.Add("0x1\nf\na.c:1:2\n", "eu")
	f.Add("f\na.c:1\n", "goa2l")
	f.Fuzz(func(t *testing.T, in, format string) {
		_, _ = parse(strings.NewReader(in), format)
	})
}

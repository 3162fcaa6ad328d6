package debugfile

import (
	"bytes"
	"strings"
	"testing"
)

// The section layouts dwz writes: .gnu_debugaltlink is name, NUL, build ID; .debug_sup is
// version 5 (2 bytes), is_supplementary, name, NUL, ULEB128 length, checksum.
func altLink(name string, id []byte) []byte {
	return append(append([]byte(name), 0), id...)
}

func debugSup(isSup byte, name string, sum []byte) []byte {
	b := []byte{5, 0, isSup}
	b = append(append(b, name...), 0)
	return append(append(b, byte(len(sum))), sum...)
}

var id20 = bytes.Repeat([]byte{0xab}, 20)

func TestParseSupLink(t *testing.T) {
	hexID := strings.Repeat("ab", 20)
	for _, c := range []struct {
		name    string
		data    []byte
		sup     bool // .debug_sup rather than .gnu_debugaltlink
		want    SupLink
		isSup   bool
		wantErr string
	}{
		{name: "altlink", data: altLink("/usr/lib/debug/.dwz/x86_64-linux-gnu/pkg.debug", id20),
			want: SupLink{Section: SectionAltLink, Name: "/usr/lib/debug/.dwz/x86_64-linux-gnu/pkg.debug", ID: hexID}},
		{name: "altlink without name", data: altLink("", id20), wantErr: "no NUL-terminated file name"},
		{name: "altlink without NUL", data: []byte("common.debug"), wantErr: "no NUL-terminated file name"},
		{name: "altlink without ID", data: altLink("common.debug", nil), wantErr: "build ID of 0 bytes"},
		{name: "sup link", sup: true, data: debugSup(0, "common.debug", id20),
			want: SupLink{Section: SectionSup, Name: "common.debug", ID: hexID}},
		{name: "supplementary itself", sup: true, data: debugSup(1, "", id20), isSup: true,
			want: SupLink{Section: SectionSup, ID: hexID}},
		{name: "sup version 4", sup: true, data: append([]byte{4}, debugSup(0, "x", id20)[1:]...), wantErr: "version 4"},
		{name: "sup flag 2", sup: true, data: debugSup(2, "x", id20), wantErr: "is_supplementary 2"},
		{name: "sup checksum length beyond data", sup: true, data: debugSup(0, "x", id20)[:20], wantErr: "checksum of 20 bytes in"},
		{name: "sup without name", sup: true, data: debugSup(0, "", id20), wantErr: "no file name"},
		{name: "sup truncated", sup: true, data: []byte{5, 0}, wantErr: "too short"},
		{name: "sup unterminated length", sup: true, data: []byte{5, 0, 0, 'x', 0, 0x80}, wantErr: "truncated checksum length"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got SupLink
			var isSup bool
			var err error
			if c.sup {
				isSup, got, err = ParseDebugSup(c.data)
			} else {
				got, err = ParseAltLink(c.data)
			}
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want || isSup != c.isSup {
				t.Fatalf("got %+v (supplementary %v, err %v), want %+v (supplementary %v)", got, isSup, err, c.want, c.isSup)
			}
		})
	}
}

func FuzzParseSupLink(f *testing.F) {
	f.Add(altLink("common.debug", id20))
	f.Add(debugSup(0, "common.debug", id20))
	f.Add(debugSup(1, "", id20))
	f.Fuzz(func(t *testing.T, data []byte) {
		if l, err := ParseAltLink(data); err == nil && (l.Name == "" || l.ID == "") {
			t.Fatalf("ParseAltLink accepted %q as %+v", data, l)
		}
		if isSup, l, err := ParseDebugSup(data); err == nil && (l.ID == "" || !isSup && l.Name == "") {
			t.Fatalf("ParseDebugSup accepted %q as %+v", data, l)
		}
	})
}

package procmaps

import (
	"errors"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    Entry
		wantErr bool
	}{
		{
			name: "library",
			line: "7f3c2a000000-7f3c2a021000 r-xp 00002000 fd:01 1234567                    /usr/lib/x86_64-linux-gnu/libc.so.6",
			want: Entry{Start: 0x7f3c2a000000, End: 0x7f3c2a021000, Read: true, Exec: true, Private: true, Offset: 0x2000,
				DevMajor: 0xfd, DevMinor: 1, Inode: 1234567, Path: "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		},
		{
			name: "anonymous",
			line: "7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0 ",
			want: Entry{Start: 0x7ffd1c000000, End: 0x7ffd1c021000, Read: true, Write: true, Private: true},
		},
		{
			name: "anonymous without trailing space",
			line: "7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0",
			want: Entry{Start: 0x7ffd1c000000, End: 0x7ffd1c021000, Read: true, Write: true, Private: true},
		},
		{
			name: "pseudo path",
			line: "7ffd1c1f0000-7ffd1c1f2000 r-xp 00000000 00:00 0                          [vdso]",
			want: Entry{Start: 0x7ffd1c1f0000, End: 0x7ffd1c1f2000, Read: true, Exec: true, Private: true, Path: "[vdso]"},
		},
		{
			name: "deleted file with spaces",
			line: "00400000-00401000 r-xs 00000000 08:02 42 /tmp/my dir/a.out (deleted)",
			want: Entry{Start: 0x400000, End: 0x401000, Read: true, Exec: true, Offset: 0, DevMajor: 8, DevMinor: 2, Inode: 42,
				Path: "/tmp/my dir/a.out", Deleted: true},
		},
		{name: "no dash", line: "00400000 r-xp 00000000 08:02 42 /a", wantErr: true},
		{name: "bad start", line: "zz-00401000 r-xp 00000000 08:02 42 /a", wantErr: true},
		{name: "empty range", line: "00401000-00400000 r-xp 00000000 08:02 42 /a", wantErr: true},
		{name: "short perms", line: "00400000-00401000 r-x 00000000 08:02 42 /a", wantErr: true},
		{name: "bad offset", line: "00400000-00401000 r-xp 0000g000 08:02 42 /a", wantErr: true},
		{name: "bad device", line: "00400000-00401000 r-xp 00000000 0802 42 /a", wantErr: true},
		{name: "bad inode", line: "00400000-00401000 r-xp 00000000 08:02 -1 /a", wantErr: true},
		{name: "truncated", line: "00400000-00401000 r-xp", wantErr: true},
		{name: "garbage", line: "\x00\xff", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLine(tt.line)
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("ParseLine(%q) err = %v, want ErrMalformed", tt.line, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLine(%q): %v", tt.line, err)
			}
			if got != tt.want {
				t.Errorf("ParseLine(%q)\n got %+v\nwant %+v", tt.line, got, tt.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	in := "00400000-00401000 r-xp 00000000 08:02 42 /bin/a\n\n7ffd1c1f0000-7ffd1c1f2000 r-xp 00000000 00:00 0 [vdso]\n"
	got, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].FileBacked() || got[1].FileBacked() {
		t.Errorf("Parse = %+v", got)
	}
	if _, err := Parse(strings.NewReader("00400000-00401000 r-xp 00000000 08:02 42 /a\nbad line\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("Parse of a bad second line: err = %v, want one naming line 2", err)
	}
	long := "00400000-00401000 r-xp 00000000 08:02 42 /" + strings.Repeat("a", 10000) + "\n"
	if _, err := Parse(strings.NewReader(long)); err == nil {
		t.Error("Parse accepted a line longer than any kernel writes")
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add("7f3c2a000000-7f3c2a021000 r-xp 00002000 fd:01 1234567 /usr/lib/libc.so.6")
	f.Add("00400000-00401000 r-xs 00000000 08:02 42 /tmp/my dir/a.out (deleted)")
	f.Fuzz(func(t *testing.T, line string) {
		e, err := ParseLine(line)
		if err == nil && e.End <= e.Start {
			t.Fatalf("accepted empty range: %+v", e)
		}
	})
}
